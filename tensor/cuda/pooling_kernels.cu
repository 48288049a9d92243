// MaxPool2D over NHWC images. Forward: one thread per output, walking its
// window in row-major order with the CPU rule (the first maximum wins; a
// NaN beats every number and the first NaN stays), recording the winner's
// offset within its image. Backward: one thread per input cell, gathering
// dy from the windows whose recorded winner it is. No atomics: the result
// is deterministic and adds the same terms in the same order as the CPU
// scatter, so CPU and GPU gradients agree bit for bit.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

__host__ __device__ inline int64_t Min(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__host__ __device__ inline int64_t Max(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// Output o of [n, out_h, out_w, c]: its maximum into y[o] and, when argmax
// is non-null, the winner's offset within the image into argmax[o].
template <typename T>
__host__ __device__ void MaxPoolAt(const Pool2DGeometry& g, const T* x,
                                   int64_t o, T* y, int32_t* argmax) {
  const int64_t ch = o % g.c;
  int64_t rest = o / g.c;
  const int64_t ox = rest % g.out_w;
  rest /= g.out_w;
  const int64_t oy = rest % g.out_h;
  const int64_t i = rest / g.out_h;
  const int64_t top = oy * g.stride_h - g.pad_top;
  const int64_t left = ox * g.stride_w - g.pad_left;
  const int64_t y0 = Max(top, 0), y1 = Min(top + g.ksize_h, g.h);
  const int64_t x0 = Max(left, 0), x1 = Min(left + g.ksize_w, g.w);
  const T* img = x + i * g.h * g.w * g.c;
  // Windows always hold at least one real cell: start from the first.
  const int64_t first = (y0 * g.w + x0) * g.c + ch;
  T best = img[first];
  int64_t arg = first;
  for (int64_t yy = y0; yy < y1; ++yy) {
    for (int64_t xx = x0; xx < x1; ++xx) {
      const int64_t off = (yy * g.w + xx) * g.c + ch;
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
template <typename T>
__host__ __device__ T MaxPoolGradAt(const Pool2DGeometry& g,
                                    const int32_t* argmax, const T* dy,
                                    int64_t idx) {
  const int64_t ch = idx % g.c;
  int64_t rest = idx / g.c;
  const int64_t xx = rest % g.w;
  rest /= g.w;
  const int64_t yy = rest % g.h;
  const int64_t i = rest / g.h;
  const int64_t cell = (yy * g.w + xx) * g.c + ch;
  // Window oy covers rows [oy * stride - pad, + ksize). The ranges below
  // may include a window or two that does not cover the cell; the argmax
  // comparison rejects those, as their winners lie elsewhere.
  const int64_t ry = yy + g.pad_top, rx = xx + g.pad_left;
  const int64_t oy0 = ry >= g.ksize_h ? (ry - g.ksize_h) / g.stride_h : 0;
  const int64_t oy1 = Min(ry / g.stride_h, g.out_h - 1);
  const int64_t ox0 = rx >= g.ksize_w ? (rx - g.ksize_w) / g.stride_w : 0;
  const int64_t ox1 = Min(rx / g.stride_w, g.out_w - 1);
  T acc = T(0);
  for (int64_t oy = oy0; oy <= oy1; ++oy) {
    for (int64_t ox = ox0; ox <= ox1; ++ox) {
      const int64_t o = ((i * g.out_h + oy) * g.out_w + ox) * g.c + ch;
      if (argmax[o] == cell) acc += dy[o];
    }
  }
  return acc;
}

template <typename T>
__global__ void MaxPoolForwardKernel(Pool2DGeometry g, const T* x, T* y,
                                     int32_t* argmax, int64_t outputs) {
  for (int64_t o = GridStart(); o < outputs; o += GridStep()) {
    MaxPoolAt(g, x, o, y, argmax);
  }
}

template <typename T>
__global__ void MaxPoolBackwardKernel(Pool2DGeometry g, const int32_t* argmax,
                                      const T* dy, T* dx, int64_t inputs) {
  for (int64_t idx = GridStart(); idx < inputs; idx += GridStep()) {
    dx[idx] = MaxPoolGradAt(g, argmax, dy, idx);
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

}  // namespace

absl::Status MaxPool2DForward(DType dtype, const void* x,
                              const Pool2DGeometry& g, void* y, int32_t* argmax,
                              int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("MaxPool2DForward", g));
  const int64_t outputs = g.n * g.out_h * g.out_w * g.c;
  if (outputs == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "MaxPool2DForward", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        MaxPoolForwardKernel<T>
            <<<LaunchBlocks(outputs), kLaunchThreads, 0, stream>>>(
                g, static_cast<const T*>(x), static_cast<T*>(y), argmax,
                outputs);
      });
}

absl::Status MaxPool2DBackward(DType dtype, const int32_t* argmax,
                               const void* dy, const Pool2DGeometry& g,
                               void* dx, int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("MaxPool2DBackward", g));
  const int64_t inputs = g.n * g.h * g.w * g.c;
  if (inputs == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "MaxPool2DBackward", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        MaxPoolBackwardKernel<T>
            <<<LaunchBlocks(inputs), kLaunchThreads, 0, stream>>>(
                g, argmax, static_cast<const T*>(dy), static_cast<T*>(dx),
                inputs);
      });
}

}  // namespace mirrortrain::cuda
