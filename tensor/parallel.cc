#include "tensor/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "tensor/cpu_threads.h"
#include "tensor/thread_pool.h"

namespace mirrortrain {
namespace {

// Chunks per participating thread. More than one so that a thread that
// another process keeps off its core holds up only a small share of the
// range: the others take the chunks it does not get to.
constexpr int64_t kChunksPerThread = 2;

// The kernel pool: HardwareConcurrency() - 1 workers (the caller is the
// last thread). Never destroyed: kernels may run during static destruction
// of other objects.
ThreadPool& Pool() {
  static auto* pool = new ThreadPool(HardwareConcurrency() - 1);
  return *pool;
}

// One ParallelFor call, shared by the caller and the pool tasks it posts.
// Thread t owns `per_share` consecutive chunks (the same rows in every
// kernel of a step, so they stay in its core's cache) and runs them first;
// a thread that runs out takes the chunks other threads have not started.
// A task may start after the caller returned (it was slow to be
// scheduled); it then finds no chunk left and only drops its reference, so
// it never touches `fn` or the caller's stack.
struct Work {
  Work(const std::function<void(int64_t, int64_t)>& fn, int64_t n,
       int64_t shares, int64_t per_share)
      : fn(&fn),
        n(n),
        shares(shares),
        per_share(per_share),
        next(std::make_unique<std::atomic<int64_t>[]>(shares)) {}

  const std::function<void(int64_t, int64_t)>* fn;
  const int64_t n;
  const int64_t shares;
  const int64_t per_share;
  std::unique_ptr<std::atomic<int64_t>[]> next;  // Next chunk of each share.
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
  // The first exception a chunk threw (under `mu`), rethrown by the caller
  // once every chunk has finished: a throw must not unwind the caller's
  // frame (and `fn`) while other threads still run chunks of it.
  std::exception_ptr error;

  int64_t chunks() const { return shares * per_share; }
  bool Finished() const {
    return done.load(std::memory_order_acquire) == chunks();
  }

  // Runs the chunks of share `own`, then any left in the others.
  void Drain(int64_t own) {
    for (int64_t i = 0; i < shares; ++i) {
      const int64_t share = (own + i) % shares;
      for (;;) {
        const int64_t c = next[share].fetch_add(1, std::memory_order_relaxed);
        if (c >= per_share) break;
        const int64_t chunk = share * per_share + c;
        try {
          (*fn)(n * chunk / chunks(), n * (chunk + 1) / chunks());
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();
        }
        if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks()) {
          std::lock_guard<std::mutex> lock(mu);
          cv.notify_one();
        }
      }
    }
  }
};

}  // namespace

void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  ThreadPool& pool = Pool();
  const int64_t max_chunks = n / std::max<int64_t>(min_chunk, 1);
  const int64_t threads =
      std::min<int64_t>({static_cast<int64_t>(CpuMathThreads()),
                         static_cast<int64_t>(pool.size()) + 1, max_chunks});
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  auto work = std::make_shared<Work>(
      fn, n, threads,
      std::clamp<int64_t>(max_chunks / threads, 1, kChunksPerThread));
  for (int64_t t = 1; t < threads; ++t) {
    pool.Post([work, t] { work->Drain(t); });
  }
  work->Drain(0);
  // Only chunks other threads claimed are still running: wait briefly
  // (they take microseconds), then block.
  SpinUntil([&] { return work->Finished(); });
  std::unique_lock<std::mutex> lock(work->mu);
  work->cv.wait(lock, [&] { return work->Finished(); });
  if (work->error) std::rethrow_exception(work->error);
}

}  // namespace mirrortrain
