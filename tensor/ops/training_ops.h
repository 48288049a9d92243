// In-place optimizer and moving-average updates: TensorFlow's training ops
// (ResourceApplyGradientDescent / Momentum / AdagradV2 / Adam / RMSProp, and
// assign_moving_average), on host tensors (CPU loops over the kernel pool)
// or GPU tensors (one CUDA kernel on the calling thread's current stream).
// The arithmetic is shared (tensor/update_rules.h) and GPU kernels are built
// without FMA contraction, so both devices compute the same roundings.
//
// Not recorded on tapes. The tensors' buffers are updated in place: every
// view of them (Variables included) sees the new values, and the update
// also writes a variable's bfloat16 copy (Buffer::bf16_copy) on GPUs.
#ifndef MIRRORTRAIN_TENSOR_OPS_TRAINING_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_TRAINING_OPS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"
#include "tensor/update_rules.h"

namespace mirrortrain::ops {

// Elements of an update's `params` tensor.
inline constexpr int64_t kUpdateParamCount = UpdateParams<float>::kCount;

// Writes UpdateParams<T>::From(hyper), T = params' dtype, into `params`: a
// host tensor of kUpdateParamCount floating elements.
absl::Status PackUpdateParams(const UpdateHyperparams& hyper,
                              const Tensor& params);

// var and its slots (UpdateRuleSlots(rule) of them, in the order listed in
// update_rules.h) are updated from grad. All of one floating dtype, shape
// and device; `params` (PackUpdateParams) has that dtype and device and is
// read where the update runs, so a captured CUDA graph reads each step's.
absl::Status ApplyUpdate(UpdateRule rule, const Tensor& params,
                         const Tensor& grad, const Tensor& var,
                         absl::Span<const Tensor> slots);

// One variable's operands for ApplyUpdates, as ApplyUpdate takes them.
struct UpdateTarget {
  Tensor params;
  Tensor grad;
  Tensor var;
  std::vector<Tensor> slots;
  // Further terms of the gradient, each like `grad`: the update reads
  // (grad + more_grads[0]) + more_grads[1] ..., the sum an all-reduce of
  // the terms would make (in order, element by element), so replicas that
  // share memory sum each other's gradients here instead of in a pass of
  // their own. At most kMaxGradientTerms - 1; read only.
  std::vector<Tensor> more_grads;
};
// ApplyUpdate for each target, with the same results; the GPU targets of
// one device and dtype update in one kernel launch (per few dozen): a
// model's many small variables would otherwise cost a launch each, every
// step. No two tensors it writes (variables and slots) may overlap (an
// optimizer's never do); a variable listed twice, or a slot aliasing one,
// is an error. Everything is checked before anything is updated.
absl::Status ApplyUpdates(UpdateRule rule,
                          absl::Span<const UpdateTarget> targets);
// The same with the parameters packed here and copied to var's device (on a
// GPU the host waits for that copy): for tests and one-off updates.
absl::Status ApplyUpdate(UpdateRule rule, const UpdateHyperparams& hyper,
                         const Tensor& grad, const Tensor& var,
                         absl::Span<const Tensor> slots);

// shadow -= (shadow - value) * one_minus_decay. Same dtype, shape and
// device; one_minus_decay is one element of that dtype on that device.
absl::Status AssignMovingAverage(const Tensor& shadow, const Tensor& value,
                                 const Tensor& one_minus_decay);
// The same with one_minus_decay rounded to the dtype here.
absl::Status AssignMovingAverage(const Tensor& shadow, const Tensor& value,
                                 double one_minus_decay);

// AssignMovingAverage's operands, for AssignMovingAverages.
struct MovingAverageTarget {
  Tensor shadow;
  Tensor value;
  Tensor one_minus_decay;
};
// AssignMovingAverage for each target, batched on GPUs as ApplyUpdates.
absl::Status AssignMovingAverages(
    absl::Span<const MovingAverageTarget> targets);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_TRAINING_OPS_H_
