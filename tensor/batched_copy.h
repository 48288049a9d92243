// BatchedCopy: the small copies at the start of a step (the staged scalars
// of StagedTensor, the batch into a captured graph's fixed inputs) gathered
// and enqueued as one kernel (cuda::CopySegments) instead of one copy
// launch each: copies queued on one stream run one after another, each
// with its own launch gap, and they sit between two steps on the GPU.
//
// Copies are deferred to Flush() only where they are plain bytes into one
// GPU's memory (no bfloat16 rendering or copy on either tensor, see
// tensor.h); the rest run at once as Tensor::CopyFrom would. Flush()
// enqueues the deferred ones on the calling thread's current stream, then
// records the events given with them. Sources must stay alive and
// unchanged, and destinations unread, until then; a batch left unflushed
// is flushed by the destructor, which cannot report an error.
//
// Thread contract: one thread (a replica's) uses a batch.
#ifndef MIRRORTRAIN_TENSOR_BATCHED_COPY_H_
#define MIRRORTRAIN_TENSOR_BATCHED_COPY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

namespace mirrortrain {

class BatchedCopy {
 public:
  BatchedCopy() = default;
  ~BatchedCopy();
  BatchedCopy(const BatchedCopy&) = delete;
  BatchedCopy& operator=(const BatchedCopy&) = delete;

  // dst.CopyFrom(src): deferred when both are on the same GPU and plain,
  // else done now.
  absl::Status Add(Tensor& dst, const Tensor& src);
  // `bytes` from pinned host memory `src` into `dst` on GPU `device`, and
  // `done` (may be null) recorded after the copy (StagedTensor::Upload).
  absl::Status AddUpload(void* dst, const void* src, int64_t bytes, int device,
                         cuda::Event* done);
  // Enqueues the deferred copies and records their events.
  absl::Status Flush();
  // Deferred copies not flushed yet.
  size_t pending() const { return segments_.size(); }

 private:
  // Flushes first when `device` is not the batch's.
  absl::Status Defer(int device, cuda::CopySegment segment);

  int device_ = -1;
  std::vector<cuda::CopySegment> segments_;
  std::vector<cuda::Event*> events_;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_BATCHED_COPY_H_
