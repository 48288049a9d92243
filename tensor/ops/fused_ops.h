// Fused kernels for op chains every layer runs, as TensorFlow's grappler
// remapper fuses them (_FusedConv2D / _FusedMatMul with BiasAdd + Relu):
// one pass over the activations instead of one per op, forward and
// backward. Results equal the unfused chain up to float summation order.
// The convolution's (Conv2DBiasRelu) is in conv_ops.h, next to Conv2D.
#ifndef MIRRORTRAIN_TENSOR_OPS_FUSED_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_FUSED_OPS_H_

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// relu(x + bias), bias along the last dimension (NHWC / [batch, units]).
// The gradient masks dy by y > 0 and sums it over rows for the bias in the
// same pass; the bias sum runs over fixed row blocks added in block order,
// so it does not depend on the thread count. GPU tensors get the same
// fusion (cuda/fused_kernels.cu; the bias sum there runs in double).
absl::StatusOr<Tensor> BiasAddRelu(const Tensor& x, const Tensor& bias);

// relu(x @ kernel + bias), x [m, k], kernel [k, n], bias [n]: a Dense
// layer with relu as one op. On GPUs (f32) one cuBLASLt GEMM with the bias
// and relu in its epilogue; elsewhere the product, then BiasAddRelu's pass
// in place (the same numbers as MatMul then BiasAddRelu). The gradient is
// BiasAddRelu's masked pass (dz and the bias sum together), then MatMul's.
absl::StatusOr<Tensor> MatMulBiasRelu(const Tensor& x, const Tensor& kernel,
                                      const Tensor& bias);

namespace internal {
// y = relu(x + bias), bias along the last dimension; y may be x
// (unrecorded; the fused ops' forward pass).
absl::Status BiasRelu(const Tensor& x, const Tensor& bias, Tensor& y);
// For relu(z + bias) with output y and its gradient dy: dz = dy masked by
// y > 0 and, when `need_db`, db = dz summed over rows, in one pass.
absl::Status BiasReluGrads(const Tensor& y, const Tensor& dy,
                           const Shape& bias_shape, bool need_db, Tensor* dz,
                           Tensor* db);
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_FUSED_OPS_H_
