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
                     src.dtype() == dst.dtype() &&
                     src.num_elements() == dst.num_elements() &&
                     !src.HasBf16Forms() && !dst.HasBf16Forms();
  if (!plain) return dst.CopyFrom(src);
  if (dst.bytes() == 0) return absl::OkStatus();
  return Defer(dst.device().index,
               {.dst = dst.raw_data(),
                .src = src.raw_data(),
                .bytes = static_cast<int64_t>(dst.bytes())});
}

absl::Status BatchedCopy::AddUpload(void* dst, const void* src, int64_t bytes,
                                    int device, cuda::Event* done) {
  MT_RETURN_IF_ERROR(Defer(device, {.dst = dst, .src = src, .bytes = bytes}));
  if (done != nullptr) events_.push_back(done);
  return absl::OkStatus();
}

absl::Status BatchedCopy::Defer(int device, cuda::CopySegment segment) {
  if (device != device_ && !segments_.empty()) MT_RETURN_IF_ERROR(Flush());
  device_ = device;
  segments_.push_back(segment);
  return absl::OkStatus();
}

absl::Status BatchedCopy::Flush() {
  std::vector<cuda::CopySegment> segments = std::exchange(segments_, {});
  std::vector<cuda::Event*> events = std::exchange(events_, {});
  if (segments.empty()) return absl::OkStatus();
  MT_RETURN_IF_ERROR(cuda::CopySegments(segments, device_));
  for (cuda::Event* e : events) {
    MT_RETURN_IF_ERROR(e->Record(cuda::CurrentStream()));
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain
