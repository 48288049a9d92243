#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tensor/allocator.h"
#include "tensor/cuda/cuda_backend.h"

namespace mirrortrain {
namespace {

// Aligned host memory with a cache of large blocks. A training step
// allocates the same large activations and gradients every step; without
// the cache each would be a fresh mmap whose pages the kernel zero-fills,
// which costs more system time than the step's arithmetic. Blocks of at
// least kCacheMin bytes are rounded to 4 KiB and kept per exact size, up to
// kCacheMax bytes in all.
class CachingCpuAllocator final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    // More than the whole machine is a size no run could use (a config's
    // `units: 2000000000`): an invalid size, not exhaustion now.
    if (bytes > HostMemoryBytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host allocation of ", bytes, " bytes is more than the machine's ",
          HostMemoryBytes(), " bytes of memory"));
    }
    const size_t rounded = Round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return ptr;
      }
    }
    // Tensors together beyond the machine's memory would end the process
    // (the kernel's OOM killer, no message) once touched: refused here,
    // after giving back the cache, as memory running out.
    if (!Hold(rounded)) {
      ReleaseCache();
      if (!Hold(rounded)) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "host allocation of ", bytes, " bytes: tensors hold ",
            held_bytes_.load(std::memory_order_relaxed),
            " bytes already, and together they would pass the machine's ",
            HostMemoryBytes(), " bytes of memory (and its swap)"));
      }
    }
    void* ptr = NewBlock(rounded);
    if (ptr == nullptr) {
      held_bytes_.fetch_sub(rounded, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", bytes, " bytes failed"));
    }
    return ptr;
  }

  void Deallocate(void* ptr, size_t bytes) override {
    const size_t rounded = Round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + rounded <= kCacheMax) {
        free_[rounded].push_back(ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    FreeBlock(ptr, rounded);
  }

  Device device() const override { return Device::Cpu(); }

 private:
  static constexpr size_t kCacheMin = 64 << 10;
  static constexpr size_t kCacheMax = size_t{2} << 30;
  // Blocks of these sizes are mapped with their pages populated in one
  // call: a freshly loaded dataset (Fashion-MNIST's training images are
  // 188 MB of f32) otherwise takes a page fault per 4 KiB on first touch,
  // and the traps cost more than zeroing the pages (188 MB on this VM:
  // about 150 ms populated, 240 ms faulted). Larger blocks stay lazy, so a
  // huge allocation does not commit all its memory at once.
  static constexpr size_t kPopulateMin = size_t{16} << 20;
  static constexpr size_t kPopulateMax = size_t{1} << 30;
  static bool Populated([[maybe_unused]] size_t rounded) {
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer watches malloc'd blocks only (redzones, leaks).
    return false;
#else
    return rounded >= kPopulateMin && rounded <= kPopulateMax;
#endif
  }
  static void* NewBlock(size_t rounded) {
    if (!Populated(rounded)) {
      return std::aligned_alloc(kCpuAlignment, rounded);
    }
    void* ptr = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return ptr == MAP_FAILED ? nullptr : ptr;
  }
  void FreeBlock(void* ptr, size_t rounded) {
    if (Populated(rounded)) {
      munmap(ptr, rounded);
    } else {
      std::free(ptr);
    }
    held_bytes_.fetch_sub(rounded, std::memory_order_relaxed);
  }
  // Counts `rounded` more bytes of blocks if the total stays within the
  // machine's memory and swap (what the kernel lets a process touch before
  // it kills it; a run that swaps is slow, not wrong).
  bool Hold(size_t rounded) {
    static const uint64_t limit = [] {
      struct sysinfo info;
      const uint64_t swap =
          sysinfo(&info) == 0
              ? static_cast<uint64_t>(info.totalswap) * info.mem_unit
              : 0;
      return HostMemoryBytes() + swap;
    }();
    uint64_t held = held_bytes_.load(std::memory_order_relaxed);
    do {
      if (held + rounded > limit) return false;
    } while (!held_bytes_.compare_exchange_weak(held, held + rounded,
                                                std::memory_order_relaxed));
    return true;
  }
  // Frees every cached block.
  void ReleaseCache() {
    absl::flat_hash_map<size_t, std::vector<void*>> cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cached.swap(free_);
      cached_bytes_ = 0;
    }
    for (const auto& [rounded, blocks] : cached) {
      for (void* ptr : blocks) FreeBlock(ptr, rounded);
    }
  }
  static size_t Round(size_t bytes) {
    // aligned_alloc wants a multiple of the alignment; large blocks round to
    // pages so near sizes share a bucket.
    const size_t quantum = bytes >= kCacheMin ? 4096 : kCpuAlignment;
    return std::max<size_t>((bytes + quantum - 1) / quantum * quantum, quantum);
  }

  std::mutex mu_;
  absl::flat_hash_map<size_t, std::vector<void*>> free_;  // Guarded by mu_.
  size_t cached_bytes_ = 0;                               // Guarded by mu_.
  // Bytes of every block mapped now, in use or cached.
  std::atomic<uint64_t> held_bytes_{0};
};

}  // namespace

uint64_t HostMemoryBytes() {
  static const uint64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    // Unknown: no limit beyond what the allocator itself refuses.
    uint64_t physical = ~uint64_t{0} >> 1;
    if (pages > 0 && page_size > 0) {
      physical =
          static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
    }
    // In a container the cgroup's limit is the machine (v2, then v1;
    // "max" or an absurd number when there is none).
    for (const char* limit_file :
         {"/sys/fs/cgroup/memory.max",
          "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
      std::ifstream in(limit_file);
      uint64_t limit = 0;
      if (in >> limit && limit > 0) physical = std::min(physical, limit);
    }
    return physical;
  }();
  return bytes;
}

Allocator* CpuAllocator() {
  static auto* allocator = new CachingCpuAllocator();
  return allocator;
}

absl::StatusOr<Allocator*> AllocatorFor(const Device& device) {
  if (device.is_cpu()) return CpuAllocator();
  return cuda::DeviceAllocator(device.index);
}

}  // namespace mirrortrain
