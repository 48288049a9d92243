// The processes of one job (MultiWorkerMirroredStrategy's workers): one
// per host or per GPU, started by a launcher (`mpirun -np P mirrortrain
// ...`). Process `rank` of `size` drives its local replicas as global
// replicas rank*L .. rank*L+L-1.
//
// Without a launcher the group is this process alone (size 1) and every
// collective is the identity, so the same binary behaves as it does
// without MPI. Under mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI/PMIx
// variables, in the environment) a build with MPI joins MPI_COMM_WORLD; a
// build without MPI refuses to start rather than train P separate copies.
//
// Collectives are blocking for the caller but wait with a watchdog: a
// process that does not arrive within watchdog() makes the call fail
// (DeadlineExceeded naming the missing process(es)); the group is then
// broken and every later call fails at once. Nothing hangs.
//
// Thread contract: one thread at a time calls collectives (MPI is
// initialised MPI_THREAD_SERIALIZED), and every process calls the same
// collectives in the same order. rank(), size() from any thread.
// Ownership: the object owns MPI's initialisation; destroying it finalises
// MPI (after a clean run) and must happen once, on the thread that made it.
#ifndef MIRRORTRAIN_DISTRIBUTE_PROCESS_GROUP_H_
#define MIRRORTRAIN_DISTRIBUTE_PROCESS_GROUP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace mirrortrain::distribute {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The job's processes on this host (this one included), which share its
  // CPU cores.
  virtual int local_size() const { return 1; }
  // Process 0, which alone writes logs, metrics and checkpoints.
  bool chief() const { return rank() == 0; }
  // The transport's name: "single" or "mpi".
  virtual std::string name() const = 0;

  // How long a collective waits for the other processes.
  void set_watchdog(std::chrono::milliseconds watchdog) {
    watchdog_ = watchdog;
  }
  std::chrono::milliseconds watchdog() const { return watchdog_; }
  // `stop_requested` (callable from the waiting thread; e.g. "a SIGTERM
  // arrived"): once it holds, a collective waits at most `grace` more for
  // the missing processes. A launcher that ends a job because one process
  // died sends the others SIGTERM and soon SIGKILL (Open MPI: 1 s later),
  // so this names the dead process before then; processes that all got
  // the signal still meet within the grace.
  void set_stop_check(std::function<bool()> stop_requested,
                      std::chrono::milliseconds grace) {
    stop_requested_ = std::move(stop_requested);
    stop_grace_ = grace;
  }

  // Replaces `buffer` (host memory, any dtype) by its sum over the
  // processes, in place. The sum runs in rank order 0..P-1 for every
  // element (rank p sums its 1/P slice, then the slices are gathered), so
  // all processes end bitwise identical and P processes of one replica each
  // reduce exactly as one process of P replicas does (LocalAllReduce sums in
  // replica order too). `what` names the collective in errors.
  virtual absl::Status AllReduceSum(const Tensor& buffer,
                                    absl::string_view what) = 0;
  // AllReduceSum of a few host values (metrics).
  absl::Status AllReduceSum(absl::Span<double> values, absl::string_view what);
  // Copies `bytes` bytes at `data` from process `root` into every process.
  virtual absl::Status Broadcast(void* data, int64_t bytes, int root,
                                 absl::string_view what) = 0;
  // The root's string in every process.
  absl::Status BroadcastString(std::string& s, int root,
                               absl::string_view what);
  // Waits for every process.
  virtual absl::Status Barrier(absl::string_view what) = 0;
  // Every process passes its own status and gets the same one back: OK when
  // all are; else the first failing process's (its code, its message, with
  // "process <k>: " in front when k is not this process). So a failure
  // found by some processes only is known to all and reported once. A
  // failed result is marked (IsAgreed) in a group of more than one.
  absl::StatusOr<absl::Status> Agree(const absl::Status& mine);
  // Agree's second half, for a caller that summed every process's status
  // code into `codes` (process p's at index p, size() entries) within a
  // collective of its own, so a step pays no extra one when all are OK.
  // Every process calls it after that sum.
  absl::StatusOr<absl::Status> AgreeOnCodes(const absl::Status& mine,
                                            absl::Span<const double> codes);
  // Agree's result as one status: the agreed one, or the agreement's own
  // failure. For a step every process takes before its next collective, so
  // a failure some processes found alone stops all of them there.
  absl::Status AgreedStatus(const absl::Status& mine);
  // Ends every process of the job now with `code` (MPI_Abort): the last
  // resort after an error, so that no peer waits for this one. Only the
  // CLI calls it; returns only in a group of one.
  virtual void Abort(int code) = 0;

 protected:
  ProcessGroup() = default;
  bool stop_requested() const { return stop_requested_ && stop_requested_(); }
  std::chrono::milliseconds stop_grace() const { return stop_grace_; }

 private:
  std::chrono::milliseconds watchdog_{300'000};
  std::function<bool()> stop_requested_;
  std::chrono::milliseconds stop_grace_{500};
};

// A failure that every process of the job holds alike: agreed (Agree), or
// made from values every process agreed on (the job's loss). The CLI
// reports it once, from the chief, and the processes end together; any
// other failure is this process's own, reported by it.
absl::Status MarkAgreed(absl::Status failure);
bool IsAgreed(const absl::Status& status);

// The group this process belongs to (see the file comment). Fails when a
// launcher is detected but this build has no MPI, or MPI cannot start.
absl::StatusOr<std::unique_ptr<ProcessGroup>> JoinProcessGroup();

// This process alone (tests, tools; JoinProcessGroup without a launcher).
std::unique_ptr<ProcessGroup> SingleProcessGroup();

// Whether this build links MPI.
bool MpiBuilt();

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_PROCESS_GROUP_H_
