#include "tensor/ops/index_checks.h"

#include <bit>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

thread_local IndexCheckRecord* current_record = nullptr;
thread_local uint64_t next_site = 0;
thread_local const std::string* current_label = nullptr;

constexpr uint64_t kClean = ~uint64_t{0};

}  // namespace

absl::StatusOr<IndexCheckRecord> IndexCheckRecord::Create(Device device) {
  IndexCheckRecord r;
  MT_ASSIGN_OR_RETURN(
      r.record_, Tensor::Empty(DType::kI64, {internal::kRecordSlots}, device));
  // Clean at once, whatever stream reads it first.
  if (device.is_cuda()) {
    MT_RETURN_IF_ERROR(cuda::Memset(r.record_.raw_data(), 0xff,
                                    r.record_.bytes(), device.index));
    r.written_ = false;
    return r;
  }
  MT_RETURN_IF_ERROR(r.Reset());
  return r;
}

absl::Status IndexCheckRecord::Reset() {
  if (record_.device().is_cpu()) {
    if (written_) std::memset(record_.raw_data(), 0xff, record_.bytes());
    written_ = false;
    return absl::OkStatus();
  }
  MT_ASSIGN_OR_RETURN(const bool recording,
                      cuda::StreamIsCapturing(cuda::CurrentStream()));
  // Clean already, and no op can have written it since: nothing to clear,
  // unless the stream is being recorded. A recording holds the memset all
  // the same (its replays run the checked ops it records, and nothing
  // resets the record between them), and runs it at its replays, not now:
  // until then the record holds what it held. A clearing still pending
  // from an earlier Reset stays pending.
  clear_pending_ |= written_ || recording;
  if (!recording) written_ = false;
  return absl::OkStatus();
}

absl::Status IndexCheckRecord::ErrorIn(const Tensor& host_record) const {
  const int64_t* slot = host_record.data<int64_t>();
  const uint64_t key = static_cast<uint64_t>(slot[0]);
  if (key == kClean) return absl::OkStatus();
  const uint64_t site = key >> internal::kSiteShift;
  const int64_t position =
      static_cast<int64_t>(key & ((uint64_t{1} << internal::kSiteShift) - 1));
  const std::string label = site < labels_.size() ? labels_[site] : "";
  if (slot[3] == static_cast<int64_t>(internal::IndexCheckOp::kGather)) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, "Gather: index ", slot[1], " at position ",
                     position, " is out of range [0, ", slot[2], ")"));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%sCast: element %d is %.17g, which has no value in i%d", label, position,
      std::bit_cast<double>(slot[1]), slot[2]));
}

ScopedIndexCheckLabel::ScopedIndexCheckLabel(std::string label)
    : label_(std::move(label)),
      previous_(std::exchange(current_label, &label_)) {}

ScopedIndexCheckLabel::~ScopedIndexCheckLabel() { current_label = previous_; }

ScopedIndexChecks::ScopedIndexChecks(IndexCheckRecord* record)
    : previous_record_(std::exchange(current_record, record)),
      previous_site_(std::exchange(next_site, 0)) {}

ScopedIndexChecks::~ScopedIndexChecks() {
  current_record = previous_record_;
  next_site = previous_site_;
}

namespace internal {

absl::StatusOr<std::optional<IndexCheckSite>> NextIndexCheckSite(
    Device device, int64_t elements) {
  constexpr uint64_t kPositions = uint64_t{1} << kSiteShift;
  if (current_record == nullptr ||
      current_record->tensor().device() != device ||
      static_cast<uint64_t>(elements) >= kPositions ||
      next_site >= (~uint64_t{0} >> kSiteShift)) {
    return std::nullopt;
  }
  if (current_record->clear_pending_) {
    const Tensor& record = current_record->tensor();
    MT_RETURN_IF_ERROR(
        cuda::Memset(record.raw_data(), 0xff, record.bytes(), device.index));
    current_record->clear_pending_ = false;
  }
  current_record->written_ = true;
  std::vector<std::string>& labels = current_record->labels_;
  if (labels.size() <= next_site) labels.resize(next_site + 1);
  labels[next_site] = current_label != nullptr ? *current_label : "";
  return IndexCheckSite{
      static_cast<int64_t*>(current_record->tensor().raw_data()), next_site++};
}

void RecordOnHost(const IndexCheckSite& site, int64_t position, IndexCheckOp op,
                  int64_t value, int64_t bound) {
  const uint64_t key =
      (site.site << kSiteShift) | static_cast<uint64_t>(position);
  if (static_cast<uint64_t>(site.record[0]) <= key) return;
  site.record[0] = static_cast<int64_t>(key);
  site.record[1] = value;
  site.record[2] = bound;
  site.record[3] = static_cast<int64_t>(op);
}

}  // namespace internal
}  // namespace mirrortrain::ops
