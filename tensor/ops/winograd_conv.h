// Stride-1 3x3 and 5x5 convolutions as Winograd's F(2x2, r x r)
// (tensor/winograd.h): the input and filter transforms, one batched GEMM
// over the a^2 transform points, the output transform. Internal to Conv2D
// (conv_ops.cc), which takes this path where WinogradConvTakes says so.
//
// Numbers: the same sums as im2col + GEMM in another order and through the
// transforms, so f32 results differ from them by a few ulps of the
// outputs' magnitudes (measured in winograd_conv_test). On GPUs it is the
// internal switch `conv_gpu_winograd` (off by default: its worth is for a
// device to measure, README "Internal switches").
//
// Thread contract: passes run on the calling thread's stream (GPUs) or
// its ParallelFor (CPUs); the setters are process-wide.
#ifndef MIRRORTRAIN_TENSOR_OPS_WINOGRAD_CONV_H_
#define MIRRORTRAIN_TENSOR_OPS_WINOGRAD_CONV_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops::internal {

// Whether Conv2D of x under g runs as Winograd: the switch of x's device
// is on, strides 1, an undilated square 3x3 or 5x5 filter, padding below the
// filter's size, nothing empty, each transformed tensor within 1 GiB, and f64
// or f32 under precision fp32 (tf32 and bf16 products run on tensor cores,
// where fewer FLOPs matter less than the passes' memory traffic). Conv2D
// leaves the direct kernels' convolutions on them (cuda::DirectConvTakes).
bool WinogradConvTakes(const cuda::Conv2DGeometry& g, const Tensor& x);

// y [n, oh, ow, o], every element written: conv(x, filter), or with
// `relu_bias` ([o], may be null) relu(conv + bias) in the output pass, as
// BiasAddRelu computes it. `transformed_input` (may be null) gets x's
// transform, which WinogradConv2DFilterGrad can read instead of making it
// again.
absl::Status WinogradConv2D(const cuda::Conv2DGeometry& g, const Tensor& x,
                            const Tensor& filter, const Tensor* relu_bias,
                            Tensor& y, Tensor* transformed_input = nullptr);
// The same convolution's 2x2 stride-2 VALID max pool, y [n, oh / 2, ow / 2,
// o], in its output pass (each 2x2 tile is one window: the convolution's
// output is never stored), with relu_bias after the pool; `argmax` (may
// be null) gets MaxPool2D's winners: the offsets in an image of the
// convolution's output. oh and ow >= 2.
absl::Status WinogradConv2DMaxPool(const cuda::Conv2DGeometry& g,
                                   const Tensor& x, const Tensor& filter,
                                   const Tensor* relu_bias, Tensor& y,
                                   Tensor* argmax,
                                   Tensor* transformed_input = nullptr);
// dx [n, h, w, c], every element written, for dy [n, oh, ow, o]: the
// correlation of dy with the filter turned 180 degrees.
absl::Status WinogradConv2DInputGrad(const cuda::Conv2DGeometry& g,
                                     const Tensor& dy, const Tensor& filter,
                                     Tensor& dx);
// dfilter [r, r, c, o], every element written; `transformed_input`
// (undefined: transformed here) is WinogradConv2D's of the same x.
absl::Status WinogradConv2DFilterGrad(const cuda::Conv2DGeometry& g,
                                      const Tensor& x, const Tensor& dy,
                                      Tensor& dfilter,
                                      const Tensor& transformed_input = {});

// GPUs: the switch conv_gpu_winograd (default off).
void SetConvGpuWinograd(bool enabled);
// CPUs (default off; tests compare the path with im2col + GEMM there).
void SetConvCpuWinograd(bool enabled);
// Forward, input-gradient and filter-gradient calls so far (tests check
// which path a convolution took).
int64_t WinogradConvCalls();

}  // namespace mirrortrain::ops::internal

#endif  // MIRRORTRAIN_TENSOR_OPS_WINOGRAD_CONV_H_
