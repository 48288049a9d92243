// Rounding to bfloat16 for mixed-precision training (`precision: bf16`):
// the values a bf16 tensor would hold, kept in f32 storage. Unrecorded: the
// tape sees no op, so a gradient flows through unchanged (as through
// TensorFlow's Cast pair, whose gradient is a cast of the gradient, which
// the next bf16 matrix product rounds in any case).
//
// Only f32 tensors round; f64 and integer tensors are left as they are (the
// f64 gradient checks, token ids). Kernels run on the tensor's device, on
// the calling thread's stream.
#ifndef MIRRORTRAIN_TENSOR_OPS_PRECISION_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_PRECISION_OPS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// Rounds `t`'s elements in place. For an op's output that the tape already
// holds: gradients that read the output (relu's, softmax's) then see the
// stored bf16 value, as they would with bf16 storage.
absl::Status RoundToBFloat16InPlace(Tensor& t);

// A rounded copy of `x` (`x` itself when it does not round).
absl::StatusOr<Tensor> RoundedToBFloat16(const Tensor& x);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_PRECISION_OPS_H_
