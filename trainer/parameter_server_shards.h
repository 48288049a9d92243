// The training state of asynchronous parameter-server training
// (distribute::ParameterServerStrategy): every model variable cut into
// partitions along its first axis (distribute::PartitionVariables), and per
// ps device its partitions, its own optimizer (slots for its partitions)
// and EMA, behind its own mutex. A pushed gradient is applied by each ps
// device at once, under its lock, without waiting for any other push
// (TensorFlow's asynchronous parameter servers).
//
// An update is elementwise, so applying it partition by partition gives the
// bits applying it to the whole variable gives. Every ps device applies an
// update at its own number (UpdateClock's ticket: the learning-rate
// schedule's, Adam's and the EMA's step), even when two pushes reach the
// devices in different orders; each device's optimizer then counts the
// highest number it applied, which is the global step once no push is
// under way.
//
// Ownership: owns the partitions, optimizers and EMAs; refers to no
// variable of the caller beyond a call. Thread contract: Read and Push from
// any number of worker threads at once; CopyTo, CopyFrom and UpdatesPerShard
// take the locks too, but give a consistent state only while no push is
// under way (the coordinator holds the workers; UpdateClock).
#ifndef MIRRORTRAIN_TRAINER_PARAMETER_SERVER_SHARDS_H_
#define MIRRORTRAIN_TRAINER_PARAMETER_SERVER_SHARDS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "distribute/variable_partitioner.h"
#include "tensor/variable.h"
#include "trainer/optim/ema.h"
#include "trainer/optim/optimizer.h"

namespace mirrortrain::trainer {

class ParameterServerShards {
 public:
  using OptimizerFactory =
      std::function<absl::StatusOr<std::unique_ptr<Optimizer>>()>;
  struct EmaOptions {
    double decay;
    bool use_num_updates;
  };

  // `vars`: a model's variables (their names, shapes and current values are
  // taken), `forward_state`: those of them its forward pass writes
  // (Model::forward_state; the other non-trainable ones are frozen), `plan`:
  // their partitions (PartitionVariables over `ps_devices`); each ps device
  // gets an optimizer from `make_optimizer` and, with `ema`, an EMA of its
  // trainable partitions.
  static absl::StatusOr<std::unique_ptr<ParameterServerShards>> Create(
      absl::Span<Variable* const> vars,
      absl::Span<Variable* const> forward_state,
      const std::vector<std::vector<distribute::VariablePartition>>& plan,
      const std::vector<Device>& ps_devices,
      const OptimizerFactory& make_optimizer, std::optional<EmaOptions> ema);
  ~ParameterServerShards();

  // Copies the current values into `vars` (a worker model's variables, in
  // Create's order), each ps device's under its lock.
  absl::Status Read(absl::Span<Variable* const> vars) const;
  // The values of the forward-state variables of `vars` (Create's
  // `forward_state`, at the same places in a worker model's variables:
  // batch-norm moving statistics), copied: what Push takes as `read` after
  // a Read.
  absl::StatusOr<std::vector<Tensor>> ForwardState(
      absl::Span<Variable* const> vars) const;
  // Applies `grads` (one per trainable variable of `vars`, in order) as
  // update number `update` (1-based), and adds to the non-trainable ones
  // the change the worker's forward pass made to them since `read`
  // (ForwardState after its Read): concurrent workers' changes add up, as
  // TensorFlow's parameter servers apply a layer's assign_sub, instead of
  // the last push's value winning. Each ps device under its lock: its
  // optimizer's update, then its EMA's.
  absl::Status Push(absl::Span<Variable* const> vars,
                    absl::Span<const Tensor> read,
                    absl::Span<const Tensor> grads, int64_t update);

  // Copies the whole state into full-size variables: `vars` (Create's
  // order), `optimizer`'s slots of the trainable ones and `ema`'s shadows
  // (if any); and back, with `updates` as every optimizer's iterations.
  absl::Status CopyTo(absl::Span<Variable* const> vars,
                      const Optimizer& optimizer,
                      const ExponentialMovingAverage* ema) const;
  absl::Status CopyFrom(absl::Span<Variable* const> vars,
                        const Optimizer& optimizer,
                        const ExponentialMovingAverage* ema, int64_t updates);

  // Updates each ps device has applied, counted one by one (tests: every
  // push is applied exactly once on every device that holds a trainable
  // partition; the optimizers' iterations hold the highest update number).
  std::vector<int64_t> UpdatesPerShard() const;

  // Changes with every Push (at its start and its end) and CopyFrom (at its
  // start): a copy made by CopyTo at one version, the same before and
  // after it, is still the state while the version holds.
  int64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  struct Part;
  struct Shard;
  // Which full-size tensor (value, slot or shadow) a partition is copied
  // to or from.
  using FullTensor = std::function<absl::StatusOr<Tensor>(int var)>;
  using PartTensor =
      std::function<absl::StatusOr<Tensor>(const Shard&, const Part&)>;
  // The values, `optimizer`'s slots and `ema`'s shadows, full-size and
  // partitioned.
  static std::vector<std::pair<FullTensor, PartTensor>> StateTensors(
      absl::Span<Variable* const> vars, const Optimizer& optimizer,
      const ExponentialMovingAverage* ema);
  absl::Status Copy(const std::vector<std::pair<FullTensor, PartTensor>>& what,
                    bool to_full) const;

  ParameterServerShards() = default;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<int> grad_index_;  // Per variable: its gradient's, or -1.
  // Per variable: its index in Push's `read` (non-trainable ones), or -1.
  std::vector<int> state_index_;
  int states_ = 0;  // Non-trainable variables.
  std::atomic<int64_t> version_{0};
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_PARAMETER_SERVER_SHARDS_H_
