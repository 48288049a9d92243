// A fixed set of threads running posted tasks in FIFO order.
//
// Thread contract: Post from any thread. The destructor runs the tasks
// already posted, then joins.
#ifndef MIRRORTRAIN_TENSOR_THREAD_POOL_H_
#define MIRRORTRAIN_TENSOR_THREAD_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mirrortrain {

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
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_THREAD_POOL_H_
