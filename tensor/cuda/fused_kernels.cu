// BiasAddRelu on GPU, fused as on the CPU (ops/fused_ops.cc): forward is
// one pass computing relu(x + bias); backward is one pass that masks dy by
// y > 0, stores it as dx and feeds it straight into the bias column sum
// (column_sum.cuh), so the masked gradient is read from memory only once.
#include <cuda_runtime.h>

#include "tensor/cuda/column_sum.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <typename T>
__global__ void BiasReluKernel(const T* x, const T* bias, T* y, int64_t cols,
                               int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    const T v = x[i] + bias[i % cols];
    y[i] = v > T(0) ? v : T(0);  // Relu's own formula (NaN -> 0).
  }
}

// dz[i] = y[i] > 0 ? dy[i] : 0, stored as it is loaded for the column sum.
template <typename T>
struct LoadMaskedGrad {
  const T* y;
  const T* dy;
  T* dz;
  __device__ T operator()(int64_t i) const {
    const T v = y[i] > T(0) ? dy[i] : T(0);
    dz[i] = v;
    return v;
  }
};

template <typename T>
__global__ void MaskKernel(LoadMaskedGrad<T> load, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) load(i);
}

}  // namespace

absl::Status BiasAddReluOnGpu(DType dtype, const void* x, const void* bias,
                              void* y, int64_t rows, int64_t cols, int device) {
  const int64_t n = rows * cols;
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "BiasAddRelu", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        BiasReluKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(bias),
            static_cast<T*>(y), cols, n);
      });
}

absl::Status BiasAddReluGradOnGpu(DType dtype, const void* y, const void* dy,
                                  void* dz, void* db, int64_t rows,
                                  int64_t cols, int device) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  absl::Status status;
  MT_RETURN_IF_ERROR(DispatchFloat("BiasAddReluGrad", dtype, [&](auto zero) {
    using T = decltype(zero);
    const LoadMaskedGrad<T> load{static_cast<const T*>(y),
                                 static_cast<const T*>(dy),
                                 static_cast<T*>(dz)};
    if (db != nullptr) {
      // The column sum touches every element once, writing dz on the way.
      status.Update(
          column_sum::Run(load, rows, cols, static_cast<T*>(db), device));
      return;
    }
    const int64_t n = rows * cols;
    if (n == 0) return;
    MaskKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(load, n);
  }));
  MT_RETURN_IF_ERROR(status);
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("MaskKernel");
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(BiasAddRelu, BiasAddReluOnGpu);
MT_DEFINE_CUDA_KERNEL(BiasAddReluGrad, BiasAddReluGradOnGpu);

}  // namespace mirrortrain::cuda
