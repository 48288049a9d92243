// Launch helpers shared by the .cu kernel files: the grid for a
// grid-stride loop, the stream kernels go on (the facade's stream contract)
// and dtype dispatch. Only for files compiled by nvcc.
#ifndef MIRRORTRAIN_TENSOR_CUDA_LAUNCH_H_
#define MIRRORTRAIN_TENSOR_CUDA_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/dtype.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {

inline constexpr int kLaunchThreads = 256;

// Blocks for a grid-stride loop over n items (at least 1, capped so huge
// tensors loop instead of exceeding the grid limit).
inline int LaunchBlocks(int64_t n) {
  const int64_t blocks = (n + kLaunchThreads - 1) / kLaunchThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// The calling thread's current stream (see SetCurrentStream).
inline cudaStream_t LaunchStream() {
  cudaStream_t stream = static_cast<cudaStream_t>(CurrentStream());
  return stream != nullptr ? stream : cudaStreamPerThread;
}

// First index and step of a grid-stride loop, in int64 so that tensors of
// more than 2^31 elements index correctly.
template <typename I = int64_t>
__device__ inline I GridStart() {
  return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) +
         static_cast<I>(threadIdx.x);
}
template <typename I = int64_t>
__device__ inline I GridStep() {
  return static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x);
}

// Calls f(float{}) or f(double{}) per dtype; other dtypes are an error
// naming `what`.
template <typename F>
absl::Status DispatchFloat(const char* what, DType dtype, F f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      return absl::OkStatus();
    case DType::kF64:
      f(double{});
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": CUDA kernel takes f32 or f64, got ", DTypeName(dtype)));
  }
}

// Makes `device` current and calls launch(T{}, stream) for the f32/f64
// `dtype` (T float or double) with the calling thread's stream, then
// reports a bad launch; `what` names the kernel in errors.
template <typename F>
absl::Status LaunchFloatOn(const char* what, DType dtype, int device,
                           F launch) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  const cudaStream_t stream = LaunchStream();
  MT_RETURN_IF_ERROR(
      DispatchFloat(what, dtype, [&](auto zero) { launch(zero, stream); }));
  MT_CUDA_RETURN_IF_LAUNCH_ERROR(what);
  return absl::OkStatus();
}

// Calls f(int32_t{}) when every index below `max_index` fits 32 bits, else
// f(int64_t{}): index arithmetic in the narrower type where it suffices,
// since the GPU's 64-bit division costs several times the 32-bit one.
template <typename F>
void DispatchIndexWidth(int64_t max_index, F f) {
  if (max_index <= INT32_MAX) {
    f(int32_t{});
  } else {
    f(int64_t{});
  }
}

// LaunchFloatOn for kernels whose index arithmetic may be 32-bit: calls
// launch(T{}, I{}, stream) with T the f32/f64 `dtype` and I the index type
// DispatchIndexWidth picks for `max_index`.
template <typename F>
absl::Status LaunchFloatIndexWidthOn(const char* what, DType dtype, int device,
                                     int64_t max_index, F launch) {
  return LaunchFloatOn(
      what, dtype, device, [&](auto zero, cudaStream_t stream) {
        DispatchIndexWidth(max_index,
                           [&](auto index) { launch(zero, index, stream); });
      });
}

// Calls f(T{}) with T the C++ type of any dtype.
template <typename F>
void DispatchAll(DType dtype, F f) {
  switch (dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kF64:
      return f(double{});
    case DType::kI32:
      return f(int32_t{});
    case DType::kI64:
      return f(int64_t{});
  }
}

// Calls f(int32_t{}) or f(int64_t{}) for an index dtype.
template <typename F>
absl::Status DispatchIndex(const char* what, DType dtype, F f) {
  switch (dtype) {
    case DType::kI32:
      f(int32_t{});
      return absl::OkStatus();
    case DType::kI64:
      f(int64_t{});
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": indices must be i32 or i64, got ", DTypeName(dtype)));
  }
}

// LaunchFloatOn for kernels that also take indices: calls
// launch(T{}, I{}, stream) with T the f32/f64 `dtype` and I the i32/i64
// `index_dtype`.
template <typename F>
absl::Status LaunchFloatIndexOn(const char* what, DType dtype,
                                DType index_dtype, int device, F launch) {
  absl::Status index_status;
  const absl::Status launched =
      LaunchFloatOn(what, dtype, device, [&](auto zero, cudaStream_t stream) {
        index_status.Update(DispatchIndex(what, index_dtype, [&](auto index) {
          launch(zero, index, stream);
        }));
      });
  return launched.ok() ? index_status : launched;
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_LAUNCH_H_
