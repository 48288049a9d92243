// Shape and indexing ops: reshape, transpose, concat, gather, one_hot, cast,
// argmax, stop_gradient, and constant factories.
#ifndef MIRRORTRAIN_TENSOR_OPS_ARRAY_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_ARRAY_OPS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// A view with a new shape; one dimension may be -1 (inferred).
absl::StatusOr<Tensor> Reshape(const Tensor& x, const Shape& shape);
// out.shape[i] = x.shape[perm[i]].
absl::StatusOr<Tensor> Transpose(const Tensor& x, const std::vector<int>& perm);
absl::StatusOr<Tensor> Concat(absl::Span<const Tensor> xs, int axis);
// x with `before` and `after` cells of zeros along `axis` (tf.pad with
// zeros on one axis), as a recorded Concat of zero blocks and x: its
// gradient is Concat's; x itself where both are 0.
absl::StatusOr<Tensor> PadZeros(const Tensor& x, int axis, int64_t before,
                                int64_t after);
// The cells [begin, begin + size) of `axis` (tf.slice along one axis), a
// copy; its gradient puts the output's between zeros (PadZeros).
absl::StatusOr<Tensor> Slice(const Tensor& x, int axis, int64_t begin,
                             int64_t size);
// tf.split(x, pieces, axis): `pieces` equal copies of consecutive blocks
// along `axis` (whose size they must divide); Concat's inverse, and its
// gradient is Concat of theirs.
absl::StatusOr<std::vector<Tensor>> Split(const Tensor& x, int64_t pieces,
                                          int axis);
// Rows of `params` along axis 0 picked by integer `indices`:
// out.shape = indices.shape + params.shape[1:] (tf.gather, axis 0). The
// gradient scatter-adds into zeros shaped like params. An index out of
// range is an error; inside an ops::ScopedIndexChecks (index_checks.h) it
// gives a row of zeros (and no gradient) and is recorded instead.
absl::StatusOr<Tensor> Gather(const Tensor& params, const Tensor& indices);
inline absl::StatusOr<Tensor> EmbeddingLookup(const Tensor& params,
                                              const Tensor& ids) {
  return Gather(params, ids);
}
// indices.shape + [depth]; out-of-range indices give an all-`off` row, as in
// TensorFlow.
absl::StatusOr<Tensor> OneHot(const Tensor& indices, int64_t depth,
                              DType dtype = DType::kF32, double on = 1.0,
                              double off = 0.0);
// Converts dtype; differentiable between floating types. Float to integer
// truncates; NaN and values out of the integer's range are an error, or,
// inside an ops::ScopedIndexChecks, give 0 and are recorded.
absl::StatusOr<Tensor> Cast(const Tensor& x, DType dtype);
// Index (i64) of the largest value along `axis`; the first one on ties.
absl::StatusOr<Tensor> ArgMax(const Tensor& x, int axis);
// The same values as a new tensor through which no gradient flows.
absl::StatusOr<Tensor> StopGradient(const Tensor& x);

absl::StatusOr<Tensor> ZerosLike(const Tensor& x);
absl::StatusOr<Tensor> OnesLike(const Tensor& x);
absl::StatusOr<Tensor> Fill(DType dtype, const Shape& shape, double value,
                            Device device = Device::Cpu());

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_ARRAY_OPS_H_
