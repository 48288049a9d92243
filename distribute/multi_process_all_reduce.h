// All-reduce over the replicas of every process of a job (MultiWorker-
// MirroredStrategy's collective): the replicas of this process first sum
// with `local` (LocalAllReduce), then replica 0 sums the process's result
// with the other processes' over the ProcessGroup (host memory; GPU buffers
// go through a host copy), and the other local replicas copy it.
//
// Summation order: the process group sums in rank order, LocalAllReduce in
// replica order. With one replica per process that is replica order
// 0..P-1, exactly the order of one process with P replicas: the results
// are bitwise equal. With L > 1 replicas per process the sum is
// (r0+..+r(L-1)) + (rL+..+r(2L-1)) + ...: equal to one process of P*L
// replicas within float rounding.
//
// Thread contract: as CrossDeviceOps. Only local replica 0's thread calls
// the process group, so the group sees one thread at a time.
#ifndef MIRRORTRAIN_DISTRIBUTE_MULTI_PROCESS_ALL_REDUCE_H_
#define MIRRORTRAIN_DISTRIBUTE_MULTI_PROCESS_ALL_REDUCE_H_

#include <chrono>
#include <memory>
#include <vector>

#include "distribute/cross_device_ops.h"
#include "distribute/process_group.h"
#include "distribute/replica_barrier.h"

namespace mirrortrain::distribute {

class MultiProcessAllReduce final : public CrossDeviceOps {
 public:
  // `local` reduces the `local_replicas` of this process (unused with one);
  // `processes` (not owned) must outlive this object.
  MultiProcessAllReduce(std::unique_ptr<CrossDeviceOps> local,
                        int local_replicas, ProcessGroup* processes,
                        std::chrono::milliseconds watchdog);
  absl::Status AllReduce(int replica, ReduceOp op, Tensor& buffer) override;
  void Abort(const absl::Status& reason) override;
  std::string name() const override { return local_->name() + "+mpi"; }

 private:
  // Replica 0: `buffer` (the process's sum) summed over the processes.
  absl::Status AcrossProcesses(ReduceOp op, Tensor& buffer);

  std::unique_ptr<CrossDeviceOps> local_;
  const int local_replicas_;
  ProcessGroup* processes_;
  ReplicaBarrier barrier_;
  std::vector<Tensor*> posted_;  // Per local replica, valid between barriers.
  uint64_t calls_ = 0;           // Replica 0's collectives so far.
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_MULTI_PROCESS_ALL_REDUCE_H_
