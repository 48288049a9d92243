// Exponential moving averages of variables, after
// tf.train.ExponentialMovingAverage, and evaluation with the averages.
//
// Apply(n) updates every shadow as
//   shadow -= (shadow - w) * (1 - d),
//   d = min(decay, (1 + n) / (10 + n)) with use_num_updates, else decay,
// in the variable's dtype, with d and 1 - d formed in float32 first (as
// TensorFlow does). n is the number of optimizer steps applied so far,
// including the one just applied. A shadow starts at its variable's initial
// value.
//
// Ownership: the EMA owns its shadow variables. It refers to the tracked
// variables by address; they must outlive it and must not be moved.
//
// Thread contract: not synchronised; one EMA per replica, used from that
// replica's thread only (as the optimizer).
#ifndef MIRRORTRAIN_TRAINER_OPTIM_EMA_H_
#define MIRRORTRAIN_TRAINER_OPTIM_EMA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/batched_copy.h"
#include "tensor/staged_tensor.h"
#include "tensor/tensor.h"
#include "tensor/variable.h"

namespace mirrortrain::trainer {

class ExponentialMovingAverage {
 public:
  // `decay` is taken as given; Create() validates it.
  ExponentialMovingAverage(double decay, bool use_num_updates);
  // Fails (InvalidArgument, key `ema.decay`) unless decay is in [0, 1].
  static absl::StatusOr<std::unique_ptr<ExponentialMovingAverage>> Create(
      double decay, bool use_num_updates);

  ExponentialMovingAverage(const ExponentialMovingAverage&) = delete;
  ExponentialMovingAverage& operator=(const ExponentialMovingAverage&) = delete;

  // The name of the shadow of the variable named `variable_name` (its
  // checkpoint entry): "<variable_name>/ExponentialMovingAverage", as TF.
  static std::string ShadowName(absl::string_view variable_name);
  // Whether `name` is a shadow's (ends as ShadowName makes it).
  static bool IsShadowName(absl::string_view name);

  // Creates a shadow named ShadowName(var name) (non-trainable,
  // on the variable's device, initialised from the variable's initial
  // value) for each float variable not tracked yet; tracking twice is a
  // no-op.
  absl::Status Track(absl::Span<Variable* const> vars);
  // Updates every shadow from its variable's current value, on the
  // variable's device. Fails, changing nothing, when num_updates < 0 with
  // use_num_updates.
  absl::Status Apply(int64_t num_updates);
  // Apply in two halves, for a captured CUDA graph that holds the update
  // kernels: Stage makes the one-element tensors the kernels read (one per
  // device and dtype, StagedTensor) hold 1 - DecayAt(num_updates), in stream
  // order, and is called outside the capture before every replay (with
  // `uploads`: at its Flush()); ApplyStaged enqueues the updates.
  absl::Status Stage(int64_t num_updates, BatchedCopy* uploads = nullptr);
  absl::Status ApplyStaged();
  // Changes whenever a decay table is allocated (see Optimizer's).
  int64_t staging_generation() const {
    return static_cast<int64_t>(decays_.size());
  }
  // The decay Apply(num_updates) uses, computed in float32 as TensorFlow
  // does (for every variable dtype).
  double DecayAt(int64_t num_updates) const;

  // The shadow of `var`, or nullptr when `var` is not tracked.
  Variable* Shadow(const Variable& var) const;
  // Shadows in the order their variables were first tracked.
  std::vector<Variable*> ShadowVariables() const;
  // Tracked variables, in the same order.
  std::vector<Variable*> TrackedVariables() const;

  double decay() const { return decay_; }
  bool use_num_updates() const { return use_num_updates_; }

 private:
  double decay_;
  bool use_num_updates_;
  std::vector<Variable*> vars_;
  std::vector<std::unique_ptr<Variable>> shadows_;  // parallel to vars_
  absl::flat_hash_map<const Variable*, size_t> index_;
  // 1 - decay for the variables of one device and dtype.
  struct DecayTable {
    Device device;
    DType dtype;
    StagedTensor value;
  };
  DecayTable* DecayTableOf(const Variable& var);
  std::vector<DecayTable> decays_;
};

// Swaps the shadow values into the tracked variables for evaluation, and
// the trained values back on Restore() or destruction. The trained values
// come back bit for bit; the shadows are not modified.
//
// The EMA and its tracked variables must outlive this object; do not Apply
// the EMA or train while the averages are swapped in. Movable; a moved-from
// object restores nothing.
class ScopedEmaWeights {
 public:
  static absl::StatusOr<ScopedEmaWeights> Create(
      const ExponentialMovingAverage& ema);
  ~ScopedEmaWeights();
  ScopedEmaWeights(ScopedEmaWeights&& other) noexcept;
  ScopedEmaWeights& operator=(ScopedEmaWeights&& other) noexcept;
  ScopedEmaWeights(const ScopedEmaWeights&) = delete;
  ScopedEmaWeights& operator=(const ScopedEmaWeights&) = delete;

  // Puts the trained values back; later calls and destruction do nothing.
  // The destructor calls it and, as it cannot report, drops its error
  // (possible only if a device copy fails).
  absl::Status Restore();

 private:
  ScopedEmaWeights() = default;

  std::vector<Variable*> vars_;
  std::vector<Tensor> saved_;  // the trained values, parallel to vars_
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_OPTIM_EMA_H_
