// ImageWindow (tensor/image_window.h) as the conv and pooling kernels read
// it: in index type I (see DispatchIndexWidth), with the sizes that indices
// are divided by as IntDivisors. Only for .cu files.
#ifndef MIRRORTRAIN_TENSOR_CUDA_IMAGE_WINDOW_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_IMAGE_WINDOW_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/image_window.h"
#include "tensor/int_divisor.h"

namespace mirrortrain::cuda {

template <typename I>
struct ImageWindowOn {
  explicit ImageWindowOn(const ImageWindow& g)
      : h(g.h),
        w(g.w),
        c(g.c),
        kw(g.kw),
        oh(g.oh),
        ow(g.ow),
        sh(g.sh),
        sw(g.sw),
        kh(g.kh),
        pt(g.pt),
        pl(g.pl),
        dh(g.dh),
        dw(g.dw) {}
  IntDivisor<I> h, w, c, kw, oh, ow, sh, sw;
  I kh, pt, pl, dh, dw;
};

// Element idx of an NHWC tensor [*, rows, cols, c] as (image, row, column,
// channel).
template <typename I>
struct NhwcIndex {
  I i, y, x, ch;
};
template <typename I>
__device__ inline NhwcIndex<I> SplitNhwc(I idx, const IntDivisor<I>& rows,
                                         const IntDivisor<I>& cols,
                                         const IntDivisor<I>& c) {
  NhwcIndex<I> at;
  I rest = c.Div(idx);
  at.ch = idx - rest * c.value();
  at.x = cols.Mod(rest);
  rest = cols.Div(rest);
  at.y = rows.Mod(rest);
  at.i = rows.Div(rest);
  return at;
}

// The largest row or column position the window arithmetic reaches
// (before the bounds checks), which the index width must hold as well as
// the buffers' sizes: a dilated window's span does not grow its buffers.
inline int64_t WindowReach(const ImageWindow& g) {
  return std::max(g.oh * g.sh + g.pt + (g.kh - 1) * g.dh + g.h,
                  g.ow * g.sw + g.pl + (g.kw - 1) * g.dw + g.w);
}

// The kernels' precondition on a window: InvalidArgument naming `what`
// unless its sizes, strides and dilations are >= 1 and its padding >= 0.
inline absl::Status CheckImageWindow(const char* what, const ImageWindow& g) {
  if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.pt < 0 || g.pl < 0 ||
      g.dh < 1 || g.dw < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": window sizes, strides and dilations must be >= 1 and "
                     "padding >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_IMAGE_WINDOW_CUH_
