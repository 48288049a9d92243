#include <cstdlib>
#include <new>

#include "absl/strings/str_cat.h"
#include "tensor/allocator.h"
#include "tensor/cuda/cuda_backend.h"

namespace mirrortrain {
namespace {

class AlignedCpuAllocator final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment.
    size_t rounded =
        (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    if (rounded == 0) rounded = kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", bytes, " bytes failed"));
    }
    return ptr;
  }
  void Deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return Device::Cpu(); }
};

}  // namespace

Allocator* CpuAllocator() {
  static auto* allocator = new AlignedCpuAllocator();
  return allocator;
}

absl::StatusOr<Allocator*> AllocatorFor(const Device& device) {
  if (device.is_cpu()) return CpuAllocator();
  return cuda::DeviceAllocator(device.index);
}

}  // namespace mirrortrain
