// Depthwise 2-D convolution (tf.nn.depthwise_conv2d): each input channel
// convolved with its own `multiplier` filters, NHWC input [N, H, W, C],
// filter [KH, KW, C, M], output [N, OH, OW, C * M] with output channel
// c * M + m from input channel c and filter [:, :, c, m]. The window
// geometry (strides, SAME/VALID padding) is Conv2D's.
//
// Direct loops on CPUs and direct kernels on GPUs (no columns: a depthwise
// output reads KH * KW values, too few for a matrix product). Each output
// sums its taps in row-major window order; the filter gradient sums over
// (image, row, column) in order on CPUs and in a fixed, shape-given order
// on GPUs: deterministic, no atomics. Under `precision: bf16` (float32
// tensors) the op reads its operands as the products do: x, the filter and,
// in its gradient, dy rounded to bfloat16, products and sums in float32.
#ifndef MIRRORTRAIN_TENSOR_OPS_DEPTHWISE_CONV_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_DEPTHWISE_CONV_OPS_H_

#include "absl/status/statusor.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

absl::StatusOr<Tensor> DepthwiseConv2D(const Tensor& x, const Tensor& filter,
                                       const Conv2DOptions& options = {});

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_DEPTHWISE_CONV_OPS_H_
