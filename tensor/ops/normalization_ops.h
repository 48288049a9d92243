// Batch normalization as three ops, so that synchronized batch norm can
// all-reduce what lies between the first two (Keras's synchronized
// moments):
//   ChannelSums: the sufficient statistics of x over every axis but the
//     last, in float64;
//   MomentsFromSums: the mean and variance they give;
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
// Accumulated and returned in float64 whatever x's dtype: the variance
// sum_sq / n - mean^2 made from them cancels as many digits as mean^2 /
// variance has (inputs of mean 300 and spread 0.5 lose 6), which float32
// sums would not have.
absl::StatusOr<ChannelSumsResult> ChannelSums(const Tensor& x);

struct MomentsResult {
  Tensor mean;      // [C]: sum / count.
  Tensor variance;  // [C]: max(sum_sq / count - mean^2, 0).
};
// The batch statistics from ChannelSums's float64 sums over `count`
// elements per channel (count 0: zeros, as divide_no_nan), computed in
// double and returned as `dtype`: one op (one kernel on a GPU), so that
// the float64 arithmetic costs no chain of small ops. Differentiable in
// both sums.
absl::StatusOr<MomentsResult> MomentsFromSums(const ChannelSumsResult& sums,
                                              int64_t count, DType dtype);

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
