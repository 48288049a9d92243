#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "distribute/device_slice_sum.h"
#include "tensor/cuda/chunked_batch.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

// Segments per launch: their pointers travel as a kernel parameter, which
// must stay under the classic 4 KiB limit (about 2.3 KiB here).
constexpr int kMaxSegments = 16;
// Elements per block; a block sums a chunk of one segment.
constexpr int64_t kChunk = 16 * cuda::kLaunchThreads;
constexpr int64_t kMaxBlocks = int64_t{1} << 30;

struct SegmentBatch {
  void* at[kMaxSegments][kMaxReplicasPerGpu];
  int64_t n[kMaxSegments];
  int first_block[kMaxSegments + 1];
  // Every replica's copy 16-byte aligned: summed 16 bytes at a time.
  bool wide[kMaxSegments];
  int replicas;
};

using cuda::Wide;

template <typename T>
__device__ inline void AddInto(T& acc, const T& x) {
  acc += x;
}
template <typename T>
__device__ inline void AddInto(Wide<T>& acc, const Wide<T>& x) {
#pragma unroll
  for (int k = 0; k < Wide<T>::kLanes; ++k) acc.v[k] += x.v[k];
}
template <typename T>
__device__ inline void DivideBy(T& acc, int n) {
  acc /= static_cast<T>(n);
}
template <typename T>
__device__ inline void DivideBy(Wide<T>& acc, int n) {
#pragma unroll
  for (int k = 0; k < Wide<T>::kLanes; ++k) acc.v[k] /= static_cast<T>(n);
}

// Element i (in units of E) of segment s: the sum in replica order, as the
// host path adds, written to every replica. The replica loops are unrolled
// to constant indices, and the batch is a __grid_constant__ parameter, so
// the pointers are read from parameter space, never copied per thread
// (a local copy once made this kernel 5x slower than a memcpy).
template <typename E>
__device__ inline void SumElement(const SegmentBatch& b, int s, int64_t i,
                                  bool mean) {
  E acc = static_cast<const E*>(b.at[s][0])[i];
#pragma unroll
  for (int r = 1; r < kMaxReplicasPerGpu; ++r) {
    if (r < b.replicas) AddInto(acc, static_cast<const E*>(b.at[s][r])[i]);
  }
  if (mean) DivideBy(acc, b.replicas);
#pragma unroll
  for (int r = 0; r < kMaxReplicasPerGpu; ++r) {
    if (r < b.replicas) static_cast<E*>(b.at[s][r])[i] = acc;
  }
}

template <typename T>
__global__ void SliceSumKernel(const __grid_constant__ SegmentBatch b,
                               bool mean) {
  int64_t begin, end;
  const int s = cuda::BlockChunk(b.first_block, b.n, kChunk, begin, end);
  // A chunk starts a multiple of kChunk elements in: aligned as well.
  cuda::VisitChunk<T>(
      b.wide[s], begin, end,
      [&](int64_t i) { SumElement<Wide<T>>(b, s, i / Wide<T>::kLanes, mean); },
      [&](int64_t i) { SumElement<T>(b, s, i, mean); });
}

}  // namespace

absl::Status DeviceSliceSum(DType dtype,
                            absl::Span<const SliceSegment> segments, bool mean,
                            int device) {
  if (segments.empty()) return absl::OkStatus();
  const int replicas = static_cast<int>(segments[0].at.size());
  MT_RETURN_IF_ERROR(CheckReplicasPerGpu(replicas, device));
  for (const SliceSegment& segment : segments) {
    if (static_cast<int>(segment.at.size()) != replicas ||
        segment.n > kChunk * kMaxBlocks) {
      return absl::InternalError(
          absl::StrCat("device all-reduce: a segment of ", segment.n,
                       " elements over ", segment.at.size(), " replicas"));
    }
  }
  cuda::DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  const cudaStream_t stream = cuda::LaunchStream();
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  SegmentBatch batch{};
  int count = 0;
  int64_t blocks = 0;
  auto flush = [&]() -> absl::Status {
    if (count == 0) return absl::OkStatus();
    batch.first_block[count] = static_cast<int>(blocks);
    batch.replicas = replicas;
    cuda::DispatchAll(dtype, [&](auto zero) {
      SliceSumKernel<decltype(zero)>
          <<<static_cast<int>(blocks), cuda::kLaunchThreads, 0, stream>>>(batch,
                                                                          mean);
    });
    batch = SegmentBatch{};
    count = 0;
    blocks = 0;
    MT_CUDA_RETURN_IF_LAUNCH_ERROR("SliceSumKernel");
    return absl::OkStatus();
  };
  // Adds elements [begin, end) of `segment` to the batch.
  auto add = [&](const SliceSegment& segment, int64_t begin,
                 int64_t end) -> absl::Status {
    if (end <= begin) return absl::OkStatus();
    const int64_t chunks = (end - begin + kChunk - 1) / kChunk;
    if (count == kMaxSegments || blocks + chunks > kMaxBlocks) {
      MT_RETURN_IF_ERROR(flush());
    }
    bool wide = true;
    for (int r = 0; r < replicas; ++r) {
      batch.at[count][r] = static_cast<char*>(segment.at[r]) + begin * size;
      wide &= reinterpret_cast<uintptr_t>(batch.at[count][r]) % 16 == 0;
    }
    batch.n[count] = end - begin;
    batch.wide[count] = wide;
    batch.first_block[count] = static_cast<int>(blocks);
    blocks += chunks;
    ++count;
    return absl::OkStatus();
  };
  for (const SliceSegment& segment : segments) {
    // Where every replica's copy is off 16 bytes by the same amount (a
    // slice that starts inside a tensor), the elements up to the next
    // 16-byte boundary go alone and the rest 16 bytes at a time.
    auto off16 = [](const void* p) {
      return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16);
    };
    const int64_t off = off16(segment.at[0]);
    bool same_off = off % size == 0;
    for (void* p : segment.at) same_off &= off16(p) == off;
    const int64_t head =
        same_off && off != 0 ? std::min(segment.n, (16 - off) / size) : 0;
    MT_RETURN_IF_ERROR(add(segment, 0, head));
    MT_RETURN_IF_ERROR(add(segment, head, segment.n));
  }
  return flush();
}

}  // namespace mirrortrain::distribute
