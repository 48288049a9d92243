// Rounding f32 tensors to bfloat16 values in f32 storage (precision_ops.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

__global__ void RoundToBFloat16Kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    y[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
  }
}

}  // namespace

absl::Status RoundToBFloat16OnGpu(const void* x, void* y, int64_t n,
                                  int device) {
  if (n == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  RoundToBFloat16Kernel<<<LaunchBlocks(n), kLaunchThreads, 0, LaunchStream()>>>(
      static_cast<const float*>(x), static_cast<float*>(y), n);
  MT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(RoundToBFloat16, RoundToBFloat16OnGpu);

}  // namespace mirrortrain::cuda
