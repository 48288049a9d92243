// The device half of LocalAllReduce for replicas that share one GPU
// (logical GPU devices; NCCL allows one rank per GPU): sums elements
// [begin, end) over the replicas' buffers in replica order and writes the
// result into every buffer, as LocalAllReduce does on the host, so all
// replicas end bitwise identical. No CUDA types cross this header; without
// CUDA it returns FailedPrecondition.
//
// Stream contract: one kernel on the calling thread's current stream, not
// synchronised; the buffers must be ready for that stream.
#ifndef MIRRORTRAIN_DISTRIBUTE_DEVICE_SLICE_SUM_H_
#define MIRRORTRAIN_DISTRIBUTE_DEVICE_SLICE_SUM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace mirrortrain::distribute {

// At most this many replicas per GPU (their pointers go to the kernel by
// value).
inline constexpr int kMaxReplicasPerGpu = 16;

absl::Status DeviceSliceSum(DType dtype, absl::Span<void* const> buffers,
                            int64_t begin, int64_t end, bool mean, int device);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_DEVICE_SLICE_SUM_H_
