// A fixed set of threads running posted tasks in FIFO order. An idle
// worker spins briefly before it sleeps, so the back-to-back small tasks
// of a training step (one per kernel) do not each pay a futex wake-up.
//
// Thread contract: Post from any thread. The destructor runs the tasks
// already posted, then joins.
#ifndef MIRRORTRAIN_TENSOR_THREAD_POOL_H_
#define MIRRORTRAIN_TENSOR_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mirrortrain {

// A spin-wait hint to the CPU (pause on x86, a yield elsewhere).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done` for about 20-50 us before a caller blocks, so back-to-back
// small tasks skip the futex round trip. Every few polls it yields: when
// another process shares this core, the spin gives it (and the thread that
// would make `done` true) the core instead of burning a time slice.
template <typename Done>
bool SpinUntil(Done done) {
  constexpr int kSpins = 4000;
  constexpr int kYieldEvery = 64;
  for (int i = 1; i <= kSpins; ++i) {
    if (done()) return true;
    if (i % kYieldEvery == 0) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
  }
  return done();
}

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(std::function<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<int> queued_{0};  // tasks_.size(), readable without the lock.
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_THREAD_POOL_H_
