#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "distribute/device_slice_sum.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

template <typename E>
struct Buffers {
  E* ptr[kMaxReplicasPerGpu];
};

// 16 bytes of T: one load or store instruction per buffer and element.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename T>
__device__ inline void AddInto(T& acc, const T& x) {
  acc += x;
}
template <typename T>
__device__ inline void AddInto(Pack<T>& acc, const Pack<T>& x) {
#pragma unroll
  for (int k = 0; k < Pack<T>::kSize; ++k) acc.v[k] += x.v[k];
}
template <typename T>
__device__ inline void DivideBy(T& acc, int n) {
  acc /= static_cast<T>(n);
}
template <typename T>
__device__ inline void DivideBy(Pack<T>& acc, int n) {
#pragma unroll
  for (int k = 0; k < Pack<T>::kSize; ++k) acc.v[k] /= static_cast<T>(n);
}

// Elements [0, n) of every buffer: the sum in replica order, as the host
// path adds. The replica loops are unrolled to constant indices so the
// pointers stay in parameter space; a runtime index would make every
// thread copy the array to local memory (that made this kernel 5x slower
// than a memcpy of the same bytes).
template <typename E>
__global__ void SliceSumKernel(Buffers<E> b, int count, int64_t n, bool mean) {
  for (int64_t i = cuda::GridStart(); i < n; i += cuda::GridStep()) {
    E acc = b.ptr[0][i];
#pragma unroll
    for (int r = 1; r < kMaxReplicasPerGpu; ++r) {
      if (r < count) AddInto(acc, b.ptr[r][i]);
    }
    if (mean) DivideBy(acc, count);
#pragma unroll
    for (int r = 0; r < kMaxReplicasPerGpu; ++r) {
      if (r < count) b.ptr[r][i] = acc;
    }
  }
}

// Launches the kernel over elements [begin, begin + n * E's size / T's
// size) of every buffer, as n elements of type E.
template <typename E, typename T>
void LaunchSliceSum(absl::Span<void* const> buffers, int64_t begin, int64_t n,
                    bool mean, cudaStream_t stream) {
  if (n <= 0) return;
  Buffers<E> b{};
  const int count = static_cast<int>(buffers.size());
  for (int r = 0; r < count; ++r) {
    b.ptr[r] = reinterpret_cast<E*>(static_cast<T*>(buffers[r]) + begin);
  }
  SliceSumKernel<E><<<cuda::LaunchBlocks(n), cuda::kLaunchThreads, 0, stream>>>(
      b, count, n, mean);
}

}  // namespace

absl::Status DeviceSliceSum(DType dtype, absl::Span<void* const> buffers,
                            int64_t begin, int64_t end, bool mean, int device) {
  const int count = static_cast<int>(buffers.size());
  if (count < 1 || count > kMaxReplicasPerGpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device all-reduce: ", count, " replicas share gpu:", device,
        "; at most ", kMaxReplicasPerGpu, " can"));
  }
  if (end <= begin) return absl::OkStatus();
  cuda::DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  const cudaStream_t stream = cuda::LaunchStream();
  cuda::DispatchAll(dtype, [&](auto zero) {
    using T = decltype(zero);
    constexpr int kPack = Pack<T>::kSize;
    // 16-byte accesses when every buffer's slice starts 16-byte aligned
    // (LocalAllReduce cuts slices at multiples of 64 elements); the tail
    // that does not fill a Pack goes element by element.
    bool aligned = true;
    for (void* p : buffers) {
      aligned &= reinterpret_cast<uintptr_t>(static_cast<T*>(p) + begin) %
                     alignof(Pack<T>) ==
                 0;
    }
    const int64_t packs = aligned ? (end - begin) / kPack : 0;
    LaunchSliceSum<Pack<T>, T>(buffers, begin, packs, mean, stream);
    LaunchSliceSum<T, T>(buffers, begin + packs * kPack,
                         end - begin - packs * kPack, mean, stream);
  });
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("SliceSumKernel");
  return absl::OkStatus();
}

}  // namespace mirrortrain::distribute
