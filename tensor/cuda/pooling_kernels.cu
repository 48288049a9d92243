// MaxPool2D and AvgPool2D over NHWC images. Forward: one thread per output,
// walking its window in row-major order with the CPU rule (the first maximum
// wins; a NaN beats every number and the first NaN stays), recording the
// winner's offset within its image. Backward: one thread per input cell,
// gathering dy from the windows whose recorded winner it is. No atomics: the
// result is deterministic and adds the same terms in the same order as the CPU
// scatter, so CPU and GPU gradients agree bit for bit.
#include <cuda_runtime.h>

#include <algorithm>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/int_divisor.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Pool2DGeometry in index type I (see DispatchIndexWidth), with the sizes
// that indices are divided by as IntDivisors.
template <typename I>
struct Geometry {
  explicit Geometry(const Pool2DGeometry& g)
      : h(g.h),
        w(g.w),
        c(g.c),
        out_h(g.out_h),
        out_w(g.out_w),
        stride_h(g.stride_h),
        stride_w(g.stride_w),
        ksize_h(g.ksize_h),
        ksize_w(g.ksize_w),
        pad_top(g.pad_top),
        pad_left(g.pad_left) {}
  IntDivisor<I> h, w, c, out_h, out_w, stride_h, stride_w;
  I ksize_h, ksize_w, pad_top, pad_left;
};

template <typename I>
__device__ inline I Min(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
__device__ inline I Max(I a, I b) {
  return a > b ? a : b;
}

// The window of output (oy, ox): rows [y0, y1), columns [x0, x1).
template <typename I>
struct Window {
  I y0, y1, x0, x1;
  __device__ I cells() const { return (y1 - y0) * (x1 - x0); }
};
template <typename I>
__device__ Window<I> WindowOf(const Geometry<I>& g, I oy, I ox) {
  const I top = oy * g.stride_h.value() - g.pad_top;
  const I left = ox * g.stride_w.value() - g.pad_left;
  return {Max<I>(top, 0), Min<I>(top + g.ksize_h, g.h.value()), Max<I>(left, 0),
          Min<I>(left + g.ksize_w, g.w.value())};
}

// Output o of [n, out_h, out_w, c] as (image, row, column, channel).
template <typename I>
struct OutputCell {
  I i, oy, ox, ch;
};
template <typename I>
__device__ OutputCell<I> OutputOf(const Geometry<I>& g, I o) {
  OutputCell<I> out;
  I rest = g.c.Div(o);
  out.ch = o - rest * g.c.value();
  out.ox = g.out_w.Mod(rest);
  rest = g.out_w.Div(rest);
  out.oy = g.out_h.Mod(rest);
  out.i = g.out_h.Div(rest);
  return out;
}

// Input cell idx of [n, h, w, c] and the outputs whose windows may cover
// it: rows [oy0, oy1] and columns [ox0, ox1] of image i (window oy covers
// rows [oy * stride - pad, + ksize); the ranges may include a window or two
// that misses the cell, which callers reject).
template <typename I>
struct InputCell {
  I i, yy, xx, ch;
  I oy0, oy1, ox0, ox1;
};
template <typename I>
__device__ InputCell<I> CellOf(const Geometry<I>& g, I idx) {
  InputCell<I> cell;
  I rest = g.c.Div(idx);
  cell.ch = idx - rest * g.c.value();
  cell.xx = g.w.Mod(rest);
  rest = g.w.Div(rest);
  cell.yy = g.h.Mod(rest);
  cell.i = g.h.Div(rest);
  const I ry = cell.yy + g.pad_top, rx = cell.xx + g.pad_left;
  cell.oy0 = ry >= g.ksize_h ? g.stride_h.Div(ry - g.ksize_h) : 0;
  cell.oy1 = Min<I>(g.stride_h.Div(ry), g.out_h.value() - 1);
  cell.ox0 = rx >= g.ksize_w ? g.stride_w.Div(rx - g.ksize_w) : 0;
  cell.ox1 = Min<I>(g.stride_w.Div(rx), g.out_w.value() - 1);
  return cell;
}

// Output o of [n, out_h, out_w, c]: its maximum into y[o] and, when argmax
// is non-null, the winner's offset within the image into argmax[o].
template <typename T, typename I>
__device__ void MaxPoolAt(const Geometry<I>& g, const T* x, I o, T* y,
                          int32_t* argmax) {
  const I h = g.h.value(), w = g.w.value(), c = g.c.value();
  const OutputCell<I> at = OutputOf(g, o);
  const I ch = at.ch;
  const Window<I> win = WindowOf(g, at.oy, at.ox);
  const T* img = x + at.i * h * w * c;
  // Windows always hold at least one real cell: start from the first.
  const I first = (win.y0 * w + win.x0) * c + ch;
  T best = img[first];
  I arg = first;
  for (I yy = win.y0; yy < win.y1; ++yy) {
    for (I xx = win.x0; xx < win.x1; ++xx) {
      const I off = (yy * w + xx) * c + ch;
      if (off == first) continue;
      const T v = img[off];
      if (v > best || (v != v && best == best)) {
        best = v;
        arg = off;
      }
    }
  }
  y[o] = best;
  if (argmax != nullptr) argmax[o] = static_cast<int32_t>(arg);
}

// dx at input cell idx of [n, h, w, c]: the sum of dy over the outputs
// that recorded this cell as winner, in increasing output order.
template <typename T, typename I>
__device__ T MaxPoolGradAt(const Geometry<I>& g, const int32_t* argmax,
                           const T* dy, I idx) {
  const I c = g.c.value(), out_h = g.out_h.value(), out_w = g.out_w.value();
  const InputCell<I> at = CellOf(g, idx);
  // A window that misses the cell has its winner elsewhere: the argmax
  // comparison rejects it.
  const I cell = (at.yy * g.w.value() + at.xx) * c + at.ch;
  T acc = T(0);
  for (I oy = at.oy0; oy <= at.oy1; ++oy) {
    for (I ox = at.ox0; ox <= at.ox1; ++ox) {
      const I o = ((at.i * out_h + oy) * out_w + ox) * c + at.ch;
      if (argmax[o] == cell) acc += dy[o];
    }
  }
  return acc;
}

template <typename T, typename I>
__global__ void MaxPoolForwardKernel(Geometry<I> g, const T* x, T* y,
                                     int32_t* argmax, I outputs) {
  for (I o = GridStart<I>(); o < outputs; o += GridStep<I>()) {
    MaxPoolAt(g, x, o, y, argmax);
  }
}

template <typename T, typename I>
__global__ void MaxPoolBackwardKernel(Geometry<I> g, const int32_t* argmax,
                                      const T* dy, T* dx, I inputs) {
  for (I idx = GridStart<I>(); idx < inputs; idx += GridStep<I>()) {
    dx[idx] = MaxPoolGradAt(g, argmax, dy, idx);
  }
}

template <typename T, typename I>
__global__ void AvgPoolForwardKernel(Geometry<I> g, const T* x, T* y,
                                     I outputs) {
  const I h = g.h.value(), w = g.w.value(), c = g.c.value();
  for (I o = GridStart<I>(); o < outputs; o += GridStep<I>()) {
    const OutputCell<I> at = OutputOf(g, o);
    const I ch = at.ch;
    const Window<I> win = WindowOf(g, at.oy, at.ox);
    const T* img = x + at.i * h * w * c;
    T sum = T(0);
    for (I yy = win.y0; yy < win.y1; ++yy) {
      for (I xx = win.x0; xx < win.x1; ++xx) sum += img[(yy * w + xx) * c + ch];
    }
    y[o] = sum / static_cast<T>(win.cells());
  }
}

template <typename T, typename I>
__global__ void AvgPoolBackwardKernel(Geometry<I> g, const T* dy, T* dx,
                                      I inputs) {
  const I c = g.c.value(), out_h = g.out_h.value(), out_w = g.out_w.value();
  for (I idx = GridStart<I>(); idx < inputs; idx += GridStep<I>()) {
    const InputCell<I> at = CellOf(g, idx);
    T acc = T(0);
    for (I oy = at.oy0; oy <= at.oy1; ++oy) {
      for (I ox = at.ox0; ox <= at.ox1; ++ox) {
        const Window<I> win = WindowOf(g, oy, ox);
        if (at.yy < win.y0 || at.yy >= win.y1 || at.xx < win.x0 ||
            at.xx >= win.x1) {
          continue;
        }
        const I o = ((at.i * out_h + oy) * out_w + ox) * c + at.ch;
        acc += dy[o] / static_cast<T>(win.cells());
      }
    }
    dx[idx] = acc;
  }
}

absl::Status CheckGeometry(const char* what, const Pool2DGeometry& g) {
  if (g.ksize_h < 1 || g.ksize_w < 1 || g.stride_h < 1 || g.stride_w < 1 ||
      g.pad_top < 0 || g.pad_left < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": window sizes and strides must be >= 1 and "
                     "padding >= 0"));
  }
  return absl::OkStatus();
}

// Which elements a kernel's threads walk.
enum class Over { kOutputs, kInputs };

// Checks `g`, then calls launch(T{}, Geometry<I>, count, blocks, stream)
// with T the dtype's type, I an index type wide enough for the input and
// the output, and `count` the elements walked; nothing when there are none.
template <typename F>
absl::Status LaunchPool(const char* what, DType dtype, const Pool2DGeometry& g,
                        Over over, int device, F launch) {
  MT_RETURN_IF_ERROR(CheckGeometry(what, g));
  const int64_t inputs = g.n * g.h * g.w * g.c;
  const int64_t outputs = g.n * g.out_h * g.out_w * g.c;
  const int64_t count = over == Over::kOutputs ? outputs : inputs;
  if (count == 0) return absl::OkStatus();
  return LaunchFloatIndexWidthOn(
      what, dtype, device, std::max(inputs, outputs),
      [&](auto zero, auto index, cudaStream_t stream) {
        using I = decltype(index);
        launch(zero, Geometry<I>(g), static_cast<I>(count), LaunchBlocks(count),
               stream);
      });
}

}  // namespace

absl::Status MaxPool2DForwardOnGpu(DType dtype, const void* x,
                                   const Pool2DGeometry& g, void* y,
                                   int32_t* argmax, int device) {
  return LaunchPool(
      "MaxPool2DForward", dtype, g, Over::kOutputs, device,
      [&](auto zero, auto geo, auto count, auto blocks, cudaStream_t stream) {
        using T = decltype(zero);
        MaxPoolForwardKernel<<<blocks, kLaunchThreads, 0, stream>>>(
            geo, static_cast<const T*>(x), static_cast<T*>(y), argmax, count);
      });
}

absl::Status MaxPool2DBackwardOnGpu(DType dtype, const int32_t* argmax,
                                    const void* dy, const Pool2DGeometry& g,
                                    void* dx, int device) {
  return LaunchPool(
      "MaxPool2DBackward", dtype, g, Over::kInputs, device,
      [&](auto zero, auto geo, auto count, auto blocks, cudaStream_t stream) {
        using T = decltype(zero);
        MaxPoolBackwardKernel<<<blocks, kLaunchThreads, 0, stream>>>(
            geo, argmax, static_cast<const T*>(dy), static_cast<T*>(dx), count);
      });
}

absl::Status AvgPool2DForwardOnGpu(DType dtype, const void* x,
                                   const Pool2DGeometry& g, void* y,
                                   int device) {
  return LaunchPool(
      "AvgPool2DForward", dtype, g, Over::kOutputs, device,
      [&](auto zero, auto geo, auto count, auto blocks, cudaStream_t stream) {
        using T = decltype(zero);
        AvgPoolForwardKernel<<<blocks, kLaunchThreads, 0, stream>>>(
            geo, static_cast<const T*>(x), static_cast<T*>(y), count);
      });
}

absl::Status AvgPool2DBackwardOnGpu(DType dtype, const void* dy,
                                    const Pool2DGeometry& g, void* dx,
                                    int device) {
  return LaunchPool(
      "AvgPool2DBackward", dtype, g, Over::kInputs, device,
      [&](auto zero, auto geo, auto count, auto blocks, cudaStream_t stream) {
        using T = decltype(zero);
        AvgPoolBackwardKernel<<<blocks, kLaunchThreads, 0, stream>>>(
            geo, static_cast<const T*>(dy), static_cast<T*>(dx), count);
      });
}

MT_DEFINE_CUDA_KERNEL(MaxPool2DForward, MaxPool2DForwardOnGpu);
MT_DEFINE_CUDA_KERNEL(MaxPool2DBackward, MaxPool2DBackwardOnGpu);
MT_DEFINE_CUDA_KERNEL(AvgPool2DForward, AvgPool2DForwardOnGpu);
MT_DEFINE_CUDA_KERNEL(AvgPool2DBackward, AvgPool2DBackwardOnGpu);

}  // namespace mirrortrain::cuda
