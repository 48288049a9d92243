// BatchedCopy: the small copies at the start of a step (the staged scalars
// of StagedTensor, the batch into a captured graph's fixed inputs) gathered
// and enqueued as one kernel (cuda::CopySegments) instead of one copy
// launch each: copies queued on one stream run one after another, each
// with its own launch gap, and they sit between two steps on the GPU.
//
// Copies are deferred to Flush() only where they are plain bytes into one
// GPU's memory, or (readbacks) out of it into pinned host memory (no
// bfloat16 rendering or copy on either tensor, see
// tensor.h); the rest run at once as Tensor::CopyFrom would. Flush()
// enqueues the deferred ones on the calling thread's current stream (one
// of that GPU's), then records the events given with them. The batch holds
// its tensors until then, so a source or destination dropped by its owner
// is not handed to other work before the copy; a pinned host source that
// only the batch still holds (its StagedTensor gone) is waited for before
// the batch lets it go. A readback writes pinned host memory through its
// mapped address (unified addressing), so a step's scalars come back in the
// same kernel as the next step's inputs go in. A batch left unflushed is
// flushed by the destructor, which cannot report an error.
//
// Thread contract: one thread (a replica's) uses a batch.
#ifndef MIRRORTRAIN_TENSOR_BATCHED_COPY_H_
#define MIRRORTRAIN_TENSOR_BATCHED_COPY_H_

#include <cstdint>
#include <memory>
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

  // dst.CopyFrom(src): deferred when both are on the batch's GPU (the first
  // one given) and plain, else done now.
  absl::Status Add(Tensor& dst, const Tensor& src);
  // A StagedTensor's upload: `host` (pinned memory) into `dst` (same bytes,
  // on the batch's GPU); then `done` is recorded after the copy and
  // `*unflushed` (set true here) is cleared.
  absl::Status AddUpload(const Tensor& dst, const Tensor& host,
                         std::shared_ptr<cuda::Event> done,
                         std::shared_ptr<bool> unflushed);
  // A readback: `src` (on the batch's GPU) into `host`, the same bytes in
  // pinned memory (cuda::PinnedHostAllocator; the kernel writes it through
  // its mapped address). The host may read it once an event recorded on
  // the stream after Flush() has completed; both stay with their owners
  // until then (the batch lets them go at Flush()).
  absl::Status AddReadback(const Tensor& host, const Tensor& src);
  // Enqueues the deferred copies, records their events (all of them, even
  // after an error) and lets the tensors go.
  absl::Status Flush();
  // Deferred copies not flushed yet.
  size_t pending() const { return segments_.size(); }

 private:
  struct Upload {
    Tensor host;
    std::shared_ptr<cuda::Event> done;
    std::shared_ptr<bool> unflushed;
  };
  // OK when `gpu` is on the batch's GPU (or the batch has none yet) and
  // `host` in host memory with the same bytes; else InvalidArgument
  // naming `what` (upload, read back).
  absl::Status CheckHostCopy(const Tensor& gpu, const Tensor& host,
                             const char* what) const;
  // Defers a copy of dst.bytes() into `dst` on gpu:`device`, holding both
  // tensors.
  absl::Status Defer(const Tensor& dst, const Tensor& src, int device);

  int device_ = -1;
  std::vector<cuda::CopySegment> segments_;
  std::vector<Tensor> held_;
  std::vector<Upload> uploads_;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_BATCHED_COPY_H_
