// In-place optimizer and moving-average updates: TensorFlow's training ops
// (ResourceApplyGradientDescent / Momentum / AdagradV2 / Adam / RMSProp, and
// assign_moving_average), on host tensors (CPU loops over the kernel pool)
// or GPU tensors (one CUDA kernel on the calling thread's current stream).
// The arithmetic is shared (tensor/update_rules.h) and GPU kernels are built
// without FMA contraction, so both devices compute the same roundings.
//
// Not recorded on tapes. The tensors' buffers are updated in place: every
// view of them (Variables included) sees the new values.
#ifndef MIRRORTRAIN_TENSOR_OPS_TRAINING_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_TRAINING_OPS_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"
#include "tensor/update_rules.h"

namespace mirrortrain::ops {

// var and its slots (UpdateRuleSlots(rule) of them, in the order listed in
// update_rules.h) are updated from grad. All of one floating dtype, shape
// and device.
absl::Status ApplyUpdate(UpdateRule rule, const UpdateHyperparams& hyper,
                         const Tensor& grad, const Tensor& var,
                         absl::Span<const Tensor> slots);

// shadow -= (shadow - value) * one_minus_decay, with one_minus_decay
// rounded to the dtype. Same dtype, shape and device.
absl::Status AssignMovingAverage(const Tensor& shadow, const Tensor& value,
                                 double one_minus_decay);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_TRAINING_OPS_H_
