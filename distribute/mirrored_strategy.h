// Synchronous data parallelism over the devices of one host, after
// tf.distribute.MirroredStrategy: one replica per device, each on its own
// thread (replica 0 on the caller's); a GPU replica has a communication
// thread too, so its gradient all-reduces overlap backward (CPU replicas
// reduce inline: the cores are all computing).
//
// Several `cpu:K` devices are logical CPU devices sharing the host; they use
// the local all-reduce. Distinct GPUs use NCCL; a GPU listed more than once
// holds that many logical replicas, which use the local all-reduce as a
// device kernel. With N > 1 CPU replicas the kernel threads are split
// between them, so replicas do not fight over cores.
//
// GPU replicas: each has a compute stream (current on its thread while the
// replica function runs; synchronised before Run returns, not before
// Enqueue or Replay do) and a
// communication stream on which its all-reduces run, ordered after the
// compute stream by events, so gradient buckets are reduced while backward
// goes on. The communication stream has the device's highest priority by
// default (MirroredOptions::communication_priority), so a reduction's
// blocks are scheduled as soon as SMs free up rather than behind the
// backward kernels queued before it, also in a replayed graph. Local (device
// kernel) and NCCL reductions take this one path, and a CollectiveWatchdog
// bounds how long each may take to complete on the device: a stalled one aborts
// the collectives and fails the step with DeadlineExceeded naming the replica
// and the collective.
//
// Several processes (`processes` of size P > 1, each with the same number
// L of devices): this process's replicas are global replicas rank*L ..
// rank*L+L-1, and all-reduces span every process: NCCL over all their GPUs
// (ncclCommInitRank, the unique id broadcast over the group), or the local
// all-reduce followed by the process group (MultiProcessAllReduce).
//
// CUDA graphs (CaptureRun): replica 0's compute stream is the capture's
// origin; the other replicas' compute streams join it through an event
// before their first work and rejoin it at the end, and each communication
// stream joins through its collectives' events, so one graph holds every
// replica's step. Collectives are then recorded, not waited for: the local
// all-reduce orders the slice sums by events instead of host
// synchronisation (local_all_reduce.h), and a replica's compute stream
// waits on the device for the results it uses (OrderAfterCollectives).
// The replicas' steps run concurrently in the replay, as they do eagerly.
// NCCL steps (distinct GPUs, or several processes) are not recorded:
// CanCaptureRuns says so.
//
// Thread contract: Run(), Enqueue(), Fence(), CaptureRun() and Replay()
// from one thread. On a
// replica error (or the watchdog) the collectives are aborted so no replica
// waits forever; the strategy is then unusable and Run keeps failing.
#ifndef MIRRORTRAIN_DISTRIBUTE_MIRRORED_STRATEGY_H_
#define MIRRORTRAIN_DISTRIBUTE_MIRRORED_STRATEGY_H_

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/collective_watchdog.h"
#include "distribute/cross_device_ops.h"
#include "distribute/process_group.h"
#include "distribute/strategy.h"
#include "distribute/strategy_factory.h"

namespace mirrortrain::distribute {

class MirroredStrategy final : public Strategy {
 public:
  // `processes` (not owned, may be null: this process alone) must outlive
  // the strategy.
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> Create(
      const std::vector<Device>& devices, const MirroredOptions& options,
      ProcessGroup* processes = nullptr);
  // For tests: any CrossDeviceOps (e.g. one that stalls). `first_replica`
  // and `replicas_in_sync`: where this process's replicas lie among all
  // (0 and devices.size() in one process); `watchdog`: the bound on a
  // device collective (MirroredOptions::watchdog_seconds);
  // `communication_priority`: MirroredOptions' too.
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateWithOps(
      const std::vector<Device>& devices, std::unique_ptr<CrossDeviceOps> ops,
      int first_replica = 0, int replicas_in_sync = 0,
      std::chrono::milliseconds watchdog = std::chrono::minutes(5),
      cuda::StreamPriority communication_priority =
          cuda::StreamPriority::kHigh);
  ~MirroredStrategy() override;

  int num_replicas() const override {
    return static_cast<int>(devices_.size());
  }
  const std::vector<Device>& devices() const override { return devices_; }
  int num_replicas_in_sync() const override { return replicas_in_sync_; }
  int first_replica() const override { return first_replica_; }
  absl::Status Run(const ReplicaFn& fn) override;
  // GPU replicas: without synchronising their compute streams.
  absl::Status Enqueue(const ReplicaFn& fn) override;
  absl::StatusOr<DeviceFence> Fence() override;
  absl::Status CanCaptureRuns() const override;
  absl::StatusOr<cuda::CudaGraph> CaptureRun(const ReplicaFn& fn) override;
  absl::Status Replay(const cuda::CudaGraph& graph) override;
  const CrossDeviceOps& cross_device_ops() const { return *ops_; }
  int64_t collectives_started() const override;

 private:
  class Replica;
  MirroredStrategy(std::vector<Device> devices,
                   std::unique_ptr<CrossDeviceOps> ops, int first_replica,
                   int replicas_in_sync, std::chrono::milliseconds watchdog);
  // Run (`wait`: for the compute streams) or Enqueue.
  absl::Status RunReplicas(const ReplicaFn& fn, bool wait);
  // Runs `body` once per replica, each on its thread with its compute
  // stream current; a failing replica aborts the collectives. Per replica
  // status.
  std::vector<absl::Status> OnEveryReplica(
      const std::function<absl::Status(Replica&)>& body);
  // After a failed CaptureRun (which ran nothing): collectives usable again
  // and no stream left recording, or the strategy is broken.
  void RecoverFromCapture();

  std::vector<Device> devices_;
  int first_replica_, replicas_in_sync_;
  std::unique_ptr<CrossDeviceOps> ops_;
  // GPU replicas only; destroyed after the replicas' threads, before ops_.
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  absl::Status broken_;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_MIRRORED_STRATEGY_H_
