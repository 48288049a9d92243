// Kernels of the nn ops: BiasAdd and its bias gradient (a deterministic
// column sum), Softmax/LogSoftmax, the fused sparse softmax cross-entropy
// and Dropout. Row-wise ops run one warp per row, reducing with a fixed
// butterfly (every lane ends with the same bits, every run the same
// result). Formulas are the CPU's (ops/nn_ops.cc), term for term.
#include <cuda_runtime.h>

#include <cmath>

#include "tensor/cuda/column_sum.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/dropout_mask.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kLaunchThreads / kWarp;

__device__ inline float Exp(float x) { return expf(x); }
__device__ inline double Exp(double x) { return exp(x); }
__device__ inline float Log(float x) { return logf(x); }
__device__ inline double Log(double x) { return log(x); }
template <typename T>
__device__ inline T Nan() {
  return T(NAN);
}
// Products that the compiler must not fuse into a following add/subtract:
// the CPU rounds the product first.
__device__ inline float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double MulRn(double a, double b) { return __dmul_rn(a, b); }

// Blocks for warp-per-row kernels over `rows` rows.
int RowBlocks(int64_t rows) {
  return GridBlocks((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// The maximum over the warp, ignoring NaNs as the CPU's std::max(mx, v)
// does (a NaN never replaces the running maximum).
template <typename T>
__device__ T WarpMax(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = v < other ? other : v;
  }
  return v;
}

__device__ double WarpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Row r's maximum and sum of exp(x - max) (the sum rounded to T, as the
// CPU accumulates in T). Called by all 32 lanes of a warp.
template <typename T>
__device__ void RowMaxAndSum(const T* xr, int64_t cols, int lane, T* mx,
                             T* sum) {
  T m = -INFINITY;
  for (int64_t c = lane; c < cols; c += kWarp) m = m < xr[c] ? xr[c] : m;
  m = WarpMax(m);
  double s = 0;
  for (int64_t c = lane; c < cols; c += kWarp) s += Exp(xr[c] - m);
  *mx = m;
  *sum = static_cast<T>(WarpSum(s));
}

template <typename T>
__global__ void BiasAddKernel(const T* x, const T* bias, T* y, int64_t cols,
                              int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    y[i] = x[i] + bias[i % cols];
  }
}

template <typename T>
__global__ void SoftmaxKernel(const T* x, T* y, int64_t rows, int64_t cols,
                              bool log) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
       r < rows; r += int64_t{gridDim.x} * kRowsPerBlock) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T mx, sum;
    RowMaxAndSum(xr, cols, lane, &mx, &sum);
    if (log) {
      const T log_sum = Log(sum);  // (x - max) - log(sum), as the CPU's.
      for (int64_t c = lane; c < cols; c += kWarp) {
        yr[c] = (xr[c] - mx) - log_sum;
      }
    } else {
      const T inv = T(1) / sum;
      for (int64_t c = lane; c < cols; c += kWarp) {
        yr[c] = Exp(xr[c] - mx) * inv;
      }
    }
  }
}

template <typename T, typename L>
__global__ void XentKernel(const T* x, const L* labels, int64_t rows,
                           int64_t cols, T* loss, T* softmax) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
       r < rows; r += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    T* sr = softmax + r * cols;
    if (label < 0 || label >= cols) {
      // TensorFlow's GPU kernel: NaN loss, and a NaN softmax row so that
      // the gradient row is NaN too. Warp-uniform: every lane read the label.
      const T nan = Nan<T>();
      for (int64_t c = lane; c < cols; c += kWarp) sr[c] = nan;
      if (lane == 0) loss[r] = nan;
      continue;
    }
    const T* xr = x + r * cols;
    T mx, sum;
    RowMaxAndSum(xr, cols, lane, &mx, &sum);
    const T inv = T(1) / sum;
    for (int64_t c = lane; c < cols; c += kWarp) sr[c] = Exp(xr[c] - mx) * inv;
    if (lane == 0) loss[r] = Log(sum) - (xr[label] - mx);
  }
}

// d[r, c] = g[r] * s[r, c], minus g[r] at the label: the CPU's two
// roundings (the product is not fused into the subtraction).
template <typename T, typename L>
__global__ void XentGradKernel(const T* softmax, const L* labels, const T* g,
                               T* d, int64_t cols, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    const int64_t r = i / cols, c = i % cols;
    const T v = MulRn(g[r], softmax[i]);
    d[i] = c == static_cast<int64_t>(labels[r]) ? v - g[r] : v;
  }
}

template <typename T>
__global__ void DropoutKernel(const T* x, double rate, T keep_scale,
                              const int64_t* step_seed, uint64_t seed,
                              uint64_t step_salt, int64_t element_offset,
                              T* mask, T* y, int64_t n) {
  const uint64_t salt = DropoutSalt(
      step_seed == nullptr ? seed
                           : DropoutStepSeed(static_cast<uint64_t>(*step_seed),
                                             seed, step_salt));
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    const T m = DropoutKeep(salt, i + element_offset, rate) ? keep_scale : T(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

template <typename T>
__global__ void StandardNormalKernel(const int64_t* step_seed, uint64_t seed,
                                     uint64_t step_salt, int64_t element_offset,
                                     T* out, int64_t n) {
  const uint64_t salt = DropoutSalt(
      step_seed == nullptr ? seed
                           : DropoutStepSeed(static_cast<uint64_t>(*step_seed),
                                             seed, step_salt));
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    out[i] = static_cast<T>(DropoutNormal(salt, i + element_offset));
  }
}

}  // namespace

absl::Status BiasAddOnGpu(DType dtype, const void* x, const void* bias, void* y,
                          int64_t rows, int64_t cols, int device) {
  const int64_t n = rows * cols;
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "BiasAdd", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        BiasAddKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(bias),
            static_cast<T*>(y), cols, n);
      });
}

absl::Status ColumnSumOnGpu(DType dtype, const void* x, int64_t rows,
                            int64_t cols, void* out, int device) {
  if (cols == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  absl::Status status;
  MT_RETURN_IF_ERROR(DispatchFloat("ColumnSum", dtype, [&](auto zero) {
    using T = decltype(zero);
    status.Update(
        column_sum::Run(column_sum::LoadPlain<T>{static_cast<const T*>(x)},
                        rows, cols, static_cast<T*>(out), device));
  }));
  return status;
}

absl::Status SoftmaxOnGpu(DType dtype, const void* x, void* y, int64_t rows,
                          int64_t cols, bool log, int device) {
  if (rows * cols == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "Softmax", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        SoftmaxKernel<T><<<RowBlocks(rows), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), rows, cols, log);
      });
}

absl::Status SparseSoftmaxXentOnGpu(DType dtype, const void* logits,
                                    DType label_dtype, const void* labels,
                                    int64_t rows, int64_t cols, void* loss,
                                    void* softmax, int device) {
  if (rows == 0) return absl::OkStatus();
  return LaunchFloatIndexOn(
      "SparseSoftmaxXent", dtype, label_dtype, device,
      [&](auto zero, auto label_zero, cudaStream_t stream) {
        using T = decltype(zero);
        using L = decltype(label_zero);
        XentKernel<T, L><<<RowBlocks(rows), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(logits), static_cast<const L*>(labels), rows,
            cols, static_cast<T*>(loss), static_cast<T*>(softmax));
      });
}

absl::Status SparseSoftmaxXentGradOnGpu(DType dtype, const void* softmax,
                                        DType label_dtype, const void* labels,
                                        const void* g, int64_t rows,
                                        int64_t cols, void* d, int device) {
  const int64_t n = rows * cols;
  if (n == 0) return absl::OkStatus();
  return LaunchFloatIndexOn(
      "SparseSoftmaxXentGrad", dtype, label_dtype, device,
      [&](auto zero, auto label_zero, cudaStream_t stream) {
        using T = decltype(zero);
        using L = decltype(label_zero);
        XentGradKernel<T, L><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(softmax), static_cast<const L*>(labels),
            static_cast<const T*>(g), static_cast<T*>(d), cols, n);
      });
}

absl::Status DropoutOnGpu(DType dtype, const void* x, double rate,
                          double keep_scale, const void* step_seed,
                          uint64_t seed, uint64_t step_salt,
                          int64_t element_offset, void* mask, void* y,
                          int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "Dropout", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DropoutKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(x), rate, static_cast<T>(keep_scale),
            static_cast<const int64_t*>(step_seed), seed, step_salt,
            element_offset, static_cast<T*>(mask), static_cast<T*>(y), n);
      });
}

MT_DEFINE_CUDA_KERNEL(BiasAdd, BiasAddOnGpu);
MT_DEFINE_CUDA_KERNEL(ColumnSum, ColumnSumOnGpu);
MT_DEFINE_CUDA_KERNEL(Softmax, SoftmaxOnGpu);
MT_DEFINE_CUDA_KERNEL(SparseSoftmaxXent, SparseSoftmaxXentOnGpu);
MT_DEFINE_CUDA_KERNEL(SparseSoftmaxXentGrad, SparseSoftmaxXentGradOnGpu);
MT_DEFINE_CUDA_KERNEL(Dropout, DropoutOnGpu);

absl::Status StandardNormalOnGpu(DType dtype, const void* step_seed,
                                 uint64_t seed, uint64_t step_salt,
                                 int64_t element_offset, void* out, int64_t n,
                                 int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "StandardNormal", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        StandardNormalKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const int64_t*>(step_seed), seed, step_salt,
            element_offset, static_cast<T*>(out), n);
      });
}

MT_DEFINE_CUDA_KERNEL(StandardNormal, StandardNormalOnGpu);

}  // namespace mirrortrain::cuda
