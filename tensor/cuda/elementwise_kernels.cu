// CUDA twins of the CPU elementwise kernels in tensor/ops/elementwise.cc.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.h"
#include "tensor/elementwise_kind.h"

namespace mirrortrain::cuda {
namespace {

template <typename T>
__global__ void UnaryKernel(UnaryKind kind, const T* x, T* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    y[i] = ApplyUnary(kind, x[i]);
  }
}

template <typename T>
__global__ void BinaryKernel(BinaryKind kind, const T* a, const T* b, T* out,
                             int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    out[i] = ApplyBinary(kind, a[i], b[i]);
  }
}

}  // namespace

absl::Status UnaryOnGpu(UnaryKind kind, DType dtype, const void* x, void* y,
                        int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "Unary", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        UnaryKernel<<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            kind, static_cast<const T*>(x), static_cast<T*>(y), n);
      });
}

absl::Status BinaryOnGpu(BinaryKind kind, DType dtype, const void* a,
                         const void* b, void* out, int64_t n, int device) {
  if (n == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "Binary", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        BinaryKernel<<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
            kind, static_cast<const T*>(a), static_cast<const T*>(b),
            static_cast<T*>(out), n);
      });
}

MT_DEFINE_CUDA_KERNEL(Unary, UnaryOnGpu);
MT_DEFINE_CUDA_KERNEL(Binary, BinaryOnGpu);

}  // namespace mirrortrain::cuda
