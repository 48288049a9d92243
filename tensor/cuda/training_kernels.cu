// CUDA kernels of the training ops: one grid-stride loop per update rule
// over the shared per-element arithmetic (tensor/update_rules.h). This file
// is compiled with --fmad=false (tensor/CMakeLists.txt), so no multiply-add
// is fused and every rounding matches the CPU loop's.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_training.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <UpdateRule R, typename T>
__global__ void UpdateKernel(const UpdateParams<T>* __restrict__ params,
                             const T* __restrict__ g, T* __restrict__ w,
                             T* __restrict__ s0, T* __restrict__ s1,
                             int64_t n) {
  const UpdateParams<T> p = *params;
  // Rules with fewer slots get null pointers: they use a local dummy.
  T unused0 = T(0), unused1 = T(0);
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    T& slot0 = s0 != nullptr ? s0[i] : unused0;
    T& slot1 = s1 != nullptr ? s1[i] : unused1;
    UpdateElement<R, T>(p, g[i], w[i], slot0, slot1);
  }
}

template <typename T>
__global__ void MovingAverageKernel(const T* __restrict__ decay,
                                    const T* __restrict__ value,
                                    T* __restrict__ shadow, int64_t n) {
  const T one_minus_decay = *decay;
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    MovingAverageElement(one_minus_decay, value[i], shadow[i]);
  }
}

template <UpdateRule R, typename T>
void LaunchUpdate(const void* params, const void* g, void* w, void* s0,
                  void* s1, int64_t n, cudaStream_t stream) {
  UpdateKernel<R, T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
      static_cast<const UpdateParams<T>*>(params), static_cast<const T*>(g),
      static_cast<T*>(w), static_cast<T*>(s0), static_cast<T*>(s1), n);
}

template <typename T>
void LaunchRule(UpdateRule rule, const void* params, const void* g, void* w,
                void* s0, void* s1, int64_t n, cudaStream_t stream) {
  DispatchUpdateRule(rule, [&](auto r) {
    LaunchUpdate<decltype(r)::value, T>(params, g, w, s0, s1, n, stream);
  });
}

}  // namespace

absl::Status ApplyUpdateOnGpu(UpdateRule rule, DType dtype, const void* params,
                              const void* grad, void* var, void* s0, void* s1,
                              int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "ApplyUpdate", dtype, device, [&](auto zero, cudaStream_t stream) {
        LaunchRule<decltype(zero)>(rule, params, grad, var, s0, s1, n, stream);
      });
}

absl::Status MovingAverageOnGpu(DType dtype, const void* one_minus_decay,
                                const void* value, void* shadow, int64_t n,
                                int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "MovingAverage", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        MovingAverageKernel<<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            static_cast<const T*>(one_minus_decay),
            static_cast<const T*>(value), static_cast<T*>(shadow), n);
      });
}

MT_DEFINE_CUDA_KERNEL(ApplyUpdate, ApplyUpdateOnGpu);
MT_DEFINE_CUDA_KERNEL(MovingAverage, MovingAverageOnGpu);

}  // namespace mirrortrain::cuda
