// Indexing and conversion kernels for array_ops: Fill, Cast, Gather and
// its gradient, OneHot and ArgMax. One thread per output element in a
// grid-stride loop.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <typename T>
__global__ void FillKernel(T* dst, T value, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) dst[i] = value;
}

constexpr int kSiteShift = 40;  // ops::internal::kSiteShift

// A failure at `position` of the checked op `check` (see DeviceIndexCheck).
__device__ void RecordFailure(const DeviceIndexCheck& check, int64_t position) {
  atomicMin(reinterpret_cast<unsigned long long*>(check.record),
            static_cast<unsigned long long>((check.site << kSiteShift) |
                                            static_cast<uint64_t>(position)));
}

template <typename S, typename D>
__global__ void CastKernel(const S* src, D* dst, int64_t n,
                           DeviceIndexCheck check) {
  for (int64_t i = GridStart(); i < n; i += GridStep()) {
    if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
      if (check.record != nullptr) {
        // The host's rule (ops::Cast): trunc(v) in [-2^(b-1), 2^(b-1)).
        const S low = -static_cast<S>(uint64_t{1} << (8 * sizeof(D) - 1));
        const S t = trunc(src[i]);
        if (!(t >= low && t < -low)) {  // False for NaN.
          dst[i] = D(0);
          RecordFailure(check, i);
          continue;
        }
      }
    }
    dst[i] = static_cast<D>(src[i]);
  }
}

// out[i, k] = params[indices[i], k]; indices were checked by the caller,
// or are checked here (`check`).
template <typename T, typename I>
__global__ void GatherKernel(const T* params, int64_t row, int64_t rows,
                             const I* indices, int64_t num_indices, T* out,
                             DeviceIndexCheck check) {
  const int64_t n = num_indices * row;
  for (int64_t j = GridStart(); j < n; j += GridStep()) {
    const int64_t i = j / row, k = j % row;
    const int64_t index = static_cast<int64_t>(indices[i]);
    if (check.record != nullptr && (index < 0 || index >= rows)) {
      out[j] = T(0);
      if (k == 0) RecordFailure(check, i);
      continue;
    }
    out[j] = params[index * row + k];
  }
}

template <typename V>
__global__ void FinishIndexCheckKernel(DeviceIndexCheck check, const V* values,
                                       int64_t bound, int64_t op) {
  const uint64_t key = static_cast<uint64_t>(check.record[0]);
  if (key == ~uint64_t{0} || (key >> kSiteShift) != check.site) return;
  const V value = values[key & ((uint64_t{1} << kSiteShift) - 1)];
  if constexpr (std::is_floating_point_v<V>) {
    check.record[1] = __double_as_longlong(static_cast<double>(value));
  } else {
    check.record[1] = static_cast<int64_t>(value);
  }
  check.record[2] = bound;
  check.record[3] = op;
}

// out[v, k] += updates[i, k] for every i with indices[i] == v, added in
// increasing i: the CPU's order, so the same bits on every run and on both
// devices (no atomics). One block per (row v, tile of kLaunchThreads
// columns), grid-stride; the block streams the indices through shared
// memory and each thread adds its column's matches. O(rows * indices) index
// reads: cheap for byte- and word-piece-sized vocabularies, and sort-free.
template <typename T, typename I>
__global__ void ScatterAddKernel(const T* updates, int64_t row,
                                 const I* indices, int64_t num_indices,
                                 int64_t rows, T* out) {
  __shared__ I chunk[kLaunchThreads];
  const int64_t tiles = (row + kLaunchThreads - 1) / kLaunchThreads;
  for (int64_t b = blockIdx.x; b < rows * tiles; b += gridDim.x) {
    const int64_t v = b / tiles;
    const int64_t k = (b % tiles) * kLaunchThreads + threadIdx.x;
    T acc = k < row ? out[v * row + k] : T(0);
    for (int64_t base = 0; base < num_indices; base += kLaunchThreads) {
      const int64_t n = num_indices - base < kLaunchThreads ? num_indices - base
                                                            : kLaunchThreads;
      __syncthreads();  // The previous chunk is read by every thread.
      if (threadIdx.x < n) chunk[threadIdx.x] = indices[base + threadIdx.x];
      __syncthreads();
      if (k >= row) continue;
      for (int64_t j = 0; j < n; ++j) {
        if (static_cast<int64_t>(chunk[j]) == v) {
          acc += updates[(base + j) * row + k];
        }
      }
    }
    if (k < row) out[v * row + k] = acc;
  }
}

// Out-of-range indices match no column and give an all-`off` row.
template <typename T, typename I>
__global__ void OneHotKernel(const I* indices, int64_t n, int64_t depth, T on,
                             T off, T* out) {
  const int64_t total = n * depth;
  for (int64_t j = GridStart(); j < total; j += GridStep()) {
    const int64_t i = j / depth, d = j % depth;
    out[j] = static_cast<int64_t>(indices[i]) == d ? on : off;
  }
}

// The CPU rule exactly: the first strictly larger value wins, so ties keep
// the first index and a NaN wins only in position 0.
template <typename T>
__global__ void ArgMaxKernel(const T* x, int64_t outer, int64_t n,
                             int64_t inner, int64_t* out) {
  const int64_t total = outer * inner;
  for (int64_t j = GridStart(); j < total; j += GridStep()) {
    const int64_t o = j / inner, i = j % inner;
    const T* base = x + o * n * inner + i;
    int64_t best = 0;
    for (int64_t k = 1; k < n; ++k) {
      if (base[k * inner] > base[best * inner]) best = k;
    }
    out[j] = best;
  }
}

}  // namespace

absl::Status FillOnGpu(DType dtype, void* dst, double value, int64_t n,
                       int device) {
  if (n == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  DispatchAll(dtype, [&](auto zero) {
    using T = decltype(zero);
    FillKernel<T><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
        static_cast<T*>(dst), static_cast<T>(value), n);
  });
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("FillKernel");
  return absl::OkStatus();
}

absl::Status CastOnGpu(DType src_dtype, const void* src, DType dst_dtype,
                       void* dst, int64_t n, DeviceIndexCheck check,
                       int device) {
  if (n == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  DispatchAll(src_dtype, [&](auto s_zero) {
    using S = decltype(s_zero);
    DispatchAll(dst_dtype, [&](auto d_zero) {
      using D = decltype(d_zero);
      CastKernel<S, D><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
          static_cast<const S*>(src), static_cast<D*>(dst), n, check);
    });
  });
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("CastKernel");
  return absl::OkStatus();
}

absl::Status GatherOnGpu(DType dtype, const void* params, int64_t row,
                         int64_t rows, DType index_dtype, const void* indices,
                         int64_t num_indices, void* out, DeviceIndexCheck check,
                         int device) {
  if (row == 0 || num_indices == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  const int blocks = LaunchBlocks(num_indices * row);
  MT_RETURN_IF_ERROR(DispatchIndex("Gather", index_dtype, [&](auto i_zero) {
    using I = decltype(i_zero);
    DispatchAll(dtype, [&](auto zero) {
      using T = decltype(zero);
      GatherKernel<T, I><<<blocks, kLaunchThreads, 0, stream>>>(
          static_cast<const T*>(params), row, rows,
          static_cast<const I*>(indices), num_indices, static_cast<T*>(out),
          check);
    });
  }));
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("GatherKernel");
  return absl::OkStatus();
}

absl::Status FinishIndexCheckOnGpu(DeviceIndexCheck check, DType values_dtype,
                                   const void* values, int64_t bound,
                                   int64_t op, int device) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  DispatchAll(values_dtype, [&](auto zero) {
    using V = decltype(zero);
    FinishIndexCheckKernel<V>
        <<<1, 1, 0, stream>>>(check, static_cast<const V*>(values), bound, op);
  });
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("FinishIndexCheckKernel");
  return absl::OkStatus();
}

absl::Status ScatterAddOnGpu(DType dtype, const void* updates, int64_t row,
                             DType index_dtype, const void* indices,
                             int64_t num_indices, int64_t rows, void* out,
                             int device) {
  if (row == 0 || num_indices == 0 || rows == 0) return absl::OkStatus();
  // One block per (row of out, tile of kLaunchThreads columns).
  const int64_t tiles = (row + kLaunchThreads - 1) / kLaunchThreads;
  return LaunchFloatIndexOn(
      "ScatterAdd", dtype, index_dtype, device,
      KernelLaunch(
          GridBlocks(rows * tiles),
          [](auto t, auto i) {
            return ScatterAddKernel<decltype(t), decltype(i)>;
          },
          updates, row, indices, num_indices, rows, out));
}

absl::Status OneHotOnGpu(DType index_dtype, const void* indices, int64_t n,
                         int64_t depth, DType dtype, double on, double off,
                         void* out, int device) {
  if (n == 0 || depth == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  const int blocks = LaunchBlocks(n * depth);
  MT_RETURN_IF_ERROR(DispatchIndex("OneHot", index_dtype, [&](auto i_zero) {
    using I = decltype(i_zero);
    DispatchAll(dtype, [&](auto zero) {
      using T = decltype(zero);
      OneHotKernel<T, I><<<blocks, kLaunchThreads, 0, stream>>>(
          static_cast<const I*>(indices), n, depth, static_cast<T>(on),
          static_cast<T>(off), static_cast<T*>(out));
    });
  }));
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("OneHotKernel");
  return absl::OkStatus();
}

absl::Status ArgMaxOnGpu(DType dtype, const void* x, int64_t outer, int64_t n,
                         int64_t inner, int64_t* out, int device) {
  if (outer * inner == 0) return absl::OkStatus();
  if (n < 1) {
    return absl::InvalidArgumentError("ArgMax: reduction axis is empty");
  }
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  DispatchAll(dtype, [&](auto zero) {
    using T = decltype(zero);
    ArgMaxKernel<T><<<LaunchBlocks(outer * inner), kLaunchThreads, 0, stream>>>(
        static_cast<const T*>(x), outer, n, inner, out);
  });
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("ArgMaxKernel");
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(Fill, FillOnGpu);
MT_DEFINE_CUDA_KERNEL(Cast, CastOnGpu);
MT_DEFINE_CUDA_KERNEL(Gather, GatherOnGpu);
MT_DEFINE_CUDA_KERNEL(FinishIndexCheck, FinishIndexCheckOnGpu);
MT_DEFINE_CUDA_KERNEL(ScatterAdd, ScatterAddOnGpu);
MT_DEFINE_CUDA_KERNEL(OneHot, OneHotOnGpu);
MT_DEFINE_CUDA_KERNEL(ArgMax, ArgMaxOnGpu);

}  // namespace mirrortrain::cuda
