// The part of a 2-D sliding-window geometry that convolution and pooling
// share, one struct for the CPU loops (ops/conv_ops.cc, ops/pooling_ops.cc)
// and the CUDA kernels (cuda/cuda_kernels.h, cuda/image_window.cuh).
#ifndef MIRRORTRAIN_TENSOR_IMAGE_WINDOW_H_
#define MIRRORTRAIN_TENSOR_IMAGE_WINDOW_H_

#include <cstdint>

namespace mirrortrain {

// NHWC input [n, h, w, c]; output pixel (oy, ox) of [n, oh, ow, ...] covers
// input rows oy * sh - pt + ky * dh for ky in [0, kh) and columns
// ox * sw - pl + kx * dw for kx in [0, kw): dh, dw > 1 is a dilated
// (atrous) window, whose taps are dh rows and dw columns apart
// (tf.nn.conv2d's dilations); only convolutions read them (pooling windows
// keep 1).
struct ImageWindow {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t kh = 1, kw = 1;
  int64_t oh = 0, ow = 0;
  int64_t sh = 1, sw = 1;
  int64_t pt = 0, pl = 0;
  int64_t dh = 1, dw = 1;
  int64_t pixels() const { return oh * ow; }  // Output pixels per image.
  bool dilated() const { return dh != 1 || dw != 1; }
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_IMAGE_WINDOW_H_
