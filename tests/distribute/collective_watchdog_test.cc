// The collective watchdog with probes standing in for device events: an
// overdue collective is reported once, naming the replica and the
// collective, and aborts; finished or completed ones never are; a probe's
// error is reported without waiting for the timeout.
#include "distribute/collective_watchdog.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mirrortrain::distribute {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Collects what the watchdog aborted with.
struct Aborts {
  std::mutex mu;
  std::vector<absl::Status> reports;
  CollectiveWatchdog::AbortFn Fn() {
    return [this](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      reports.push_back(s);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return reports.size();
  }
};

// Polls `pred` for up to 10 s (a loaded CI machine may delay the thread).
template <typename Pred>
bool Eventually(Pred pred) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return pred();
}

TEST(CollectiveWatchdogTest, StalledCollectiveIsReportedOnceAndAborts) {
  Aborts aborts;
  CollectiveWatchdog watchdog(milliseconds(20), aborts.Fn());
  const uint64_t fine =
      watchdog.Watch(0, "all-reduce #3 (f32[8] gpu:0)", [] { return true; });
  const uint64_t stalled =
      watchdog.Watch(1, "all-reduce #3 (f32[8] gpu:1)", [] { return false; });
  ASSERT_TRUE(Eventually([&] { return aborts.count() > 0; }));
  const absl::Status report = watchdog.Finish(stalled);
  EXPECT_EQ(report.code(), absl::StatusCode::kDeadlineExceeded) << report;
  EXPECT_THAT(report.message(),
              HasSubstr("watchdog: replica 1's all-reduce #3 (f32[8] gpu:1) "
                        "did not complete within 0.02 s"));
  // Every waiter learns it, also those whose stream finished: after an
  // abort a finished stream says nothing about the result.
  EXPECT_EQ(watchdog.Finish(fine), report);
  EXPECT_EQ(watchdog.report(), report);
  // Later collectives do not fire it again.
  const uint64_t later =
      watchdog.Watch(0, "all-reduce #4", [] { return false; });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(watchdog.Finish(later), report);
  EXPECT_EQ(aborts.count(), 1u);
  EXPECT_EQ(aborts.reports[0], report);
}

TEST(CollectiveWatchdogTest, CompletedAndFinishedCollectivesAreNeverReported) {
  Aborts aborts;
  CollectiveWatchdog watchdog(milliseconds(4), aborts.Fn());
  // Complete on the device but not yet finished by its waiter, far past
  // the timeout: not a stall.
  const uint64_t completed = watchdog.Watch(0, "done", [] { return true; });
  // Many short collectives, each finished before its deadline.
  for (int i = 0; i < 200; ++i) {
    std::atomic<bool> ready{false};
    const uint64_t t =
        watchdog.Watch(i % 2, "quick", [&ready] { return ready.load(); });
    ready = true;
    EXPECT_TRUE(watchdog.Finish(t).ok());
  }
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(watchdog.Finish(completed).ok());
  EXPECT_EQ(aborts.count(), 0u);
  EXPECT_TRUE(watchdog.report().ok());
}

TEST(CollectiveWatchdogTest, ProbeErrorIsReportedBeforeTheTimeout) {
  Aborts aborts;
  const auto start = std::chrono::steady_clock::now();
  // A long timeout: only the probe's error can fire it (interval 1 s).
  CollectiveWatchdog watchdog(std::chrono::seconds(600), aborts.Fn());
  EXPECT_EQ(watchdog.interval(), milliseconds(1000));
  const uint64_t t =
      watchdog.Watch(2, "all-reduce #0", []() -> absl::StatusOr<bool> {
        return absl::InternalError("NCCL on gpu:2: remote process exited");
      });
  ASSERT_TRUE(Eventually([&] { return aborts.count() > 0; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  const absl::Status report = watchdog.Finish(t);
  EXPECT_EQ(report.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(report.message(),
              HasSubstr("replica 2's all-reduce #0 failed: NCCL on gpu:2: "
                        "remote process exited"));
}

TEST(CollectiveWatchdogTest, StopsPromptlyWithALongTimeout) {
  Aborts aborts;
  const auto start = std::chrono::steady_clock::now();
  {
    CollectiveWatchdog watchdog(std::chrono::seconds(600), aborts.Fn());
    watchdog.Watch(0, "pending", [] { return false; });
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(aborts.count(), 0u);
}

}  // namespace
}  // namespace mirrortrain::distribute
