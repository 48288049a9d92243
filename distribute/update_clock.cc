#include "distribute/update_clock.h"

namespace mirrortrain::distribute {

UpdateClock::UpdateClock(int64_t max_staleness)
    : max_staleness_(max_staleness) {}

void UpdateClock::Reset(int64_t applied) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ = applied_ = limit_ = applied;
  finished_ = false;
  reading_.clear();
}

int UpdateClock::ReadingIndex(int worker) const {
  for (size_t i = 0; i < reading_.size(); ++i) {
    if (reading_[i].worker == worker) return static_cast<int>(i);
  }
  return -1;
}

bool UpdateClock::MayReserve(int worker) const {
  if (reserved_ >= limit_) return false;
  if (max_staleness_ < 0) return true;
  // Reserving raises the staleness every earlier reader will have by one;
  // in the worst case they reserve in read order, the k-th after k more.
  const int self = ReadingIndex(worker);
  for (int k = 0; k < self; ++k) {
    if (reserved_ + 1 + k - reading_[k].read_step > max_staleness_) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<int64_t> UpdateClock::BeginRead(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  // A new reader comes last: after the ones reading, its update may be
  // reserved |reading_| numbers later, past those not applied yet.
  changed_.wait(lock, [&] {
    return !aborted_.ok() || (finished_ && reserved_ >= limit_) ||
           max_staleness_ < 0 ||
           reserved_ + static_cast<int64_t>(reading_.size()) - applied_ <=
               max_staleness_;
  });
  if (!aborted_.ok()) return aborted_;
  if (finished_ && reserved_ >= limit_) {
    return absl::OutOfRangeError("training is over");
  }
  reading_.push_back({worker, applied_});
  return applied_;
}

absl::StatusOr<int64_t> UpdateClock::Reserve(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] {
    return !aborted_.ok() || (finished_ && reserved_ >= limit_) ||
           MayReserve(worker);
  });
  if (!aborted_.ok()) return aborted_;
  const int index = ReadingIndex(worker);
  if (index < 0) {
    return absl::FailedPreconditionError("Reserve without BeginRead");
  }
  const int64_t read_step = reading_[index].read_step;
  reading_.erase(reading_.begin() + index);
  if (finished_ && reserved_ >= limit_) {
    changed_.notify_all();  // A reader less: others may proceed.
    return absl::OutOfRangeError("training is over");
  }
  const int64_t staleness = reserved_ - read_step;
  ++reserved_;
  if (static_cast<int64_t>(staleness_counts_.size()) <= staleness) {
    staleness_counts_.resize(staleness + 1, 0);
  }
  ++staleness_counts_[staleness];
  max_seen_ = std::max(max_seen_, staleness);
  changed_.notify_all();
  return reserved_;
}

void UpdateClock::Applied(int /*worker*/) {
  std::lock_guard<std::mutex> lock(mu_);
  ++applied_;
  changed_.notify_all();
}

void UpdateClock::SetLimit(int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = limit;
  changed_.notify_all();
}

void UpdateClock::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  changed_.notify_all();
}

int64_t UpdateClock::HoldAtReserved() {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = reserved_;
  changed_.notify_all();
  return limit_;
}

absl::StatusOr<bool> UpdateClock::WaitForLimit(
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout,
                    [&] { return !aborted_.ok() || applied_ >= limit_; });
  if (!aborted_.ok()) return aborted_;
  return applied_ >= limit_;
}

void UpdateClock::Abort(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = status;
  changed_.notify_all();
}

int64_t UpdateClock::applied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return applied_;
}

std::vector<int64_t> UpdateClock::TakeStalenessCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> out;
  out.swap(staleness_counts_);
  return out;
}

int64_t UpdateClock::max_staleness_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_seen_;
}

}  // namespace mirrortrain::distribute
