// Output size and padding of a sliding window (convolution, pooling) with
// TensorFlow's SAME/VALID rules.
#ifndef MIRRORTRAIN_TENSOR_OPS_WINDOW_H_
#define MIRRORTRAIN_TENSOR_OPS_WINDOW_H_

#include <algorithm>
#include <cstdint>

#include "tensor/image_window.h"
#include "tensor/shape.h"

namespace mirrortrain::ops {

enum class Padding { kSame, kValid };

struct Window1D {
  int64_t out = 0;         // Output length.
  int64_t pad_before = 0;  // Implicit zeros (or -inf for pooling) before.
};

// SAME: out = ceil(in / stride), the padding split with the extra element
// after (pad_before = total / 2). VALID: out = ceil((in - k + 1) / stride).
inline Window1D ComputeWindow(int64_t in, int64_t k, int64_t stride,
                              Padding padding) {
  Window1D w;
  if (padding == Padding::kSame) {
    w.out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>((w.out - 1) * stride + k - in, 0);
    w.pad_before = total / 2;
  } else {
    w.out = in >= k ? (in - k) / stride + 1 : 0;
  }
  return w;
}

// The span of k taps `dilation` apart: (k - 1) * dilation + 1 cells.
inline int64_t DilatedSize(int64_t k, int64_t dilation) {
  return (k - 1) * dilation + 1;
}

// The window of kh x kw cells with strides sh x sw over NHWC input of shape
// `nhwc` (rank 4, checked by the caller) under `padding`, its taps dh rows
// and dw columns apart (TensorFlow pads and sizes a dilated window as one
// of its span).
inline ImageWindow MakeImageWindow(const Shape& nhwc, int64_t kh, int64_t kw,
                                   int64_t sh, int64_t sw, Padding padding,
                                   int64_t dh = 1, int64_t dw = 1) {
  const Window1D wy = ComputeWindow(nhwc[1], DilatedSize(kh, dh), sh, padding);
  const Window1D wx = ComputeWindow(nhwc[2], DilatedSize(kw, dw), sw, padding);
  return {.n = nhwc[0],
          .h = nhwc[1],
          .w = nhwc[2],
          .c = nhwc[3],
          .kh = kh,
          .kw = kw,
          .oh = wy.out,
          .ow = wx.out,
          .sh = sh,
          .sw = sw,
          .pt = wy.pad_before,
          .pl = wx.pad_before,
          .dh = dh,
          .dw = dw};
}

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_WINDOW_H_
