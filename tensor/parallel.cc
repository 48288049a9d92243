#include "tensor/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor/cpu_threads.h"

namespace mirrortrain {
namespace {

// A process-wide pool of HardwareConcurrency() - 1 workers (the caller is
// the last thread). Never destroyed: kernels may run during static
// destruction of other objects.
class Pool {
 public:
  static Pool& Get() {
    static auto* pool = new Pool(HardwareConcurrency() - 1);
    return *pool;
  }

  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  int workers() const { return static_cast<int>(threads_.size()); }

 private:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) {
      threads_.emplace_back([this] { Loop(); });
      threads_.back().detach();
    }
  }
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
};

}  // namespace

void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Pool& pool = Pool::Get();
  const int64_t threads = std::min<int64_t>(
      {static_cast<int64_t>(CpuMathThreads()),
       static_cast<int64_t>(pool.workers()) + 1,
       n / std::max<int64_t>(min_chunk, 1)});
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  int64_t remaining = threads - 1;
  for (int64_t t = 1; t < threads; ++t) {
    pool.Post([&, t] {
      fn(n * t / threads, n * (t + 1) / threads);
      std::lock_guard<std::mutex> lock(mu);
      if (--remaining == 0) cv.notify_one();
    });
  }
  fn(0, n / threads);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
}

}  // namespace mirrortrain
