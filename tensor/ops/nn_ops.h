// Neural-network ops: bias_add, softmax family, the fused sparse softmax
// cross-entropy, dropout.
#ifndef MIRRORTRAIN_TENSOR_OPS_NN_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_NN_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// x + bias along the last dimension (NHWC / [batch, units]).
absl::StatusOr<Tensor> BiasAdd(const Tensor& x, const Tensor& bias);
namespace internal {
// The gradient of a bias added along dy's last dimension: dy summed over
// every other axis (BiasAdd's and MatMulBias's).
absl::StatusOr<Tensor> BiasGradient(const Tensor& dy, const Shape& bias_shape);
}  // namespace internal
// Along the last axis.
absl::StatusOr<Tensor> Softmax(const Tensor& logits);
absl::StatusOr<Tensor> LogSoftmax(const Tensor& logits);
// Per-example -log softmax(logits)[label] for logits [batch, classes] and
// integer labels [batch], computed stably (max-shifted log-sum-exp). A label
// outside [0, classes) is, as in TensorFlow, an error naming the row on the
// CPU and a NaN loss and gradient row on a GPU (no host wait). Training
// input is range-checked when it is read. Differentiable with respect to
// logits.
absl::StatusOr<Tensor> SparseSoftmaxCrossEntropyWithLogits(
    const Tensor& logits, const Tensor& labels);
// Inverted dropout: zeroes each element with probability `rate` and scales
// the rest by 1/(1-rate). The mask is a pure function of (seed, element
// index + element_offset), so reruns agree and a batch cut into replica
// shards (each passing its first row's element offset) gets the same mask
// as the whole batch. rate in [0, 1).
absl::StatusOr<Tensor> Dropout(const Tensor& x, double rate, uint64_t seed,
                               int64_t element_offset = 0);
// The same with seed DropoutStepSeed(step seed, stream, salt)
// (tensor/dropout_mask.h), the step seed read from `step_seed` (one int64
// element on x's device) where the mask is drawn: a captured CUDA graph
// replays with each step's seed.
absl::StatusOr<Tensor> Dropout(const Tensor& x, double rate,
                               const Tensor& step_seed, uint64_t stream,
                               uint64_t salt, int64_t element_offset = 0);

// Standard normal noise of `like`'s shape, dtype and device: element i is
// DropoutNormal(salt, i + element_offset) (tensor/dropout_mask.h), salt
// DropoutSalt of `seed`, or with a step seed as Dropout's above; a pure
// function of them, so a shard draws the whole batch's. Not recorded: a
// constant to the tape.
absl::StatusOr<Tensor> StandardNormal(const Tensor& like, uint64_t seed,
                                      int64_t element_offset = 0);
absl::StatusOr<Tensor> StandardNormal(const Tensor& like,
                                      const Tensor& step_seed, uint64_t stream,
                                      uint64_t salt,
                                      int64_t element_offset = 0);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_NN_OPS_H_
