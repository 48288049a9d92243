// Per-channel kernels of batch normalization: an affine map per channel
// (the normalisation itself, and the input gradients) and the per-channel
// sums it needs (statistics, and the gradients of mean and variance). The
// sums are column sums (column_sum.cuh): deterministic, in double.
// Per-row kernels of layer normalization: one block per row, sums in double
// over a fixed tree (deterministic).
#include <cuda_runtime.h>

#include "tensor/cuda/column_sum.cuh"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <typename T, typename I>
__global__ void ChannelAffineKernel(const T* x, const T* a, const T* b, T* y,
                                    I cols, I n) {
  for (I i = GridStart(); i < n; i += GridStep()) {
    const I c = i % cols;
    y[i] = b == nullptr ? x[i] * a[c] : x[i] * a[c] + b[c];
  }
}

// w[i] * (x[i] - shift[c]), the element of the second sum, computed in
// Acc (T, or double for the statistics' sums).
template <typename T, typename Acc>
struct LoadShiftedProduct {
  const T* x;
  const T* w;
  const T* shift;
  int64_t cols;
  __device__ Acc operator()(int64_t i) const {
    const Acc xs = shift == nullptr ? Acc{x[i]} : Acc{x[i]} - shift[i % cols];
    return Acc{w[i]} * xs;
  }
};

template <typename T>
__global__ void MomentsFromSumsKernel(const double* sum, const double* sum_sq,
                                      double inv_n, T* mean, T* variance,
                                      int64_t cols) {
  for (int64_t c = GridStart(); c < cols; c += GridStep()) {
    const double m = sum[c] * inv_n;
    mean[c] = static_cast<T>(m);
    // As the CPU's std::max(v, 0.0): a NaN stays NaN (fmax would make it 0).
    const double v = sum_sq[c] * inv_n - m * m;
    variance[c] = static_cast<T>(v < 0.0 ? 0.0 : v);
  }
}

template <typename T>
__global__ void MomentsFromSumsGradKernel(const double* sum,
                                          const double* sum_sq, double inv_n,
                                          const T* g_mean, const T* g_var,
                                          double* g_sum, double* g_sq,
                                          int64_t cols) {
  for (int64_t c = GridStart(); c < cols; c += GridStep()) {
    const double m = sum[c] * inv_n;
    const double gv =
        sum_sq[c] * inv_n - m * m > 0 ? static_cast<double>(g_var[c]) : 0.0;
    g_sq[c] = gv * inv_n;
    g_sum[c] = (static_cast<double>(g_mean[c]) - 2 * m * gv) * inv_n;
  }
}

// The block's sums of (a, b) over a fixed-shape tree, returned to every
// thread; `partial` is 2 * kLaunchThreads doubles of shared memory, free
// again on return. Requires blockDim.x == kLaunchThreads (a power of two).
__device__ double2 BlockSum2(double a, double b, double* partial) {
  partial[threadIdx.x] = a;
  partial[kLaunchThreads + threadIdx.x] = b;
  __syncthreads();
  for (unsigned half = kLaunchThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] += partial[threadIdx.x + half];
      partial[kLaunchThreads + threadIdx.x] +=
          partial[kLaunchThreads + threadIdx.x + half];
    }
    __syncthreads();
  }
  const double2 sums = make_double2(partial[0], partial[kLaunchThreads]);
  __syncthreads();  // Every thread has read before `partial` is reused.
  return sums;
}

template <typename T>
__global__ void LayerNormForwardKernel(const T* x, const T* gamma,
                                       const T* beta, double epsilon, T* y,
                                       T* mean, T* rstd, int64_t rows,
                                       int64_t cols) {
  __shared__ double partial[2 * kLaunchThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    double s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    const double m = BlockSum2(s, 0, partial).x / cols;
    double v = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = xr[c] - m;
      v += d * d;
    }
    // Correctly rounded, as the CPU's 1 / sqrt (double rsqrt is not).
    const double inv = 1.0 / sqrt(BlockSum2(v, 0, partial).x / cols + epsilon);
    T* yr = y + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = static_cast<T>((xr[c] - m) * inv * gamma[c] + beta[c]);
    }
    if (threadIdx.x == 0) {
      mean[r] = static_cast<T>(m);
      rstd[r] = static_cast<T>(inv);
    }
  }
}

template <typename T>
__global__ void LayerNormBackwardKernel(const T* x, const T* gamma, const T* dy,
                                        const T* mean, const T* rstd, T* dx,
                                        T* xhat, int64_t rows, int64_t cols) {
  __shared__ double partial[2 * kLaunchThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const double m = mean[r], inv = rstd[r];
    double s1 = 0, s2 = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double gg = static_cast<double>(gr[c]) * gamma[c];
      s1 += gg;
      s2 += gg * ((xr[c] - m) * inv);
    }
    const double2 sums = BlockSum2(s1, s2, partial);
    const double mean_gg = sums.x / cols, mean_ggx = sums.y / cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double xh = (xr[c] - m) * inv;
      const double gg = static_cast<double>(gr[c]) * gamma[c];
      dx[r * cols + c] = static_cast<T>(inv * (gg - mean_gg - xh * mean_ggx));
      if (xhat != nullptr) xhat[r * cols + c] = static_cast<T>(xh);
    }
  }
}

// Launches kernel_of(T{}) with one block per row of [rows, cols] and
// arguments (args..., rows, cols); nothing when the matrix is empty.
template <typename KernelOf, typename... A>
absl::Status LaunchPerRow(const char* what, DType dtype, int device,
                          int64_t rows, int64_t cols, KernelOf kernel_of,
                          A... args) {
  if (rows == 0 || cols == 0) return absl::OkStatus();
  return LaunchFloatOn(
      what, dtype, device,
      KernelLaunch(GridBlocks(rows), kernel_of, args..., rows, cols));
}

}  // namespace

absl::Status ChannelAffineOnGpu(DType dtype, const void* x, const void* a,
                                const void* b, void* y, int64_t rows,
                                int64_t cols, int device) {
  const int64_t n = rows * cols;
  if (n == 0) return absl::OkStatus();
  return LaunchFloatIndexWidthOn(
      "ChannelAffine", dtype, device, n,
      KernelLaunch(
          LaunchBlocks(n),
          [](auto t, auto i) {
            return ChannelAffineKernel<decltype(t), decltype(i)>;
          },
          x, a, b, y, cols, n));
}

absl::Status ChannelSumsOnGpu(DType dtype, const void* x, const void* w,
                              const void* shift, int64_t rows, int64_t cols,
                              void* sum, void* dot, bool double_sums,
                              int device) {
  if (cols == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  absl::Status status;
  MT_RETURN_IF_ERROR(DispatchFloat("ChannelSums", dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* pw = static_cast<const T*>(w);
    const auto run = [&](auto acc) {
      using Acc = decltype(acc);
      status.Update(column_sum::Run(column_sum::LoadPlain<T>{pw}, rows, cols,
                                    static_cast<Acc*>(sum), device));
      if (!status.ok()) return;
      status.Update(column_sum::Run(
          LoadShiftedProduct<T, Acc>{static_cast<const T*>(x), pw,
                                     static_cast<const T*>(shift), cols},
          rows, cols, static_cast<Acc*>(dot), device));
    };
    if (double_sums) {
      run(double{});
    } else {
      run(T{});
    }
  }));
  return status;
}

absl::Status MomentsFromSumsOnGpu(DType dtype, const void* sum,
                                  const void* sum_sq, double inv_n, void* mean,
                                  void* variance, int64_t cols, int device) {
  if (cols == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "MomentsFromSums", dtype, device,
      KernelLaunch(
          LaunchBlocks(cols),
          [](auto t) { return MomentsFromSumsKernel<decltype(t)>; }, sum,
          sum_sq, inv_n, mean, variance, cols));
}

absl::Status MomentsFromSumsGradOnGpu(DType dtype, const void* sum,
                                      const void* sum_sq, double inv_n,
                                      const void* g_mean, const void* g_var,
                                      void* g_sum, void* g_sq, int64_t cols,
                                      int device) {
  if (cols == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "MomentsFromSumsGrad", dtype, device,
      KernelLaunch(
          LaunchBlocks(cols),
          [](auto t) { return MomentsFromSumsGradKernel<decltype(t)>; }, sum,
          sum_sq, inv_n, g_mean, g_var, g_sum, g_sq, cols));
}

absl::Status LayerNormForwardOnGpu(DType dtype, const void* x,
                                   const void* gamma, const void* beta, void* y,
                                   void* mean, void* rstd, int64_t rows,
                                   int64_t cols, double epsilon, int device) {
  return LaunchPerRow(
      "LayerNormForward", dtype, device, rows, cols,
      [](auto t) { return LayerNormForwardKernel<decltype(t)>; }, x, gamma,
      beta, epsilon, y, mean, rstd);
}

absl::Status LayerNormBackwardOnGpu(DType dtype, const void* x,
                                    const void* gamma, const void* dy,
                                    const void* mean, const void* rstd,
                                    void* dx, void* xhat, int64_t rows,
                                    int64_t cols, int device) {
  return LaunchPerRow(
      "LayerNormBackward", dtype, device, rows, cols,
      [](auto t) { return LayerNormBackwardKernel<decltype(t)>; }, x, gamma, dy,
      mean, rstd, dx, xhat);
}

MT_DEFINE_CUDA_KERNEL(ChannelAffine, ChannelAffineOnGpu);
MT_DEFINE_CUDA_KERNEL(ChannelSums, ChannelSumsOnGpu);
MT_DEFINE_CUDA_KERNEL(MomentsFromSums, MomentsFromSumsOnGpu);
MT_DEFINE_CUDA_KERNEL(MomentsFromSumsGrad, MomentsFromSumsGradOnGpu);
MT_DEFINE_CUDA_KERNEL(LayerNormForward, LayerNormForwardOnGpu);
MT_DEFINE_CUDA_KERNEL(LayerNormBackward, LayerNormBackwardOnGpu);

}  // namespace mirrortrain::cuda
