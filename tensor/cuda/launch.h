// Launch helpers shared by the .cu kernel files: the grid for a
// grid-stride loop, the stream kernels go on (the facade's stream contract)
// and dtype dispatch. Only for files compiled by nvcc.
#ifndef MIRRORTRAIN_TENSOR_CUDA_LAUNCH_H_
#define MIRRORTRAIN_TENSOR_CUDA_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/dtype.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {

inline constexpr int kLaunchThreads = 256;
// Blocks a grid-stride launch uses at most (the grid's y and z limit, kept
// for x too).
inline constexpr int64_t kMaxGridBlocks = 65535;

// Blocks for a grid-stride loop over `units` units of one block each (rows,
// tiles): at least 1, capped so huge tensors loop instead of exceeding the
// grid limit.
inline int GridBlocks(int64_t units) {
  return static_cast<int>(units < kMaxGridBlocks ? (units > 0 ? units : 1)
                                                 : kMaxGridBlocks);
}

// Blocks for a grid-stride loop over n items, kLaunchThreads per block.
inline int LaunchBlocks(int64_t n) {
  return GridBlocks((n + kLaunchThreads - 1) / kLaunchThreads);
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
// since the GPU's 64-bit division costs several times the 32-bit one. A
// grid-stride loop steps past its end by up to a whole grid
// (kMaxGridBlocks of kLaunchThreads, four elements a thread at most) before
// it stops, so that much headroom must fit too.
template <typename F>
void DispatchIndexWidth(int64_t max_index, F f) {
  constexpr int64_t kOvershoot = kMaxGridBlocks * kLaunchThreads * 4;
  if (max_index <= INT32_MAX - kOvershoot) {
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

// The value a kernel parameter of type P receives for `a`, an argument of
// the type-erased kernel API: a buffer (void*, const void*) becomes the
// kernel's typed pointer (static_cast cannot drop const, so a const buffer
// never becomes a mutable pointer), an int64 size the kernel's index type
// (callers pick one wide enough, see DispatchIndexWidth), and a host struct
// its device form through that form's explicit constructor. Integers and
// floating point never convert into each other.
template <typename P, typename A>
P KernelArg(const A& a) {
  if constexpr (std::is_pointer_v<A> &&
                std::is_void_v<std::remove_pointer_t<A>>) {
    static_assert(std::is_pointer_v<P>, "a buffer needs a pointer parameter");
  } else if constexpr (std::is_arithmetic_v<A> && std::is_arithmetic_v<P>) {
    static_assert(std::is_floating_point_v<A> == std::is_floating_point_v<P>,
                  "integer and floating-point kernel arguments do not mix");
  }
  return static_cast<P>(a);
}

// Launches `kernel` on `blocks` blocks of `threads` on `stream`, each
// argument converted to its parameter's type by KernelArg.
template <typename... P, typename... A>
void LaunchKernel(void (*kernel)(P...), dim3 blocks, dim3 threads,
                  cudaStream_t stream, const A&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
  kernel<<<blocks, threads, 0, stream>>>(KernelArg<P>(args)...);
}

// The one launch pattern of the kernel files: the `launch` callback of
// LaunchFloatOn, LaunchFloatIndexWidthOn and LaunchFloatIndexOn that
// launches kernel_of(T{}) or kernel_of(T{}, I{}) (the kernel template
// instantiated for the dispatched types) on `blocks` blocks of
// kLaunchThreads with `args` (copied) converted by KernelArg:
//
//   return LaunchFloatOn(
//       "Foo", dtype, device,
//       KernelLaunch(LaunchBlocks(n),
//                    [](auto t) { return FooKernel<decltype(t)>; }, x, y, n));
template <typename KernelOf, typename... A>
class KernelLaunch {
 public:
  KernelLaunch(int blocks, KernelOf kernel_of, A... args)
      : blocks_(blocks), kernel_of_(kernel_of), args_(args...) {}

  template <typename T>
  void operator()(T zero, cudaStream_t stream) const {
    Launch(kernel_of_(zero), stream);
  }
  template <typename T, typename I>
  void operator()(T zero, I index, cudaStream_t stream) const {
    Launch(kernel_of_(zero, index), stream);
  }

 private:
  template <typename Kernel>
  void Launch(Kernel kernel, cudaStream_t stream) const {
    std::apply(
        [&](const A&... args) {
          LaunchKernel(kernel, blocks_, kLaunchThreads, stream, args...);
        },
        args_);
  }

  int blocks_;
  KernelOf kernel_of_;
  std::tuple<A...> args_;
};

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_LAUNCH_H_
