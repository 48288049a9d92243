// A reusable barrier for N replica threads with a timeout (the watchdog):
// a replica that waits longer than the timeout gets DeadlineExceeded naming
// the replicas that never arrived, and the barrier is aborted for all.
#ifndef MIRRORTRAIN_DISTRIBUTE_REPLICA_BARRIER_H_
#define MIRRORTRAIN_DISTRIBUTE_REPLICA_BARRIER_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mirrortrain::distribute {

class ReplicaBarrier {
 public:
  ReplicaBarrier(int replicas, std::chrono::milliseconds timeout)
      : replicas_(replicas), timeout_(timeout), arrived_(replicas, false) {}

  // Blocks until all replicas arrived at this generation. `what` names the
  // collective in errors.
  absl::Status Wait(int replica, const std::string& what);
  // Blocks until all replicas called Join, ignoring Abort and the timeout:
  // ends a phase that every replica entered together (all passed a Wait)
  // and in which peers use each other's memory, so none may leave early.
  // Such a phase must be bounded work, not a wait for something else.
  void Join();
  void Abort(const absl::Status& reason);
  // Undoes Abort, once no replica is inside Wait or Join: the next Wait
  // starts a fresh generation.
  void Reset();

 private:
  const int replicas_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> arrived_;
  int count_ = 0;
  uint64_t generation_ = 0;
  absl::Status aborted_;
  int joined_ = 0;
  uint64_t join_generation_ = 0;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_REPLICA_BARRIER_H_
