// Asynchronous training against parameter servers on one host, after
// tf.distribute.experimental.ParameterServerStrategy: every device listed
// is a worker that loops on its own (read the current variables, compute a
// gradient on its own batches, push it) and never waits for the others;
// the variables are partitioned over ps_devices() (PartitionVariables), and
// each ps device applies pushed gradients under its own lock.
//
// Run(fn) starts fn once per worker, all at once, each on its own thread,
// and returns when all have returned: fn is the worker's whole loop. The
// workers' ReplicaContexts never reduce (reduces() is false, AllReduce the
// identity): nothing is synchronous between workers. clock() numbers and
// paces the updates (UpdateClock); a worker that fails aborts it, so the
// others and the coordinator stop waiting.
//
// The state itself (partitions, their optimizers and EMAs) belongs to the
// training loop, which learns the placement from variable_placement()
// (VariablePlacement::kParameterServers).
//
// Thread contract: Run() from one thread; clock() from any.
#ifndef MIRRORTRAIN_DISTRIBUTE_PARAMETER_SERVER_STRATEGY_H_
#define MIRRORTRAIN_DISTRIBUTE_PARAMETER_SERVER_STRATEGY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/strategy.h"
#include "distribute/update_clock.h"

namespace mirrortrain::distribute {

struct ParameterServerOptions {
  std::vector<Device> ps_devices = {Device::Cpu()};  // Host devices only.
  int64_t max_staleness = -1;           // < 0: unbounded (UpdateClock).
  int64_t min_shard_bytes = 256 << 10;  // PartitionVariables.
};

class ParameterServerStrategy final : public Strategy {
 public:
  static absl::StatusOr<std::unique_ptr<ParameterServerStrategy>> Create(
      const std::vector<Device>& workers,
      const ParameterServerOptions& options);
  ~ParameterServerStrategy() override;

  int num_replicas() const override {
    return static_cast<int>(workers_.size());
  }
  const std::vector<Device>& devices() const override { return workers_; }
  absl::Status Run(const ReplicaFn& fn) override;
  VariablePlacement variable_placement() const override {
    return VariablePlacement::kParameterServers;
  }
  Device variables_device() const override { return options_.ps_devices[0]; }

  const ParameterServerOptions& options() const { return options_; }
  UpdateClock& clock() { return clock_; }

 private:
  class Worker;
  ParameterServerStrategy(std::vector<Device> workers,
                          ParameterServerOptions options);

  std::vector<Device> workers_;
  ParameterServerOptions options_;
  UpdateClock clock_;
  std::vector<std::unique_ptr<Worker>> contexts_;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_PARAMETER_SERVER_STRATEGY_H_
