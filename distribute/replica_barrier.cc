#include "distribute/replica_barrier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mirrortrain::distribute {

absl::Status ReplicaBarrier::Wait(int replica, const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  arrived_[replica] = true;
  if (++count_ == replicas_) {
    count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    cv_.notify_all();
    return absl::OkStatus();
  }
  const uint64_t generation = generation_;
  const bool done = cv_.wait_for(lock, timeout_, [&] {
    return generation_ != generation || !aborted_.ok();
  });
  if (generation_ != generation) return absl::OkStatus();
  if (!done) {
    std::vector<int> missing;
    for (int r = 0; r < replicas_; ++r) {
      if (!arrived_[r]) missing.push_back(r);
    }
    aborted_ = absl::DeadlineExceededError(
        absl::StrCat("watchdog: replica(s) ", absl::StrJoin(missing, ", "),
                     " did not reach ", what, " within ",
                     std::chrono::duration<double>(timeout_).count(),
                     " s (replica ", replica, " waited)"));
    cv_.notify_all();
  }
  return aborted_;
}

void ReplicaBarrier::Join() {
  std::unique_lock<std::mutex> lock(mu_);
  if (++joined_ == replicas_) {
    joined_ = 0;
    ++join_generation_;
    cv_.notify_all();
    return;
  }
  const uint64_t generation = join_generation_;
  cv_.wait(lock, [&] { return join_generation_ != generation; });
}

void ReplicaBarrier::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = reason;
  cv_.notify_all();
}

void ReplicaBarrier::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = absl::OkStatus();
  count_ = 0;
  std::fill(arrived_.begin(), arrived_.end(), false);
  joined_ = 0;
}

}  // namespace mirrortrain::distribute
