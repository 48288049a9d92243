// Rounding f32 tensors to bfloat16: values kept in f32 storage
// (precision_ops.h), and bfloat16 operand copies (ops/gemm_operand.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/cuda/bf16_pack.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Elements [begin, n) one at a time.
__device__ inline void RoundTail(const float* x, float* y,
                                 __nv_bfloat16* halves, int64_t begin,
                                 int64_t n) {
  for (int64_t i = begin + GridStart(); i < n; i += GridStep()) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
    y[i] = __bfloat162float(h);
    if (halves != nullptr) halves[i] = h;
  }
}

__global__ void RoundToBFloat16Kernel(const float* x, float* y,
                                      __nv_bfloat16* halves, int64_t n) {
  RoundTail(x, y, halves, 0, n);
}

// Four elements per thread (16-byte loads and stores, 8-byte halves), as
// ToBf16x4Kernel; every layer output under mixed bfloat16 takes this pass.
__global__ void RoundToBFloat16x4Kernel(const float* x, float* y,
                                        __nv_bfloat16* halves, int64_t n) {
  const int64_t quads = n / 4;
  for (int64_t i = GridStart(); i < quads; i += GridStep()) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];  // y may be x.
    const uint2 h = PackBf16x4(v.x, v.y, v.z, v.w);
    reinterpret_cast<float4*>(y)[i] = UnpackBf16x4(h);
    if (halves != nullptr) reinterpret_cast<uint2*>(halves)[i] = h;
  }
  RoundTail(x, y, halves, quads * 4, n);
}

// Whether f32 `x` and the 2-byte `halves` (null: none) allow four
// elements per access.
bool FourAtATime(const void* x, const void* halves) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(halves) % 8 == 0;
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

// Four elements per thread (16-byte loads, 8-byte stores): one element per
// access leaves this memory-bound pass well under the bandwidth. The n % 4
// last elements go one by one.
__global__ void ToBf16x4Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  const int64_t quads = n / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  uint2* y4 = reinterpret_cast<uint2*>(y);
  for (int64_t i = GridStart(); i < quads; i += GridStep()) {
    const float4 v = x4[i];
    y4[i] = PackBf16x4(v.x, v.y, v.z, v.w);
  }
  for (int64_t i = quads * 4 + GridStart(); i < n; i += GridStep()) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

}  // namespace

absl::Status ToBFloat16OnGpu(const void* x, void* y, int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(y) % 8 == 0;
  if (aligned) {
    ToBf16x4Kernel<<<LaunchBlocks((n + 3) / 4), kLaunchThreads, 0,
                     LaunchStream()>>>(static_cast<const float*>(x),
                                       static_cast<__nv_bfloat16*>(y), n);
  } else {
    ToBf16Kernel<<<LaunchBlocks(n), kLaunchThreads, 0, LaunchStream()>>>(
        static_cast<const float*>(x), static_cast<__nv_bfloat16*>(y), n);
  }
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("ToBFloat16");
  return absl::OkStatus();
}

absl::Status RoundToBFloat16OnGpu(const void* x, void* y, void* halves,
                                  int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  const bool four = FourAtATime(x, halves) && FourAtATime(y, nullptr);
  (four ? RoundToBFloat16x4Kernel
        : RoundToBFloat16Kernel)<<<LaunchBlocks(four ? (n + 3) / 4 : n),
                                   kLaunchThreads, 0, LaunchStream()>>>(
      static_cast<const float*>(x), static_cast<float*>(y),
      static_cast<__nv_bfloat16*>(halves), n);
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("RoundToBFloat16");
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(RoundToBFloat16, RoundToBFloat16OnGpu);
MT_DEFINE_CUDA_KERNEL(ToBFloat16, ToBFloat16OnGpu);

}  // namespace mirrortrain::cuda
