// Bounds how long a device collective may run, after PyTorch c10d's NCCL
// watchdog. A GPU collective is only enqueued by the host; when a peer (a
// GPU, or a process) never joins, its kernel spins forever and the thread
// waiting for the stream would wait forever too. So each replica's
// communication thread registers every collective it enqueued (Watch) with
// a probe saying whether the device finished it, and one thread checks the
// registered collectives. When one is unfinished for longer than the
// timeout, or a probe reports an error (NCCL's asynchronous error), the
// watchdog records the report and calls `abort` with it, once: for NCCL
// that is ncclCommAbort, which ends the stalled kernels, so every thread
// waiting on a stream returns and the step fails with the report.
//
// Host collectives (the local all-reduce) wait on a ReplicaBarrier, which
// has the same timeout and names the replicas that did not arrive.
//
// Thread contract: Watch and Finish from any thread; probes and `abort` run
// on the watchdog's own thread (a probe under its lock, so it never runs
// after Finish returned).
#ifndef MIRRORTRAIN_DISTRIBUTE_COLLECTIVE_WATCHDOG_H_
#define MIRRORTRAIN_DISTRIBUTE_COLLECTIVE_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mirrortrain::distribute {

class CollectiveWatchdog {
 public:
  // True when the collective completed on the device; an error reports it.
  using Probe = std::function<absl::StatusOr<bool>()>;
  using AbortFn = std::function<void(const absl::Status&)>;

  CollectiveWatchdog(std::chrono::milliseconds timeout, AbortFn abort);
  // Stops the thread (prompt: it waits on a condition variable).
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Starts watching replica `replica`'s collective `what` (e.g. "all-reduce
  // #12 (f32[1024] gpu:1)"), enqueued now. Returns its ticket for Finish.
  uint64_t Watch(int replica, std::string what, Probe done);
  // Stops watching `ticket` (its waiter saw the stream finish). Returns the
  // watchdog's report if it fired, for this or any collective: after an
  // abort a finished stream says nothing about the result.
  absl::Status Finish(uint64_t ticket);
  // The report once the watchdog fired; OK before.
  absl::Status report() const;

  // How often the thread checks: a quarter of the timeout, between 1 ms and
  // 1 s (a collective is reported at most that long after its deadline).
  std::chrono::milliseconds interval() const { return interval_; }

 private:
  struct Watched {
    int replica;
    std::string what;
    Probe done;
    std::chrono::steady_clock::time_point since;
  };
  void Loop();
  // The report for the first watched collective that failed or is overdue
  // at `now`; OK when none. Called with mu_ held.
  absl::Status Check(std::chrono::steady_clock::time_point now);

  const std::chrono::milliseconds timeout_, interval_;
  const AbortFn abort_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Watched> watched_;
  uint64_t next_ticket_ = 0;
  absl::Status report_;
  bool stop_ = false;
  std::thread thread_;  // Last: started once the members above exist.
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_COLLECTIVE_WATCHDOG_H_
