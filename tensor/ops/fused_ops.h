// Fused kernels for op chains every layer runs, as TensorFlow's grappler
// remapper fuses them (_FusedConv2D / _FusedMatMul with BiasAdd + Relu):
// one pass over the activations instead of one per op, forward and
// backward. Results equal the unfused chain up to float summation order.
// The convolution's (Conv2DBiasRelu) is in conv_ops.h, next to Conv2D.
#ifndef MIRRORTRAIN_TENSOR_OPS_FUSED_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_FUSED_OPS_H_

#include <any>

#include "absl/status/statusor.h"
#include "tensor/op.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/precision_ops.h"
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
// The result is stored as `rounding` asks (precision_ops.h); on GPUs under
// precision bf16 the epilogue then writes it as bfloat16.
absl::StatusOr<Tensor> MatMulBiasRelu(
    const Tensor& x, const Tensor& kernel, const Tensor& bias,
    OutputRounding rounding = OutputRounding::kNone);

namespace internal {
// For a product whose operand a is the output y of the MatMulBiasRelu
// record `producer` (read by nothing else: GradientLinks), with a's
// gradient g @ op(w): relu's masked pass of `producer`'s gradient done
// together with that product. Returns what `producer`'s gradient starts
// from (GradientLinks::handed), or an empty any when `producer` is not a
// MatMulBiasRelu or an outer tape records. On GPUs where the forward's
// epilogue kept the relu mask, one cuBLASLt product with the mask and the
// bias sum in its epilogue (DRELU_BGRAD): the product's result is written
// once, as the masked gradient, instead of written, read back with y and
// written again. Elsewhere the product, then the masked pass: the numbers
// of the gradient without the hand-off.
absl::StatusOr<std::any> ReluProductHandOff(const OpRecord& producer,
                                            const GemmOperand& g,
                                            const GemmOperand& w,
                                            bool transpose_w);
// How many hand-offs ran in this process (any thread), and how many of
// them as one cuBLASLt product: tests ask whether the fusion ran.
int64_t ReluHandOffs();
int64_t FusedReluHandOffs();

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
