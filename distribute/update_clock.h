// The global step of asynchronous (parameter-server) training: numbers the
// updates workers push, bounds their staleness, and lets a coordinator hold
// the workers at a step (to log, evaluate or checkpoint a consistent state).
//
// A worker's round: BeginRead() -> read the variables -> compute a gradient
// -> Reserve() -> apply it -> Applied(). The staleness of an update is the
// number of updates reserved before its own that were not yet applied when
// its worker's read began (reserved before or after that read): how many
// updates the variables its gradient was computed on may lack.
//
// max_staleness N >= 0 bounds every update's staleness by N. Workers between
// BeginRead and Reserve are kept in read order; Reserve waits while it would
// leave a worker that read earlier unable to stay within N (so the worker
// with the oldest read may always reserve: no deadlock), and BeginRead waits
// while the workers already reading leave no room. N = 0 serialises the
// rounds (synchronous, one worker at a time).
//
// Thread contract: every method is thread-safe. Workers call BeginRead,
// Reserve and Applied for their own id only; one coordinator calls the rest.
#ifndef MIRRORTRAIN_DISTRIBUTE_UPDATE_CLOCK_H_
#define MIRRORTRAIN_DISTRIBUTE_UPDATE_CLOCK_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mirrortrain::distribute {

class UpdateClock {
 public:
  // `max_staleness` < 0: unbounded.
  explicit UpdateClock(int64_t max_staleness);

  // Before the workers start (a restore): `applied` updates are done; the
  // limit is set to it.
  void Reset(int64_t applied);

  // Worker `worker` starts a round. Returns the number of updates applied
  // when its read begins; OutOfRange when no more updates will be taken
  // (Finish), or the status Abort was given.
  absl::StatusOr<int64_t> BeginRead(int worker);
  // The worker's update becomes number `ticket` (1-based: the global step
  // after it); waits for the staleness bound and the coordinator's limit.
  // OutOfRange when training is over: the gradient must be dropped.
  absl::StatusOr<int64_t> Reserve(int worker);
  // The worker's reserved update has been applied everywhere.
  void Applied(int worker);

  // Coordinator: no update numbered beyond `limit` is reserved until the
  // limit is raised.
  void SetLimit(int64_t limit);
  // Coordinator: the limit is final; workers waiting for it get OutOfRange.
  void Finish();
  // Coordinator: lowers the limit to the updates already reserved, so the
  // workers stop as soon as those are applied (a stop signal). Returns it.
  int64_t HoldAtReserved();
  // Coordinator: waits up to `timeout` until every update up to the limit
  // is applied. True when it is; the Abort status when aborted.
  absl::StatusOr<bool> WaitForLimit(std::chrono::milliseconds timeout);
  // Wakes every waiter with `status` (a failed worker or coordinator); the
  // first status wins and the clock stays aborted.
  void Abort(const absl::Status& status);

  int64_t applied() const;
  // counts[s]: updates reserved with staleness s since the last call.
  std::vector<int64_t> TakeStalenessCounts();
  // The largest staleness seen since construction.
  int64_t max_staleness_seen() const;

 private:
  struct Reading {
    int worker;
    int64_t read_step;
  };
  // Whether Reserve(worker) may take the next number now.
  bool MayReserve(int worker) const;
  // Position of `worker` in reading_, or -1.
  int ReadingIndex(int worker) const;

  const int64_t max_staleness_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  int64_t reserved_ = 0, applied_ = 0, limit_ = 0;
  bool finished_ = false;
  absl::Status aborted_;
  std::deque<Reading> reading_;  // Between BeginRead and Reserve, read order.
  std::vector<int64_t> staleness_counts_;
  int64_t max_seen_ = 0;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_UPDATE_CLOCK_H_
