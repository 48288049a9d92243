// The pieces of asynchronous parameter-server training below the trainer:
// the partitioner (TF's MinSizePartitioner, round-robin placement) and the
// UpdateClock (every update numbered once, staleness bounded, workers held
// at the coordinator's limit, no deadlock), under contention.
#include <atomic>
#include <random>
#include <thread>

#include "distribute/parameter_server_strategy.h"
#include "distribute/update_clock.h"
#include "distribute/variable_partitioner.h"
#include "gtest/gtest.h"

namespace mirrortrain::distribute {
namespace {

TEST(VariablePartitionerTest, SmallVariablesWholeLargeOnesCutRoundRobin) {
  // 4-byte elements, 3 ps devices, at least 1000 bytes per partition.
  const auto plan =
      PartitionVariables({{10}, {100, 10}, {}, {7, 100}}, 4, 3, 1000);
  ASSERT_EQ(plan.size(), 4u);
  // 40 bytes: one partition, on ps 0.
  ASSERT_EQ(plan[0].size(), 1u);
  EXPECT_EQ(plan[0][0].ps, 0);
  EXPECT_EQ(plan[0][0].row_end, 10);
  // 4000 bytes: min(3 ps, 100 rows, 4000/1000) = 3 partitions, 34+33+33
  // rows, continuing the round robin at ps 1.
  ASSERT_EQ(plan[1].size(), 3u);
  EXPECT_EQ(plan[1][0].row_begin, 0);
  EXPECT_EQ(plan[1][0].row_end, 34);
  EXPECT_EQ(plan[1][1].row_end, 67);
  EXPECT_EQ(plan[1][2].row_end, 100);
  EXPECT_EQ(plan[1][0].ps, 1);
  EXPECT_EQ(plan[1][1].ps, 2);
  EXPECT_EQ(plan[1][2].ps, 0);
  // A scalar is never cut.
  ASSERT_EQ(plan[2].size(), 1u);
  EXPECT_EQ(plan[2][0].ps, 1);
  // 2800 bytes: 2 partitions by size.
  ASSERT_EQ(plan[3].size(), 2u);
  EXPECT_EQ(plan[3][0].row_end, 4);
  EXPECT_EQ(plan[3][1].row_end, 7);
}

// `workers` threads run rounds against `clock` until it says the run is
// over; each update's ticket is counted (a stand-in for the parameter
// servers). The coordinator lets them run to `total` in steps of `chunk`,
// checking that they stop at each limit; at the end every update 1..total
// was applied exactly once.
void RunWorkers(UpdateClock& clock, int workers, int64_t total, int64_t chunk) {
  std::vector<std::atomic<int>> applied(total);
  std::atomic<int64_t> pushes{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      while (true) {
        absl::StatusOr<int64_t> read = clock.BeginRead(w);
        if (!read.ok()) {
          EXPECT_TRUE(absl::IsOutOfRange(read.status())) << read.status();
          return;
        }
        // "Compute" for a random while, so workers interleave.
        for (int i = 0, n = rng() % 2000; i < n; ++i) {
          std::atomic_signal_fence(std::memory_order_seq_cst);
        }
        if (rng() % 4 == 0) std::this_thread::yield();
        absl::StatusOr<int64_t> ticket = clock.Reserve(w);
        if (!ticket.ok()) {
          EXPECT_TRUE(absl::IsOutOfRange(ticket.status())) << ticket.status();
          return;
        }
        ASSERT_GE(*ticket, 1);
        ASSERT_LE(*ticket, total);
        applied[*ticket - 1].fetch_add(1);
        pushes.fetch_add(1);
        clock.Applied(w);
      }
    });
  }
  for (int64_t limit = chunk; limit <= total; limit += chunk) {
    clock.SetLimit(limit);
    absl::StatusOr<bool> reached(false);
    while (reached.ok() && !*reached) {
      reached = clock.WaitForLimit(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(reached.ok()) << reached.status();
    // Held at the limit: nothing more is applied.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(clock.applied(), limit);
  }
  clock.Finish();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(pushes.load(), total);
  for (int64_t t = 0; t < total; ++t) {
    ASSERT_EQ(applied[t].load(), 1) << "update " << t + 1;
  }
}

TEST(UpdateClockTest, EveryUpdateNumberedAndAppliedExactlyOnce) {
  constexpr int kWorkers = 8;
  constexpr int64_t kTotal = 4000;
  UpdateClock clock(/*max_staleness=*/-1);
  RunWorkers(clock, kWorkers, kTotal, 500);
  const std::vector<int64_t> counts = clock.TakeStalenessCounts();
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  EXPECT_EQ(sum, kTotal);
  EXPECT_TRUE(clock.TakeStalenessCounts().empty());  // Taken.
}

TEST(UpdateClockTest, MaxStalenessHonouredUnderContention) {
  for (int64_t bound : {0, 1, 3}) {
    UpdateClock clock(bound);
    RunWorkers(clock, /*workers=*/6, /*total=*/1500, /*chunk=*/300);
    EXPECT_LE(clock.max_staleness_seen(), bound);
    const std::vector<int64_t> counts = clock.TakeStalenessCounts();
    EXPECT_LE(static_cast<int64_t>(counts.size()), bound + 1);
  }
}

TEST(UpdateClockTest, UnboundedWorkersDoGetStale) {
  // The bound above is not vacuous: without it, 6 interleaving workers
  // produce stale updates.
  UpdateClock clock(-1);
  RunWorkers(clock, 6, 1500, 1500);
  EXPECT_GE(clock.max_staleness_seen(), 1);
}

TEST(UpdateClockTest, OneWorkerIsNeverStale) {
  UpdateClock clock(-1);
  RunWorkers(clock, 1, 100, 10);
  EXPECT_EQ(clock.max_staleness_seen(), 0);
}

TEST(UpdateClockTest, AbortWakesWaitingWorkers) {
  UpdateClock clock(-1);
  clock.SetLimit(0);  // Nothing may be reserved: the worker waits.
  std::thread worker([&] {
    ASSERT_TRUE(clock.BeginRead(0).ok());
    absl::StatusOr<int64_t> ticket = clock.Reserve(0);
    EXPECT_TRUE(absl::IsAborted(ticket.status())) << ticket.status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  clock.Abort(absl::AbortedError("worker 3 failed"));
  worker.join();
  EXPECT_TRUE(absl::IsAborted(
      clock.WaitForLimit(std::chrono::milliseconds(1)).status()));
}

// Worker 1 fails (as a non-finite loss does, Aborted) while worker 0 waits
// on the clock: the run reports worker 1's own error, not the clock's abort
// as worker 0 passed it on.
TEST(ParameterServerStrategyTest, AFailedWorkerIsNamedNotTheOnesItStopped) {
  auto strategy = ParameterServerStrategy::Create(
      {Device::Cpu(0), Device::Cpu(1)}, ParameterServerOptions{});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  UpdateClock& clock = (*strategy)->clock();
  clock.SetLimit(0);  // Worker 0 waits in Reserve until the abort.
  const absl::Status s = (*strategy)->Run([&](ReplicaContext& ctx) {
    if (ctx.replica_id() == 1) {
      return absl::AbortedError("non-finite loss (nan)");
    }
    if (absl::Status read = clock.BeginRead(0).status(); !read.ok()) {
      return read;
    }
    return clock.Reserve(0).status();
  });
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(s.message(), "worker 1: non-finite loss (nan)");
}

TEST(UpdateClockTest, ResetStartsCountingAtARestoredStep) {
  UpdateClock clock(-1);
  clock.Reset(40);
  clock.SetLimit(41);
  ASSERT_EQ(*clock.BeginRead(0), 40);
  EXPECT_EQ(*clock.Reserve(0), 41);
  clock.Applied(0);
  EXPECT_EQ(clock.applied(), 41);
}

}  // namespace
}  // namespace mirrortrain::distribute
