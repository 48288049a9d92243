// Sums over strided subsets of a tensor (ReduceSum, L2Loss, GlobalNorm).
// Short reductions take one thread per output; longer ones one block per
// output with a fixed-shape tree in shared memory; a few very long ones
// (a whole weight matrix to a scalar) split each output over several blocks
// whose partial sums a second pass adds. The split depends only on the
// sizes, so every result is computed in the same order on every run and
// every GPU.
#include <cuda_runtime.h>

#include <algorithm>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/device_scratch.h"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/strided_layout.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Reductions at most this long run one thread per output.
constexpr int64_t kThreadReduceMax = 32;

template <typename T>
__device__ double Term(ReduceKind kind, T value) {
  const double v = static_cast<double>(value);
  return kind == ReduceKind::kSumOfSquares ? v * v : v;
}

// One thread per output, the reduced elements in row-major order.
template <typename T, typename O>
__global__ void ReduceThreadKernel(ReduceKind kind, StridedLayout<1> kept,
                                   StridedLayout<1> reduced, double scale,
                                   const T* x, O* out) {
  for (int64_t o = GridStart(); o < kept.num_elements; o += GridStep()) {
    int64_t base[1];
    kept.Offsets(o, base);
    double acc = 0;
    for (int64_t r = 0; r < reduced.num_elements; ++r) {
      int64_t off[1];
      reduced.Offsets(r, off);
      acc += Term(kind, x[base[0] + off[0]]);
    }
    out[o] = static_cast<O>(scale * acc);
  }
}

// A fixed-shape tree over the block's kLaunchThreads values of `acc`;
// returns the block's sum to every thread. Requires blockDim.x ==
// kLaunchThreads (a power of two).
__device__ double BlockSum(double acc, double* partial) {
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = kLaunchThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  return partial[0];
}

// One block per output (grid-stride over outputs): thread t sums elements
// t, t + blockDim, ...; then a tree over the kLaunchThreads partial sums.
// Requires blockDim.x == kLaunchThreads (a power of two).
template <typename T, typename O>
__global__ void ReduceBlockKernel(ReduceKind kind, StridedLayout<1> kept,
                                  StridedLayout<1> reduced, double scale,
                                  const T* x, O* out) {
  __shared__ double partial[kLaunchThreads];
  for (int64_t o = blockIdx.x; o < kept.num_elements; o += gridDim.x) {
    int64_t base[1];
    kept.Offsets(o, base);
    double acc = 0;
    for (int64_t r = threadIdx.x; r < reduced.num_elements; r += blockDim.x) {
      int64_t off[1];
      reduced.Offsets(r, off);
      acc += Term(kind, x[base[0] + off[0]]);
    }
    const double sum = BlockSum(acc, partial);
    if (threadIdx.x == 0) out[o] = static_cast<O>(scale * sum);
    // `partial` is rewritten for the next output only after every thread
    // read the sum.
    __syncthreads();
  }
}

// Reductions of at least kSplitMin elements into fewer than kSplitOutputs
// outputs are split into chunks of about kSplitChunk elements (at most
// kMaxChunks per output): one block per output would leave most of the GPU
// idle.
constexpr int64_t kSplitMin = int64_t{1} << 16;
constexpr int64_t kSplitOutputs = 64;
constexpr int64_t kSplitChunk = 8192;
constexpr int64_t kMaxChunks = 256;

// Pass 1 of a split reduction: block b sums chunk b % chunks of output
// b / chunks (unscaled) into partials[b]. One block per (output, chunk):
// outputs * chunks < kSplitOutputs * kMaxChunks fits the grid.
template <typename T>
__global__ void ReduceChunkKernel(ReduceKind kind, StridedLayout<1> kept,
                                  StridedLayout<1> reduced, int64_t chunks,
                                  const T* x, double* partials) {
  __shared__ double partial[kLaunchThreads];
  const int64_t o = blockIdx.x / chunks, c = blockIdx.x % chunks;
  int64_t base[1];
  kept.Offsets(o, base);
  const int64_t begin = reduced.num_elements * c / chunks;
  const int64_t end = reduced.num_elements * (c + 1) / chunks;
  double acc = 0;
  for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
    int64_t off[1];
    reduced.Offsets(r, off);
    acc += Term(kind, x[base[0] + off[0]]);
  }
  const double sum = BlockSum(acc, partial);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 2: out[o] = scale * (the chunks' partial sums of output o, added by
// the same block tree in chunk order).
template <typename O>
__global__ void ReducePartialsKernel(const double* partials, int64_t chunks,
                                     double scale, O* out) {
  __shared__ double partial[kLaunchThreads];
  const int64_t o = blockIdx.x;
  double acc = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    acc += partials[o * chunks + c];
  }
  const double sum = BlockSum(acc, partial);
  if (threadIdx.x == 0) out[o] = static_cast<O>(scale * sum);
}

}  // namespace

absl::Status ReduceOnGpu(ReduceKind kind, DType dtype, const void* x,
                         absl::Span<const int64_t> kept_shape,
                         absl::Span<const int64_t> kept_strides,
                         absl::Span<const int64_t> reduced_shape,
                         absl::Span<const int64_t> reduced_strides,
                         double scale, DType out_dtype, void* out, int device) {
  constexpr const char* kWhat = "Reduce";
  if (kept_strides.size() != kept_shape.size() ||
      reduced_strides.size() != reduced_shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": stride lists do not match the shapes"));
  }
  if (out_dtype != dtype && out_dtype != DType::kF64) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": output dtype ", DTypeName(out_dtype),
                     " for input ", DTypeName(dtype)));
  }
  MT_ASSIGN_OR_RETURN(StridedLayout<1> kept,
                      MakeStridedLayout<1>(kWhat, kept_shape, {kept_strides}));
  MT_ASSIGN_OR_RETURN(
      StridedLayout<1> reduced,
      MakeStridedLayout<1>(kWhat, reduced_shape, {reduced_strides}));
  if (kept.num_elements == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  const bool by_thread = reduced.num_elements <= kThreadReduceMax;
  const bool split =
      reduced.num_elements >= kSplitMin && kept.num_elements < kSplitOutputs;
  const int64_t chunks =
      split ? std::min(kMaxChunks,
                       (reduced.num_elements + kSplitChunk - 1) / kSplitChunk)
            : 1;
  DeviceScratch partials;
  if (split) {
    MT_RETURN_IF_ERROR(partials.Allocate(
        device,
        static_cast<size_t>(kept.num_elements * chunks) * sizeof(double)));
  }
  auto launch = [&](auto in_zero, auto out_zero) {
    using T = decltype(in_zero);
    using O = decltype(out_zero);
    const T* px = static_cast<const T*>(x);
    O* po = static_cast<O*>(out);
    if (split) {
      ReduceChunkKernel<T>
          <<<static_cast<int>(kept.num_elements * chunks), kLaunchThreads, 0,
             stream>>>(kind, kept, reduced, chunks, px, partials.get<double>());
      ReducePartialsKernel<O>
          <<<static_cast<int>(kept.num_elements), kLaunchThreads, 0, stream>>>(
              partials.get<double>(), chunks, scale, po);
    } else if (by_thread) {
      ReduceThreadKernel<T, O>
          <<<LaunchBlocks(kept.num_elements), kLaunchThreads, 0, stream>>>(
              kind, kept, reduced, scale, px, po);
    } else {
      const int blocks = static_cast<int>(
          std::min<int64_t>(kept.num_elements, kMaxGridBlocks));
      ReduceBlockKernel<T, O><<<blocks, kLaunchThreads, 0, stream>>>(
          kind, kept, reduced, scale, px, po);
    }
  };
  MT_RETURN_IF_ERROR(DispatchFloat(kWhat, dtype, [&](auto in_zero) {
    using T = decltype(in_zero);
    if (out_dtype == DType::kF64) {
      launch(T{}, double{});
    } else {
      launch(T{}, T{});
    }
  }));
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("ReduceKernel");
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(Reduce, ReduceOnGpu);

}  // namespace mirrortrain::cuda
