// Per-channel kernels of batch normalization: an affine map per channel
// (the normalisation itself, and the input gradients) and the per-channel
// sums it needs (statistics, and the gradients of mean and variance). The
// sums are column sums (column_sum.cuh): deterministic, in double.
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

// w[i] * (x[i] - shift[c]), the element of the second sum.
template <typename T>
struct LoadShiftedProduct {
  const T* x;
  const T* w;
  const T* shift;
  int64_t cols;
  __device__ T operator()(int64_t i) const {
    const T xs = shift == nullptr ? x[i] : x[i] - shift[i % cols];
    return w[i] * xs;
  }
};

}  // namespace

absl::Status ChannelAffineOnGpu(DType dtype, const void* x, const void* a,
                                const void* b, void* y, int64_t rows,
                                int64_t cols, int device) {
  const int64_t n = rows * cols;
  if (n == 0) return absl::OkStatus();
  return LaunchFloatIndexWidthOn(
      "ChannelAffine", dtype, device, n,
      [&](auto zero, auto index, cudaStream_t stream) {
        using T = decltype(zero);
        using I = decltype(index);
        ChannelAffineKernel<T, I>
            <<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
                static_cast<const T*>(x), static_cast<const T*>(a),
                static_cast<const T*>(b), static_cast<T*>(y),
                static_cast<I>(cols), static_cast<I>(n));
      });
}

absl::Status ChannelSumsOnGpu(DType dtype, const void* x, const void* w,
                              const void* shift, int64_t rows, int64_t cols,
                              void* sum, void* dot, int device) {
  if (cols == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  absl::Status status;
  MT_RETURN_IF_ERROR(DispatchFloat("ChannelSums", dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* pw = static_cast<const T*>(w);
    status.Update(column_sum::Run(column_sum::LoadPlain<T>{pw}, rows, cols,
                                  static_cast<T*>(sum), device));
    if (!status.ok()) return;
    status.Update(column_sum::Run(
        LoadShiftedProduct<T>{static_cast<const T*>(x), pw,
                              static_cast<const T*>(shift), cols},
        rows, cols, static_cast<T*>(dot), device));
  }));
  return status;
}

MT_DEFINE_CUDA_KERNEL(ChannelAffine, ChannelAffineOnGpu);
MT_DEFINE_CUDA_KERNEL(ChannelSums, ChannelSumsOnGpu);

}  // namespace mirrortrain::cuda
