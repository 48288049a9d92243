// The device half of LocalAllReduce for replicas that share one GPU
// (logical GPU devices; NCCL allows one rank per GPU): sums each segment's
// elements over the replicas in replica order and writes the result into
// every replica's copy, as LocalAllReduce does on the host, so all
// replicas end bitwise identical. No CUDA types cross this header; without
// CUDA it returns FailedPrecondition.
//
// Stream contract: the kernels go on the calling thread's current stream,
// not synchronised; the buffers must be ready for that stream.
#ifndef MIRRORTRAIN_DISTRIBUTE_DEVICE_SLICE_SUM_H_
#define MIRRORTRAIN_DISTRIBUTE_DEVICE_SLICE_SUM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace mirrortrain::distribute {

// At most this many replicas per GPU (their pointers go to the kernel by
// value).
inline constexpr int kMaxReplicasPerGpu = 16;

// OK when `replicas` logical replicas may share gpu:`device`'s all-reduce;
// else InvalidArgument saying how many can.
inline absl::Status CheckReplicasPerGpu(int replicas, int device) {
  if (replicas >= 1 && replicas <= kMaxReplicasPerGpu) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "device all-reduce: ", replicas, " replicas share gpu:", device,
      "; at most ", kMaxReplicasPerGpu, " can"));
}

// `n` elements that lie contiguously in every replica's memory: at[r] is
// where they start in replica r's copy.
struct SliceSegment {
  std::vector<void*> at;
  int64_t n = 0;
};

// Every segment (each with the same number of replicas) in as few kernels
// as their count allows.
absl::Status DeviceSliceSum(DType dtype,
                            absl::Span<const SliceSegment> segments, bool mean,
                            int device);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_DEVICE_SLICE_SUM_H_
