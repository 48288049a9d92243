// ClipByValue and its gradient, elementwise; the scale of clipping by norm.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// std::min(std::max(v, lo), hi) spelled out, NaN handling included (a NaN
// passes through), which fmin/fmax would not do.
template <typename T>
__global__ void ClipByValueKernel(const T* x, T lo, T hi, T* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    const T v = x[i];
    const T at_least_lo = v < lo ? lo : v;
    y[i] = hi < at_least_lo ? hi : at_least_lo;
  }
}

// The gradient passes where lo <= x <= hi (not for NaN x).
template <typename T>
__global__ void ClipByValueGradKernel(const T* x, const T* g, T lo, T hi, T* dx,
                                      int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    dx[i] = (x[i] >= lo && x[i] <= hi) ? g[i] : T(0);
  }
}

// std::max(norm, clip) spelled out: a NaN norm stays NaN.
template <typename T>
__global__ void ClipScaleKernel(const double* squares, int64_t n, double clip,
                                bool nan_if_not_finite, T* scale,
                                double* norm) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += squares[i];
  const double g = sqrt(sum);
  *norm = g;
  const double s = nan_if_not_finite && !isfinite(g)
                       ? __longlong_as_double(0x7ff8000000000000LL)
                       : clip / (g < clip ? clip : g);
  *scale = static_cast<T>(s);
}

}  // namespace

absl::Status ClipScaleOnGpu(const double* squares, int64_t n, double clip,
                            bool nan_if_not_finite, DType dtype, void* scale,
                            double* norm, int device) {
  return LaunchFloatOn(
      "ClipScale", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        ClipScaleKernel<T><<<1, 1, 0, stream>>>(
            squares, n, clip, nan_if_not_finite, static_cast<T*>(scale), norm);
      });
}

absl::Status ClipByValueOnGpu(DType dtype, const void* x, double lo, double hi,
                              void* y, int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "ClipByValue", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        ClipByValueKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T>(lo), static_cast<T>(hi),
            static_cast<T*>(y), n);
      });
}

absl::Status ClipByValueGradOnGpu(DType dtype, const void* x, const void* g,
                                  double lo, double hi, void* dx, int64_t n,
                                  int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "ClipByValueGrad", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        ClipByValueGradKernel<T>
            <<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
                static_cast<const T*>(x), static_cast<const T*>(g),
                static_cast<T>(lo), static_cast<T>(hi), static_cast<T*>(dx), n);
      });
}

MT_DEFINE_CUDA_KERNEL(ClipByValue, ClipByValueOnGpu);
MT_DEFINE_CUDA_KERNEL(ClipByValueGrad, ClipByValueGradOnGpu);
MT_DEFINE_CUDA_KERNEL(ClipScale, ClipScaleOnGpu);

}  // namespace mirrortrain::cuda
