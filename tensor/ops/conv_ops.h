// 2-D convolution, NHWC input and HWIO filter (tf.nn.conv2d).
#ifndef MIRRORTRAIN_TENSOR_OPS_CONV_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_CONV_OPS_H_

#include "absl/status/statusor.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/window.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

struct Conv2DOptions {
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  Padding padding = Padding::kSame;
  // Taps this many rows (columns) apart: a dilated (atrous) convolution,
  // tf.nn.conv2d's dilations. Dilated ones run on im2col (and col2im) with
  // GEMMs on every device, never the direct, implicit or Winograd GPU
  // kernels.
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
};

// x [N,H,W,C] * filter [KH,KW,C,O] -> [N,OH,OW,O]; a filter [KH,KW,C/G,O]
// makes it grouped, as tf.nn.conv2d infers it: G groups of C/G channels,
// each convolved with its O/G filters, the outputs in group order (as
// Split, G convolutions and Concat). im2col over chunks of
// the batch, then one GEMM per chunk: on CPUs chunks sized for the cache
// and split over threads; on GPUs chunks under a 256 MiB column buffer,
// with cuBLAS GEMMs (MatMulPrecision applies) and a gather-form col2im,
// except patches of a few taps (cuda::DirectConvTakes), which run on
// direct kernels with no columns. The GPU input gradient of full-f32 (or
// f64) products is one implicit GEMM (cuda::ConvInputGrad) where it takes
// the shape: no columns written for col2im to read back. With the internal
// switch conv_gpu_winograd (off by default), stride-1 3x3 and 5x5 full-f32
// convolutions on GPUs run as Winograd F(2x2, rxr) instead, forward and
// both gradients (winograd_conv.h).
absl::StatusOr<Tensor> Conv2D(const Tensor& x, const Tensor& filter,
                              const Conv2DOptions& options = {});

// tf.nn.conv2d_transpose (Keras Conv2DTranspose's op): x [N,H,W,C] and
// filter [KH,KW,O,C] -> [N,out_h,out_w,O], the adjoint of Conv2D(y, filter,
// options) for y of that shape: Conv2D's input gradient with x as its
// output's gradient. InvalidArgument unless Conv2D of an [N,out_h,out_w,O]
// input under `options` has x's shape (TensorFlow's rule; same padding pads
// as that Conv2D does). It runs Conv2D's kernels, every path of theirs on
// CPUs and GPUs: the input gradient's forward, the gradient of x as Conv2D's
// forward and the filter's as Conv2D's filter gradient (with x as the
// output's gradient). Ungrouped.
absl::StatusOr<Tensor> Conv2DTranspose(const Tensor& x, const Tensor& filter,
                                       int64_t out_h, int64_t out_w,
                                       const Conv2DOptions& options = {});

// relu(conv2d(x, filter) + bias), bias [O]: a Conv2D layer with relu as one
// op (a grouped filter: GroupedConv2D's ops, then BiasAddRelu). On GPUs (f32)
// each chunk's GEMM adds the bias and applies relu in its cuBLASLt epilogue;
// elsewhere Conv2D, then BiasAddRelu's pass in place (the same numbers as
// Conv2D then BiasAddRelu). The gradient is BiasAddRelu's masked pass (dz and
// the bias sum together), then Conv2D's.
absl::StatusOr<Tensor> Conv2DBiasRelu(const Tensor& x, const Tensor& filter,
                                      const Tensor& bias,
                                      const Conv2DOptions& options = {});

// MaxPool2D(Conv2D(x, filter, options), pool): the same values, winners
// and gradients (a grouped filter: the two ops in turn, as below). On GPUs, for
// a 2x2 stride-2 VALID pool over a convolution the direct kernels take, one op
// whose kernel pools as it convolves (the convolution's output is never stored)
// and whose filter gradient reads the pool's gradient and winners (an Inf or
// NaN input read only by outputs the pool drops gives no NaN there, see
// cuda::DirectConv2DMaxPoolFilterGrad); for one the Winograd path takes
// (conv_gpu_winograd), one op whose output pass pools (winograd_conv.h),
// with the pool's gradient then the convolution's; elsewhere the two ops.
absl::StatusOr<Tensor> Conv2DMaxPool(const Tensor& x, const Tensor& filter,
                                     const Conv2DOptions& options,
                                     const Pool2DOptions& pool);
// relu(Conv2DMaxPool(x, filter, options, pool) + bias), bias [O]: the same
// values and gradients as Conv2DMaxPool then BiasAddRelu. Where
// Conv2DMaxPool is one op (GPUs), its kernel adds the bias and applies
// relu as it writes each window's maximum (one op, no pass over the
// pooled output); its gradient is BiasAddRelu's masked pass, then
// Conv2DMaxPool's. Elsewhere the two ops.
absl::StatusOr<Tensor> Conv2DMaxPoolBiasRelu(const Tensor& x,
                                             const Tensor& filter,
                                             const Tensor& bias,
                                             const Conv2DOptions& options,
                                             const Pool2DOptions& pool);

namespace internal {
// Caps the GPU column buffer at `bytes` (0 restores 256 MiB); tests use it
// to force several chunks. Process-wide.
void SetConvGpuColumnBytes(int64_t bytes);
// Caps what convs' kept columns (for their filter gradients) may hold at
// once per GPU at `bytes` (0 restores 1 GiB); tests use it to make filter
// gradients run im2col again. Process-wide.
void SetConvGpuKeptColumnBytes(int64_t bytes);
// Bytes that kept columns hold on `gpu` now.
int64_t ConvGpuKeptColumnBytes(int gpu);
// Whether GPU convolutions that cuda::DirectConvTakes run on the direct
// kernels (default true) or on im2col and GEMMs like the rest; tests
// compare the two. Process-wide.
void SetConvGpuDirect(bool enabled);
// Direct forward or filter-gradient kernel calls so far (tests check
// which path a convolution took).
int64_t DirectConvCalls();
// Fused Conv2DMaxPool (or Conv2DMaxPoolBiasRelu) forward or
// filter-gradient calls so far (of those).
int64_t FusedConvMaxPoolCalls();
// Whether GPU input gradients that cuda::ConvInputGradTakes run on the
// implicit GEMM (default true) or on a GEMM and col2im; tests compare the
// two. Process-wide.
void SetConvGpuImplicitInputGrad(bool enabled);
// Implicit input-gradient calls so far.
int64_t ImplicitInputGradCalls();
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_CONV_OPS_H_
