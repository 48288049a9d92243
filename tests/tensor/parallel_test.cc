#include "tensor/parallel.h"

#include <atomic>
#include <chrono>
#include <new>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cpu_threads.h"
#include "tensor/thread_pool.h"

namespace mirrortrain {
namespace {

TEST(ParallelForTest, CoversTheRangeExactlyOnce) {
  for (int64_t n : {0, 1, 2, 3, 17, 1000, 100001}) {
    for (int64_t min_chunk : {1, 7, 1 << 20}) {
      std::vector<std::atomic<int>> hits(n);
      ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
        ASSERT_LE(0, begin);
        ASSERT_LE(begin, end);
        ASSERT_LE(end, n);
        for (int64_t i = begin; i < end; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << i;
    }
  }
}

// A chunk that throws (an allocation inside a kernel) reaches the caller
// only after every other chunk has finished: the caller's frame, which the
// chunks read, outlives them (it unwound under them before). Chunks on any
// thread may throw.
TEST(ParallelForTest, AThrowingChunkReachesTheCallerAfterTheOthers) {
  for (const int64_t thrower : {int64_t{0}, int64_t{999}}) {
    std::atomic<int64_t> covered{0};
    bool caught = false;
    try {
      ParallelFor(1000, 1, [&](int64_t begin, int64_t end) {
        if (begin <= thrower && thrower < end) throw std::bad_alloc();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        covered += end - begin;
      });
    } catch (const std::bad_alloc&) {
      caught = true;
    }
    EXPECT_TRUE(caught) << thrower;
    // Every chunk but the thrower's ran to its end before the throw came.
    const int64_t seen = covered.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(covered.load(), seen) << thrower;
    if (CpuMathThreads() > 1) {
      EXPECT_GT(seen, 0) << thrower;
    }
  }
}

TEST(ParallelForTest, ConcurrentCallersAndThreadBudget) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        ParallelFor(1000, 1, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total, 4 * 50 * 1000);
  const int before = CpuMathThreads();
  SetCpuMathThreads(1);
  int calls = 0;
  ParallelFor(1000, 1, [&](int64_t b, int64_t e) {
    ++calls;  // Inline on this thread: no race.
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
  });
  EXPECT_EQ(calls, 1);
  SetCpuMathThreads(before);
}

TEST(ThreadPoolTest, RunsTasksInOrderOnOneThreadAndDrainsOnDestruction) {
  std::vector<int> order;
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i)
      pool.Post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

// A thread that another process keeps off its core (here: one that stalls
// in its first chunk) holds up only a small share of the range; the other
// threads take the rest instead of waiting for it.
TEST(ParallelForTest, OneStalledThreadHoldsOnlyItsChunk) {
  if (HardwareConcurrency() < 2 || CpuMathThreads() < 2) {
    GTEST_SKIP() << "needs 2 kernel threads, this machine has "
                 << HardwareConcurrency();
  }
  constexpr int64_t kN = 64;
  std::atomic<bool> stalled{false};
  std::atomic<int64_t> others{0};
  int64_t stalled_size = 0;
  bool rest_done_meanwhile = false;
  ParallelFor(kN, 1, [&](int64_t begin, int64_t end) {
    if (!stalled.exchange(true)) {
      stalled_size = end - begin;
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (others.load() < kN - stalled_size &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      rest_done_meanwhile = others.load() == kN - stalled_size;
      return;
    }
    others += end - begin;
  });
  EXPECT_TRUE(rest_done_meanwhile);
  EXPECT_LE(stalled_size, kN / 4);
}

}  // namespace
}  // namespace mirrortrain
