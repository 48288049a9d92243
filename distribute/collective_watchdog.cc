#include "distribute/collective_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mirrortrain::distribute {

CollectiveWatchdog::CollectiveWatchdog(std::chrono::milliseconds timeout,
                                       AbortFn abort)
    : timeout_(timeout),
      interval_(std::clamp(timeout / 4, std::chrono::milliseconds(1),
                           std::chrono::milliseconds(1000))),
      abort_(std::move(abort)),
      thread_([this] { Loop(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t CollectiveWatchdog::Watch(int replica, std::string what, Probe done) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  watched_.emplace(ticket, Watched{replica, std::move(what), std::move(done),
                                   std::chrono::steady_clock::now()});
  return ticket;
}

absl::Status CollectiveWatchdog::Finish(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  watched_.erase(ticket);
  return report_;
}

absl::Status CollectiveWatchdog::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_;
}

absl::Status CollectiveWatchdog::Check(
    std::chrono::steady_clock::time_point now) {
  for (const auto& [ticket, w] : watched_) {
    absl::StatusOr<bool> done = w.done();
    if (!done.ok()) {
      return absl::Status(done.status().code(),
                          absl::StrCat("replica ", w.replica, "'s ", w.what,
                                       " failed: ", done.status().message()));
    }
    if (!*done && now - w.since > timeout_) {
      return absl::DeadlineExceededError(absl::StrCat(
          "watchdog: replica ", w.replica, "'s ", w.what,
          " did not complete within ",
          std::chrono::duration<double>(timeout_).count(),
          " s (a peer never joined it, or its kernel hung); the collectives "
          "were aborted"));
    }
  }
  return absl::OkStatus();
}

void CollectiveWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!report_.ok()) {
      cv_.wait(lock, [this] { return stop_; });  // Fired: nothing to watch.
      continue;
    }
    cv_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_) continue;
    absl::Status report = Check(std::chrono::steady_clock::now());
    if (report.ok()) continue;
    report_ = report;
    // Outside the lock: aborting ends the stalled kernels, and their
    // waiters then call Finish.
    lock.unlock();
    abort_(report);
    lock.lock();
  }
}

}  // namespace mirrortrain::distribute
