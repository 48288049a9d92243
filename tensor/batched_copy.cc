#include "tensor/batched_copy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain {

BatchedCopy::~BatchedCopy() {
  // Nothing to report to; Flush() is the way to see errors.
  Flush().IgnoreError();
}

absl::Status BatchedCopy::Add(Tensor& dst, const Tensor& src) {
  const bool plain = dst.device().is_cuda() && src.device() == dst.device() &&
                     (device_ < 0 || dst.device().index == device_) &&
                     src.dtype() == dst.dtype() &&
                     src.num_elements() == dst.num_elements() &&
                     !src.HasBf16Forms() && !dst.HasBf16Forms();
  if (!plain) return dst.CopyFrom(src);
  return Defer(dst, src, dst.device().index);
}

absl::Status BatchedCopy::CheckHostCopy(const Tensor& gpu, const Tensor& host,
                                        const char* what) const {
  // Bytes as they are: no bfloat16 form to keep in step (Add's rule).
  if (gpu.device().is_cuda() && host.device().is_cpu() &&
      gpu.bytes() == host.bytes() && !gpu.HasBf16Forms() &&
      !host.HasBf16Forms() && (device_ < 0 || gpu.device().index == device_)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "BatchedCopy: cannot ", what, " between ", host.DebugString(), " and ",
      gpu.DebugString(), " in a batch for gpu:", device_));
}

absl::Status BatchedCopy::AddUpload(const Tensor& dst, const Tensor& host,
                                    std::shared_ptr<cuda::Event> done,
                                    std::shared_ptr<bool> unflushed) {
  MT_RETURN_IF_ERROR(CheckHostCopy(dst, host, "upload"));
  MT_RETURN_IF_ERROR(Defer(dst, host, dst.device().index));
  *unflushed = true;
  uploads_.push_back({host, std::move(done), std::move(unflushed)});
  return absl::OkStatus();
}

absl::Status BatchedCopy::AddReadback(const Tensor& host, const Tensor& src) {
  MT_RETURN_IF_ERROR(CheckHostCopy(src, host, "read back"));
  return Defer(host, src, src.device().index);
}

absl::Status BatchedCopy::Defer(const Tensor& dst, const Tensor& src,
                                int device) {
  device_ = device;
  if (dst.bytes() == 0) return absl::OkStatus();
  segments_.push_back({.dst = dst.raw_data(),
                       .src = src.raw_data(),
                       .bytes = static_cast<int64_t>(dst.bytes())});
  held_.push_back(dst);
  held_.push_back(src);
  return absl::OkStatus();
}

absl::Status BatchedCopy::Flush() {
  const std::vector<cuda::CopySegment> segments = std::exchange(segments_, {});
  const std::vector<Upload> uploads = std::exchange(uploads_, {});
  std::vector<Tensor> held = std::exchange(held_, {});
  absl::Status status = segments.empty()
                            ? absl::OkStatus()
                            : cuda::CopySegments(segments, device_);
  // Every event, even after a failed launch: an earlier launch of this
  // batch may still be reading its upload's host values.
  for (const Upload& u : uploads) {
    absl::Status recorded = u.done->Record(cuda::CurrentStream());
    *u.unflushed = false;
    if (status.ok()) status = recorded;
  }
  held.clear();
  for (const Upload& u : uploads) {
    // Its StagedTensor is gone, and it would wait for this copy before
    // giving the pinned memory back: so does the batch.
    if (u.host.IsExclusive()) {
      absl::Status waited = u.done->Synchronize();
      if (status.ok()) status = waited;
    }
  }
  return status;
}

}  // namespace mirrortrain
