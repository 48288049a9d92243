// Device discovery, streams, copies and the caching allocator.
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cublas_library.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

thread_local cudaStream_t current_stream = nullptr;
// ScopedGraphMemoryPool's pool for this thread's allocations (0: none).
thread_local uint64_t current_graph_pool = 0;

cudaStream_t ThreadStream() {
  return current_stream != nullptr ? current_stream : cudaStreamPerThread;
}

// Caches freed blocks so a steady-state training step never calls
// cudaMalloc/cudaFree. Blocks are rounded up to 512 bytes and belong to the
// stream that was current when they were allocated; a freed block goes back
// to that stream's pool at once, without waiting for the GPU, because every
// later user of the pool is ordered after the earlier work on that stream
// (PyTorch's caching allocator makes the same bargain). A request takes the
// smallest block of its stream's pool at least as large and at most twice
// as large.
//
// Contract for work on other streams (the communication stream): it must be
// finished (its stream synchronised) before the last reference to a block it
// uses is dropped. MirroredStrategy's communication thread does that.
//
// A CUDA graph's memory (ScopedGraphMemoryPool) is one more owner: blocks
// allocated under a pool id are reused only under that id, so what a
// captured step writes on replay is never lent to eager work in between.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t rounded = RoundUp(bytes);
    const Owner owner = CurrentOwner();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound({owner, rounded});
      if (it != free_.end() && it->first.first == owner &&
          it->first.second <= 2 * rounded) {
        void* ptr = it->second;
        blocks_[ptr] = {it->first.second, owner};
        stats_.bytes_cached -= static_cast<int64_t>(it->first.second);
        stats_.bytes_in_use += static_cast<int64_t>(it->first.second);
        free_.erase(it);
        return ptr;
      }
    }
    DeviceGuard guard;
    MT_RETURN_IF_ERROR(guard.Set(device_));
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, rounded);
    if (err != cudaSuccess) {
      // Out of memory: give the cache back to the driver and retry once;
      // not while this thread captures a graph, where the device-wide
      // synchronisation would invalidate the capture.
      cudaGetLastError();
      if (std::get<2>(owner) != 0) MT_CUDA_RETURN_IF_ERROR(err);
      ReleaseCached();
      MT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, rounded));
    }
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[ptr] = {rounded, owner};
    ++stats_.device_mallocs;
    stats_.bytes_in_use += static_cast<int64_t>(rounded);
    return ptr;
  }

  void Deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;
    free_.emplace(std::make_pair(it->second.owner, it->second.size), ptr);
    stats_.bytes_in_use -= static_cast<int64_t>(it->second.size);
    stats_.bytes_cached += static_cast<int64_t>(it->second.size);
    blocks_.erase(it);
  }

  Device device() const override { return Device::Cuda(device_); }

  DeviceMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void ReleaseGraphPool(uint64_t pool) {
    if (pool != 0) ReleaseCached(pool);
  }

 private:
  // The stream a block is ordered on. cudaStreamPerThread is one handle
  // for a different stream in every thread, so for it the thread is part
  // of the identity; a graph memory pool id, when one is in scope, too.
  using Owner = std::tuple<cudaStream_t, std::thread::id, uint64_t>;
  static Owner CurrentOwner() {
    const cudaStream_t stream = ThreadStream();
    return {stream,
            stream == cudaStreamPerThread ? std::this_thread::get_id()
                                          : std::thread::id(),
            current_graph_pool};
  }
  struct Block {
    size_t size;
    Owner owner;
  };

  static size_t RoundUp(size_t bytes) {
    constexpr size_t kQuantum = 512;
    return bytes == 0 ? kQuantum : (bytes + kQuantum - 1) / kQuantum * kQuantum;
  }
  // The free blocks of graph pool `pool` (0: the eager owners') back to
  // the driver.
  void ReleaseCached(uint64_t pool = 0) {
    // Cached blocks may still be in use by queued work of their streams.
    DeviceGuard guard;
    if (guard.Set(device_).ok()) cudaDeviceSynchronize();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end();) {
      // Another graph pool's free blocks are its graph's temporaries
      // between replays: they stay.
      if (std::get<2>(it->first.first) != pool) {
        ++it;
        continue;
      }
      if (cudaFree(it->second) == cudaSuccess) ++stats_.device_frees;
      stats_.bytes_cached -= static_cast<int64_t>(it->first.second);
      it = free_.erase(it);
    }
    cudaGetLastError();  // Best effort: not blamed on later calls.
  }

  const int device_;
  std::mutex mu_;
  // Free blocks by (owner, size); blocks handed out by pointer.
  std::multimap<std::pair<Owner, size_t>, void*> free_;
  std::map<void*, Block> blocks_;
  DeviceMemoryStats stats_;
};

// Pinned host blocks, cached per exact size (input staging buffers repeat
// the same few sizes). Freed blocks are reused at once: their users finish
// the copies reading them before dropping them (Event after the copy).
class PinnedHostCache final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t size = bytes == 0 ? 1 : bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* ptr = it->second;
        free_.erase(it);
        return ptr;
      }
    }
    void* ptr = nullptr;
    MT_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&ptr, size, cudaHostAllocPortable));
    return ptr;
  }
  void Deallocate(void* ptr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace(bytes == 0 ? 1 : bytes, ptr);
  }
  Device device() const override { return Device::Cpu(); }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
};

}  // namespace

bool Built() { return true; }

uint64_t SetThreadGraphMemoryPool(uint64_t pool_id) {
  return std::exchange(current_graph_pool, pool_id);
}

absl::StatusOr<Allocator*> PinnedHostAllocator() {
  if (DeviceCount() == 0) {
    return absl::FailedPreconditionError("pinned host memory needs a GPU");
  }
  static auto* allocator = new PinnedHostCache();
  return allocator;
}

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // No driver or no device: clear the sticky error.
    return 0;
  }
  return count;
}

absl::Status CheckDevice(int device) {
  int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu:", device, " requested but ", count, " GPU(s) are visible"));
  }
  return absl::OkStatus();
}

namespace {

__global__ void KernelImageProbe() {}

absl::Status CheckKernelImage(int device) {
  MT_RETURN_IF_ERROR(CheckDevice(device));
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaFuncAttributes attributes;
  const cudaError_t e = cudaFuncGetAttributes(&attributes, KernelImageProbe);
  if (e != cudaErrorNoKernelImageForDevice &&
      e != cudaErrorInvalidDeviceFunction) {
    MT_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  }
  cudaGetLastError();  // Said here: not blamed on later calls.
  cudaDeviceProp properties;
  MT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
  return absl::FailedPreconditionError(absl::StrCat(
      "gpu:", device, " is ", properties.name, " (compute capability ",
      properties.major, ".", properties.minor,
      "), which this build has no kernels for: it was built for CUDA "
      "architectures ",
      MT_CUDA_ARCHITECTURES,
      "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=", properties.major,
      properties.minor, " (scripts/setup.sh passes its arguments to cmake)"));
}

absl::Status CreateContexts(const std::vector<int>& devices) {
  for (int device : devices) {
    // Checked first, so that a missing GPU is an error of ours, not a CUDA
    // API error (compute-sanitizer reports those).
    MT_RETURN_IF_ERROR(CheckDevice(device));
    DeviceGuard guard;
    MT_RETURN_IF_ERROR(guard.Set(device));
    // The runtime creates the primary context at its first call that
    // needs one.
    MT_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckKernelImages(const std::vector<int>& devices) {
  for (int device : devices) MT_RETURN_IF_ERROR(CheckKernelImage(device));
  return absl::OkStatus();
}

absl::Status StartDevices(const std::vector<int>& devices) {
  // Joined on every path: the process may not exit while cuBLASLt's
  // initialisers run (cublas_library.h).
  std::thread load([] { (void)LoadCublas(); });
  const absl::Status s = CreateContexts(devices);
  load.join();
  return s;
}

namespace {

// Every tensor allocation comes here, so no driver call and no lock: the
// allocators are made once for the GPUs visible at first use.
absl::StatusOr<CachingAllocator*> CachingAllocatorOf(int device) {
  static const auto* allocators = [] {
    // The first GPU allocation of a process with GPUs: a GPU job, which
    // will want cuBLAS; loading it takes a while (cublas_library.h), here
    // while the job's data loads. A failure is reported by the products.
    if (DeviceCount() > 0) (void)LoadCublas();
    auto* all = new std::vector<std::unique_ptr<CachingAllocator>>;
    for (int d = 0; d < DeviceCount(); ++d) {
      all->push_back(std::make_unique<CachingAllocator>(d));
    }
    return all;
  }();
  if (device < 0 || device >= static_cast<int>(allocators->size())) {
    MT_RETURN_IF_ERROR(CheckDevice(device));
    return absl::FailedPreconditionError(
        absl::StrCat("gpu:", device, " appeared after the first allocation"));
  }
  return (*allocators)[device].get();
}

}  // namespace

absl::StatusOr<Allocator*> DeviceAllocator(int device) {
  MT_ASSIGN_OR_RETURN(CachingAllocator * allocator, CachingAllocatorOf(device));
  return allocator;
}

absl::Status ReleaseGraphMemoryPool(int device, uint64_t pool_id) {
  MT_ASSIGN_OR_RETURN(CachingAllocator * allocator, CachingAllocatorOf(device));
  allocator->ReleaseGraphPool(pool_id);
  return absl::OkStatus();
}

absl::StatusOr<DeviceMemoryStats> GetDeviceMemoryStats(int device) {
  MT_ASSIGN_OR_RETURN(CachingAllocator * allocator, CachingAllocatorOf(device));
  return allocator->stats();
}

void SetCurrentStream(StreamHandle stream) {
  current_stream = static_cast<cudaStream_t>(stream);
}
StreamHandle CurrentStream() { return current_stream; }

absl::Status Memset(void* ptr, int value, size_t bytes, int device) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  MT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr, value, bytes, ThreadStream()));
  return absl::OkStatus();
}

absl::Status Copy(void* dst, Device dst_device, const void* src,
                  Device src_device, size_t bytes) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(
      guard.Set(dst_device.is_cuda() ? dst_device.index : src_device.index));
  if (dst_device.is_cuda() && src_device.is_cuda() &&
      dst_device.index != src_device.index) {
    // The source was written by some stream of the other GPU that this
    // thread's stream is not ordered after: finish that GPU's work first,
    // and the copy before returning. For restores and checks between steps
    // only: during a step it would also wait for in-flight collectives.
    {
      DeviceGuard source;
      MT_RETURN_IF_ERROR(source.Set(src_device.index));
      MT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    }
    MT_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(
        dst, dst_device.index, src, src_device.index, bytes, ThreadStream()));
    MT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ThreadStream()));
    return absl::OkStatus();
  }
  MT_RETURN_IF_ERROR(CopyAsync(dst, dst_device, src, src_device, bytes));
  if (dst_device.is_cpu() || src_device.is_cpu()) {
    MT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ThreadStream()));
  }
  return absl::OkStatus();
}

absl::Status CopyAsync(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(
      guard.Set(dst_device.is_cuda() ? dst_device.index : src_device.index));
  MT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ThreadStream()));
  return absl::OkStatus();
}

absl::Status Synchronize(int device) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  MT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ThreadStream()));
  return absl::OkStatus();
}

}  // namespace mirrortrain::cuda
