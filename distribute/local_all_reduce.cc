#include "distribute/local_all_reduce.h"

#include "absl/strings/str_cat.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

template <typename T>
void SumSlice(const std::vector<Tensor*>& buffers, int64_t begin, int64_t end,
              bool mean) {
  const int n = static_cast<int>(buffers.size());
  T* first = buffers[0]->data<T>();
  for (int64_t i = begin; i < end; ++i) {
    T acc = first[i];
    for (int r = 1; r < n; ++r) acc += buffers[r]->data<T>()[i];
    if (mean) acc /= static_cast<T>(n);
    for (int r = 0; r < n; ++r) buffers[r]->data<T>()[i] = acc;
  }
}

}  // namespace

LocalAllReduce::LocalAllReduce(int replicas, std::chrono::milliseconds watchdog)
    : replicas_(replicas),
      barrier_(replicas, watchdog),
      posted_(replicas, nullptr),
      calls_(replicas, 0) {}

absl::Status LocalAllReduce::AllReduce(int replica, ReduceOp op,
                                       Tensor& buffer) {
  if (!buffer.device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        "local all-reduce of device memory (", buffer.DebugString(),
        ") needs the CUDA backend's device all-reduce"));
  }
  const std::string what = absl::StrCat("all-reduce #", calls_[replica]++, " (",
                                        buffer.DebugString(), ")");
  posted_[replica] = &buffer;
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Everyone's buffer is posted and stays untouched until the last barrier.
  const Tensor& mine = *posted_[replica];
  for (int r = 0; r < replicas_; ++r) {
    if (posted_[r]->dtype() != mine.dtype() ||
        posted_[r]->num_elements() != mine.num_elements()) {
      absl::Status mismatch = absl::InternalError(absl::StrCat(
          "all-reduce: replica ", r, " posted ", posted_[r]->DebugString(),
          " but replica ", replica, " posted ", mine.DebugString()));
      barrier_.Abort(mismatch);
      return mismatch;
    }
  }
  const int64_t n = mine.num_elements();
  const int64_t begin = n * replica / replicas_;
  const int64_t end = n * (replica + 1) / replicas_;
  const bool mean = op == ReduceOp::kMean;
  MT_DISPATCH_ALL(mine.dtype(), T, SumSlice<T>(posted_, begin, end, mean));
  // No replica may reuse its buffer (or post the next one) before all
  // slices are written.
  return barrier_.Wait(replica, absl::StrCat(what, ", completion"));
}

}  // namespace mirrortrain::distribute
