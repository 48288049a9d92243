// Depthwise convolution (ops::DepthwiseConv2D) as direct kernels, one
// thread per output value, input value or filter partial sum, with no
// atomics: every sum has one order, fixed by the shape.
//   - Forward: each output sums its taps in row-major window order, as the
//     CPU loop does.
//   - Input gradient: each input cell gathers from the outputs whose
//     windows cover it, in increasing output order (taps in reverse), the
//     order the CPU's scatter adds them in.
//   - Filter gradient: the n * oh * ow output pixels are cut into
//     DepthwiseFilterGradSegments segments; a thread sums one filter
//     value over one segment into a scratch row, and a second kernel adds
//     the rows in segment order.
// Written without a GPU at hand: simple indexing in int64, no tiling.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <typename T>
__global__ void DepthwiseForwardKernel(ImageWindow g, int64_t m, const T* x,
                                       const T* f, T* y) {
  const int64_t cm = g.c * m;
  const int64_t total = g.n * g.oh * g.ow * cm;
  for (int64_t o = GridStart(); o < total; o += GridStep()) {
    const int64_t k = o % cm;
    int64_t p = o / cm;
    const int64_t ox = p % g.ow;
    p /= g.ow;
    const int64_t oy = p % g.oh;
    const int64_t i = p / g.oh;
    const int64_t c = k / m;
    T sum = 0;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t iy = oy * g.sh - g.pt + kh * g.dh;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t ix = ox * g.sw - g.pl + kw * g.dw;
        if (ix < 0 || ix >= g.w) continue;
        sum += x[((i * g.h + iy) * g.w + ix) * g.c + c] *
               f[(kh * g.kw + kw) * cm + k];
      }
    }
    y[o] = sum;
  }
}

template <typename T>
__global__ void DepthwiseInputGradKernel(ImageWindow g, int64_t m, const T* dy,
                                         const T* f, T* dx) {
  const int64_t cm = g.c * m;
  const int64_t total = g.n * g.h * g.w * g.c;
  for (int64_t idx = GridStart(); idx < total; idx += GridStep()) {
    const int64_t c = idx % g.c;
    int64_t p = idx / g.c;
    const int64_t ix = p % g.w;
    p /= g.w;
    const int64_t iy = p % g.h;
    const int64_t i = p / g.h;
    T sum = 0;
    // Output row oy uses tap kh where kh * dh = iy + pt - oy * sh: rows in
    // increasing order are taps in decreasing order.
    for (int64_t kh = g.kh - 1; kh >= 0; --kh) {
      const int64_t ry = iy + g.pt - kh * g.dh;
      if (ry < 0 || ry % g.sh != 0 || ry / g.sh >= g.oh) continue;
      const int64_t oy = ry / g.sh;
      for (int64_t kw = g.kw - 1; kw >= 0; --kw) {
        const int64_t rx = ix + g.pl - kw * g.dw;
        if (rx < 0 || rx % g.sw != 0 || rx / g.sw >= g.ow) continue;
        const int64_t ox = rx / g.sw;
        const T* grad = dy + ((i * g.oh + oy) * g.ow + ox) * cm + c * m;
        const T* tap = f + (kh * g.kw + kw) * cm + c * m;
        T s = 0;
        for (int64_t j = 0; j < m; ++j) s += grad[j] * tap[j];
        sum += s;
      }
    }
    dx[idx] = sum;
  }
}

// partial[s][j], j = (kh * kw_size + kw) * cm + k: filter value j summed
// over the output pixels of segment s, in increasing order.
template <typename T>
__global__ void DepthwiseFilterPartialKernel(ImageWindow g, int64_t m,
                                             int64_t segments, const T* x,
                                             const T* dy, T* partial) {
  const int64_t cm = g.c * m;
  const int64_t per_segment = g.kh * g.kw * cm;
  const int64_t pixels = g.n * g.oh * g.ow;
  const int64_t total = segments * per_segment;
  for (int64_t t = GridStart(); t < total; t += GridStep()) {
    const int64_t s = t / per_segment;
    const int64_t j = t % per_segment;
    const int64_t k = j % cm;
    const int64_t tap = j / cm;
    const int64_t kw = tap % g.kw;
    const int64_t kh = tap / g.kw;
    const int64_t c = k / m;
    const int64_t begin = pixels * s / segments;
    const int64_t end = pixels * (s + 1) / segments;
    T sum = 0;
    for (int64_t p = begin; p < end; ++p) {
      const int64_t ox = p % g.ow;
      const int64_t rest = p / g.ow;
      const int64_t oy = rest % g.oh;
      const int64_t i = rest / g.oh;
      const int64_t iy = oy * g.sh - g.pt + kh * g.dh;
      const int64_t ix = ox * g.sw - g.pl + kw * g.dw;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
      sum += x[((i * g.h + iy) * g.w + ix) * g.c + c] * dy[p * cm + k];
    }
    partial[t] = sum;
  }
}

template <typename T>
__global__ void SumSegmentsKernel(const T* partial, int64_t segments, int64_t n,
                                  T* out) {
  for (int64_t j = GridStart(); j < n; j += GridStep()) {
    T sum = 0;
    for (int64_t s = 0; s < segments; ++s) sum += partial[s * n + j];
    out[j] = sum;
  }
}

absl::Status CheckGeometry(const char* what, const DepthwiseGeometry& geo) {
  MT_RETURN_IF_ERROR(CheckImageWindow(what, geo.window));
  if (geo.m < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the multiplier must be >= 1"));
  }
  return absl::OkStatus();
}

absl::Status DepthwiseForwardOnGpu(DType dtype, const void* x,
                                   const void* filter,
                                   const DepthwiseGeometry& geo, void* y,
                                   int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("DepthwiseConv2DForward", geo));
  const ImageWindow& g = geo.window;
  const int64_t total = g.n * g.oh * g.ow * g.c * geo.m;
  if (total == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "DepthwiseConv2DForward", dtype, device,
      [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DepthwiseForwardKernel<T>
            <<<LaunchBlocks(total), kLaunchThreads, 0, stream>>>(
                g, geo.m, static_cast<const T*>(x),
                static_cast<const T*>(filter), static_cast<T*>(y));
      });
}

absl::Status DepthwiseInputGradOnGpu(DType dtype, const void* dy,
                                     const void* filter,
                                     const DepthwiseGeometry& geo, void* dx,
                                     int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("DepthwiseConv2DInputGrad", geo));
  const ImageWindow& g = geo.window;
  const int64_t total = g.n * g.h * g.w * g.c;
  if (total == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "DepthwiseConv2DInputGrad", dtype, device,
      [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DepthwiseInputGradKernel<T>
            <<<LaunchBlocks(total), kLaunchThreads, 0, stream>>>(
                g, geo.m, static_cast<const T*>(dy),
                static_cast<const T*>(filter), static_cast<T*>(dx));
      });
}

absl::Status DepthwiseFilterGradOnGpu(DType dtype, const void* x,
                                      const void* dy,
                                      const DepthwiseGeometry& geo,
                                      void* partial, void* dw, int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("DepthwiseConv2DFilterGrad", geo));
  const ImageWindow& g = geo.window;
  const int64_t n = g.kh * g.kw * g.c * geo.m;
  if (n == 0) return absl::OkStatus();
  const int64_t segments = DepthwiseFilterGradSegments(geo);
  return LaunchFloatOn(
      "DepthwiseConv2DFilterGrad", dtype, device,
      [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DepthwiseFilterPartialKernel<T>
            <<<LaunchBlocks(segments * n), kLaunchThreads, 0, stream>>>(
                g, geo.m, segments, static_cast<const T*>(x),
                static_cast<const T*>(dy), static_cast<T*>(partial));
        SumSegmentsKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(partial), segments, n, static_cast<T*>(dw));
      });
}

}  // namespace

MT_DEFINE_CUDA_KERNEL(DepthwiseConv2DForward, DepthwiseForwardOnGpu);
MT_DEFINE_CUDA_KERNEL(DepthwiseConv2DInputGrad, DepthwiseInputGradOnGpu);
MT_DEFINE_CUDA_KERNEL(DepthwiseConv2DFilterGrad, DepthwiseFilterGradOnGpu);

}  // namespace mirrortrain::cuda
