// Variables in one place, computation on several devices, after
// tf.distribute.experimental.CentralStorageStrategy: the training state
// (variables, optimizer slots, EMA shadows) exists once, on
// variables_device(); each listed device runs a replica that reads it at the
// start of a step; gradients are summed over the replicas and the update is
// applied once, to the central copy.
//
// The replicas compute and reduce exactly as MirroredStrategy's (replica
// threads, gradient buckets, local all-reduce or NCCL), so this strategy
// runs them through one; what differs is where the state lives, which the
// training loop learns from variable_placement() (VariablePlacement::
// kCentral): it copies the central state into the replicas before a step and
// applies replica 0's reduced gradients to the central state.
//
// Thread contract: as MirroredStrategy.
#ifndef MIRRORTRAIN_DISTRIBUTE_CENTRAL_STORAGE_STRATEGY_H_
#define MIRRORTRAIN_DISTRIBUTE_CENTRAL_STORAGE_STRATEGY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/mirrored_strategy.h"
#include "distribute/strategy.h"
#include "distribute/strategy_factory.h"

namespace mirrortrain::distribute {

class CentralStorageStrategy final : public Strategy {
 public:
  static absl::StatusOr<std::unique_ptr<CentralStorageStrategy>> Create(
      const std::vector<Device>& devices, Device variables_device,
      const MirroredOptions& options);

  int num_replicas() const override { return compute_->num_replicas(); }
  const std::vector<Device>& devices() const override {
    return compute_->devices();
  }
  // Enqueue and Fence are the defaults: the mirrored Run waits for the
  // replicas' streams, so the loop thread's copies of the central state
  // (LoadReplicaModels) never race a step.
  absl::Status Run(const ReplicaFn& fn) override { return compute_->Run(fn); }
  VariablePlacement variable_placement() const override {
    return VariablePlacement::kCentral;
  }
  Device variables_device() const override { return variables_device_; }
  // The replicas' gradient all-reduces (the central update communicates
  // nothing more).
  int64_t collectives_started() const override {
    return compute_->collectives_started();
  }

 private:
  CentralStorageStrategy(std::unique_ptr<MirroredStrategy> compute,
                         Device variables_device)
      : compute_(std::move(compute)), variables_device_(variables_device) {}

  std::unique_ptr<MirroredStrategy> compute_;
  Device variables_device_;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_CENTRAL_STORAGE_STRATEGY_H_
