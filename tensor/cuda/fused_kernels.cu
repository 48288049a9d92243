// BiasAddRelu on GPU, fused as on the CPU (ops/fused_ops.cc): forward is
// one pass computing relu(x + bias); backward is one pass that masks dy by
// y > 0, stores it as dx and feeds it straight into the bias column sum
// (column_sum.cuh), so the masked gradient is read from memory only once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
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

// dz[i] = y[i] > 0 ? dy[i] : 0, stored as it is loaded for the column sum
// (which sums the unrounded value); O is T, or bfloat16 for a dz that only
// bf16 products read; Y is T, or bfloat16 for a rounded y's halves.
template <typename T, typename O = T, typename Y = T>
struct LoadMaskedGrad {
  const Y* y;
  const T* dy;
  O* dz;
  __device__ T operator()(int64_t i) const {
    // __ldg: y and dy are not written here, so the column sum may load
    // later rows before this one's dz is stored (column_sum.cuh).
    bool positive;
    if constexpr (std::is_same_v<Y, __nv_bfloat16>) {
      positive = __bfloat162float(__ldg(y + i)) > 0.0f;
    } else {
      positive = __ldg(y + i) > T(0);
    }
    const T dyi = __ldg(dy + i);
    const T v = positive ? dyi : T(0);
    if constexpr (std::is_same_v<O, __nv_bfloat16>) {
      dz[i] = __float2bfloat16_rn(v);
    } else {
      dz[i] = v;
    }
    return v;
  }
};

template <typename Load>
__global__ void MaskKernel(Load load, int64_t n) {
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

absl::Status BiasAddReluGradOnGpu(DType dtype, const void* y, bool y_bf16,
                                  const void* dy, void* dz, bool dz_bf16,
                                  void* db, int64_t rows, int64_t cols,
                                  int device) {
  if ((dz_bf16 || y_bf16) && dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BiasAddReluGrad: bfloat16 y or dz stand for f32 values, got ",
        DTypeName(dtype)));
  }
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  absl::Status status;
  // The column sum touches every element once, writing dz on the way.
  auto launch = [&](auto load, auto* sum) {
    if (db != nullptr) {
      status.Update(column_sum::Run(load, rows, cols, sum, device));
      return;
    }
    const int64_t n = rows * cols;
    if (n == 0) return;
    MaskKernel<<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(load, n);
  };
  MT_RETURN_IF_ERROR(DispatchFloat("BiasAddReluGrad", dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* tdy = static_cast<const T*>(dy);
    // y and dz each as T or as bfloat16 (f32 only).
    auto with_dz = [&](auto* ty) {
      using Y = std::remove_const_t<std::remove_pointer_t<decltype(ty)>>;
      if constexpr (std::is_same_v<T, float>) {
        if (dz_bf16) {
          launch(
              LoadMaskedGrad<T, __nv_bfloat16, Y>{
                  ty, tdy, static_cast<__nv_bfloat16*>(dz)},
              static_cast<T*>(db));
          return;
        }
      }
      launch(LoadMaskedGrad<T, T, Y>{ty, tdy, static_cast<T*>(dz)},
             static_cast<T*>(db));
    };
    if constexpr (std::is_same_v<T, float>) {
      if (y_bf16) {
        with_dz(static_cast<const __nv_bfloat16*>(y));
        return;
      }
    }
    with_dz(static_cast<const T*>(y));
  }));
  MT_RETURN_IF_ERROR(status);
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("MaskKernel");
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(BiasAddRelu, BiasAddReluOnGpu);
MT_DEFINE_CUDA_KERNEL(BiasAddReluGrad, BiasAddReluGradOnGpu);

}  // namespace mirrortrain::cuda
