// Reductions and their broadcasting inverse.
#ifndef MIRRORTRAIN_TENSOR_OPS_REDUCTION_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_REDUCTION_OPS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// Sums over `axes` (negative counts from the end; empty means all axes, as
// tf.reduce_sum(x) with axis=None). Repeated axes are an error.
absl::StatusOr<Tensor> ReduceSum(const Tensor& x, std::vector<int> axes = {},
                                 bool keepdims = false);
// The sums times 1 / count; a mean over an empty axis is NaN (0 / 0, as
// tf.reduce_mean gives).
absl::StatusOr<Tensor> ReduceMean(const Tensor& x, std::vector<int> axes = {},
                                  bool keepdims = false);
// sum(x^2) / 2, a scalar (tf.nn.l2_loss).
absl::StatusOr<Tensor> L2Loss(const Tensor& x);
// Repeats x along dimensions of size 1 (and new leading ones) to `shape`.
absl::StatusOr<Tensor> BroadcastTo(const Tensor& x, const Shape& shape);
// The inverse of broadcasting `shape` to g's shape: sums g over the
// broadcast dimensions. Returns g itself when the shapes already match.
absl::StatusOr<Tensor> SumToShape(const Tensor& g, const Shape& shape);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_REDUCTION_OPS_H_
