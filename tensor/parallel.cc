#include "tensor/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "tensor/cpu_threads.h"
#include "tensor/thread_pool.h"

namespace mirrortrain {
namespace {

// The kernel pool: HardwareConcurrency() - 1 workers (the caller is the
// last thread). Never destroyed: kernels may run during static destruction
// of other objects.
ThreadPool& Pool() {
  static auto* pool = new ThreadPool(HardwareConcurrency() - 1);
  return *pool;
}

}  // namespace

void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  ThreadPool& pool = Pool();
  const int64_t threads =
      std::min<int64_t>({static_cast<int64_t>(CpuMathThreads()),
                         static_cast<int64_t>(pool.size()) + 1,
                         n / std::max<int64_t>(min_chunk, 1)});
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  // Completion: workers decrement `remaining` under `mu`; the caller polls it
  // briefly (most chunks take microseconds), then blocks. Taking `mu` once
  // before returning guarantees no worker still touches this stack frame.
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int64_t> remaining{threads - 1};
  for (int64_t t = 1; t < threads; ++t) {
    pool.Post([&, t] {
      fn(n * t / threads, n * (t + 1) / threads);
      std::lock_guard<std::mutex> lock(mu);
      if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        cv.notify_one();
      }
    });
  }
  fn(0, n / threads);
  for (int i = 0; i < 4000 && remaining.load(std::memory_order_acquire) != 0;
       ++i) {
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining.load(std::memory_order_acquire) == 0; });
}

}  // namespace mirrortrain
