// Batch normalization as two ops, so that synchronized batch norm can
// all-reduce what lies between them (Keras's synchronized moments):
//   ChannelSums: the sufficient statistics of x over every axis but the last;
//   BatchNormalization: tf.nn.batch_normalization with per-channel mean,
//     variance, offset and scale.
// Both run on the CPU and on CUDA devices, f32 and f64.
#ifndef MIRRORTRAIN_TENSOR_OPS_NORMALIZATION_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_NORMALIZATION_OPS_H_

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

struct ChannelSumsResult {
  Tensor sum;     // [C]: the sum of x over every axis but the last.
  Tensor sum_sq;  // [C]: the sum of x * x likewise.
};
// x of rank >= 1 with C = its last dimension; an empty x gives zeros.
// Accumulated in double.
absl::StatusOr<ChannelSumsResult> ChannelSums(const Tensor& x);

// (x - mean) * rsqrt(variance + epsilon) * scale + offset over the last axis
// of x, computed as x * k + (offset - mean * k) with k = scale *
// rsqrt(variance + epsilon) (tf.nn.batch_normalization's form); mean,
// variance, offset and scale are [C]. Differentiable in all five.
absl::StatusOr<Tensor> BatchNormalization(const Tensor& x, const Tensor& mean,
                                          const Tensor& variance,
                                          const Tensor& offset,
                                          const Tensor& scale, double epsilon);

// Layer normalization over the last axis of x (Keras LayerNormalization,
// axis -1): per row, (x - mean) / sqrt(variance + epsilon) * gamma + beta
// with gamma and beta [C]. Statistics in double; one op (CPU and CUDA
// kernels) whose gradient needs one pass over the row for dx and the column
// sums of the existing ChannelSums kernels for gamma and beta.
// Differentiable in x, gamma and beta.
absl::StatusOr<Tensor> LayerNormalization(const Tensor& x, const Tensor& gamma,
                                          const Tensor& beta, double epsilon);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_NORMALIZATION_OPS_H_
