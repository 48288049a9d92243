// CopySegments: several small copies between one GPU's memory and pinned
// host memory as one kernel (cuda_kernels.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Segments per launch: passed by value, as the kernel's parameter (384
// bytes): a step with two micro-batches, the staged values and the last
// replay's loss and norm back still fit one launch.
constexpr int kSegmentsPerLaunch = 16;
// Blocks per segment at most; larger segments loop.
constexpr int64_t kMaxBlocksPerSegment = 512;

struct SegmentList {
  CopySegment segment[kSegmentsPerLaunch];
};

// Block row y copies segment y, 16 bytes per thread and step where both
// ends are 16-byte aligned, then the tail (or all of it) byte by byte.
// Loads are `ld.global.cv` (__ldcv): a pinned host source is fetched
// again, never taken from lines an earlier launch cached, since the host
// rewrites it between launches; a copy reads each byte once anyway.
__global__ void CopySegmentsKernel(SegmentList list) {
  const CopySegment s = list.segment[blockIdx.y];
  auto* dst = static_cast<unsigned char*>(s.dst);
  const auto* src = static_cast<const unsigned char*>(s.src);
  const int64_t start = GridStart(), step = GridStep();
  int64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) &
       15) == 0) {
    const int64_t vectors = s.bytes / 16;
    for (int64_t i = start; i < vectors; i += step) {
      reinterpret_cast<int4*>(dst)[i] =
          __ldcv(reinterpret_cast<const int4*>(src) + i);
    }
    done = vectors * 16;
  }
  for (int64_t i = done + start; i < s.bytes; i += step) {
    dst[i] = __ldcv(src + i);
  }
}

}  // namespace

absl::Status CopySegmentsOnGpu(absl::Span<const CopySegment> segments,
                               int device) {
  if (segments.empty()) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  for (size_t first = 0; first < segments.size(); first += kSegmentsPerLaunch) {
    const size_t count =
        std::min<size_t>(kSegmentsPerLaunch, segments.size() - first);
    SegmentList list{};
    int64_t widest = 0;
    for (size_t i = 0; i < count; ++i) {
      list.segment[i] = segments[first + i];
      widest = std::max(widest, segments[first + i].bytes);
    }
    const int64_t blocks = std::min<int64_t>(
        kMaxBlocksPerSegment, std::max<int64_t>(1, LaunchBlocks(widest / 16)));
    CopySegmentsKernel<<<dim3(static_cast<unsigned>(blocks),
                              static_cast<unsigned>(count)),
                         kLaunchThreads, 0, stream>>>(list);
    MT_CUDA_RETURN_IF_LAUNCH_ERROR("CopySegmentsKernel");
  }
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(CopySegments, CopySegmentsOnGpu);

}  // namespace mirrortrain::cuda
