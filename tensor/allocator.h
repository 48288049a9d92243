// Memory allocators. Every Tensor buffer comes from one of these.
//
// Thread contract: implementations are safe to call from any thread.
#ifndef MIRRORTRAIN_TENSOR_ALLOCATOR_H_
#define MIRRORTRAIN_TENSOR_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "tensor/device.h"

namespace mirrortrain {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` of memory on device(); zero bytes gives a valid,
  // non-dereferenceable pointer that must still be passed to Deallocate.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // `ptr` and `bytes` exactly as returned/passed to Allocate.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// Host memory aligned to kCpuAlignment bytes (a cache line; what AVX-512
// loads want). Process-wide singleton, never destroyed. A request larger
// than HostMemoryBytes() is InvalidArgument at once (no run on this machine
// could use it), and one that would take the bytes of all host tensors
// together past it is ResourceExhausted (after the cache of freed blocks
// is given back): with overcommit either could otherwise succeed and end
// the process, with no message, when touched.
inline constexpr size_t kCpuAlignment = 64;
Allocator* CpuAllocator();

// The host's physical memory in bytes, or the memory limit of the cgroup
// (container) this process runs in when that is lower: an upper bound on
// host tensors.
uint64_t HostMemoryBytes();

// The allocator that owns memory of `device`: CpuAllocator() for CPUs, the
// CUDA caching allocator for GPUs (an error when CUDA was not built).
absl::StatusOr<Allocator*> AllocatorFor(const Device& device);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_ALLOCATOR_H_
