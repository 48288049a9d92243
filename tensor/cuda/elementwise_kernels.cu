// CUDA twins of the CPU elementwise kernels in tensor/ops/elementwise.cc.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/elementwise_apply.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <typename T>
__global__ void UnaryKernel(UnaryKind kind, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    y[i] = ApplyUnary(kind, x[i]);
  }
}

template <typename T>
__global__ void BinaryKernel(BinaryKind kind, const T* a, const T* b, T* out,
                             int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    out[i] = ApplyBinary(kind, a[i], b[i]);
  }
}

constexpr int kThreads = 256;
int Blocks(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

absl::Status FloatOnly(DType dtype) {
  return absl::InvalidArgumentError(absl::StrCat(
      "CUDA elementwise kernels take f32 or f64, got ", DTypeName(dtype)));
}

// Launches `kernel` over n elements of f32 or f64 on the current stream.
template <typename Launch>
absl::Status LaunchFloat(DType dtype, int64_t n, int device, Launch launch) {
  if (n == 0) return absl::OkStatus();
  if (dtype != DType::kF32 && dtype != DType::kF64) return FloatOnly(dtype);
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = static_cast<cudaStream_t>(CurrentStream());
  if (stream == nullptr) stream = cudaStreamPerThread;
  if (dtype == DType::kF32) {
    launch(float{}, stream);
  } else {
    launch(double{}, stream);
  }
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("elementwise kernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status Unary(UnaryKind kind, DType dtype, const void* x, void* y,
                   int64_t n, int device) {
  return LaunchFloat(dtype, n, device, [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    UnaryKernel<<<Blocks(n), kThreads, 0, stream>>>(
        kind, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

absl::Status Binary(BinaryKind kind, DType dtype, const void* a, const void* b,
                    void* out, int64_t n, int device) {
  return LaunchFloat(dtype, n, device, [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    BinaryKernel<<<Blocks(n), kThreads, 0, stream>>>(
        kind, static_cast<const T*>(a), static_cast<const T*>(b),
        static_cast<T*>(out), n);
  });
}

}  // namespace mirrortrain::cuda
