#include "distribute/local_all_reduce.h"

#include "absl/strings/str_cat.h"
#include "distribute/device_slice_sum.h"
#include "tensor/cuda/cuda_backend.h"
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

// Where replica r's slice of n elements starts: equal shares cut at
// multiples of 64 elements, so every slice of a GPU buffer starts 256-byte
// aligned and the device sum can use 16-byte accesses.
int64_t SliceStart(int64_t n, int r, int replicas) {
  if (r >= replicas) return n;
  return n * r / replicas / 64 * 64;
}

}  // namespace

LocalAllReduce::LocalAllReduce(int replicas, std::chrono::milliseconds watchdog)
    : replicas_(replicas),
      barrier_(replicas, watchdog),
      posted_(replicas, nullptr),
      calls_(replicas, 0) {}

absl::Status LocalAllReduce::AllReduce(int replica, ReduceOp op,
                                       Tensor& buffer) {
  const bool on_gpu = buffer.device().is_cuda();
  if (on_gpu) {
    // Other replicas' kernels will read this buffer: it must be complete,
    // not just enqueued, before this replica says it is posted.
    MT_RETURN_IF_ERROR(cuda::Synchronize(buffer.device().index));
  }
  const std::string what = absl::StrCat("all-reduce #", calls_[replica]++, " (",
                                        buffer.DebugString(), ")");
  posted_[replica] = &buffer;
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Everyone's buffer is posted and stays untouched until the last barrier.
  const Tensor& mine = *posted_[replica];
  for (int r = 0; r < replicas_; ++r) {
    if (posted_[r]->dtype() != mine.dtype() ||
        posted_[r]->num_elements() != mine.num_elements() ||
        posted_[r]->device() != mine.device()) {
      absl::Status mismatch = absl::InternalError(absl::StrCat(
          "all-reduce: replica ", r, " posted ", posted_[r]->DebugString(),
          " but replica ", replica, " posted ", mine.DebugString()));
      barrier_.Abort(mismatch);
      return mismatch;
    }
  }
  const int64_t n = mine.num_elements();
  const int64_t begin = SliceStart(n, replica, replicas_);
  const int64_t end = SliceStart(n, replica + 1, replicas_);
  const bool mean = op == ReduceOp::kMean;
  if (on_gpu) {
    // Replicas sharing one GPU: the same slice sum as a kernel, finished
    // before the completion barrier.
    std::vector<void*> buffers;
    for (Tensor* t : posted_) buffers.push_back(t->raw_data());
    absl::Status s = DeviceSliceSum(mine.dtype(), buffers, begin, end, mean,
                                    mine.device().index);
    if (s.ok()) s = cuda::Synchronize(mine.device().index);
    if (!s.ok()) {
      barrier_.Abort(s);
      return s;
    }
  } else {
    MT_DISPATCH_ALL(mine.dtype(), T, SumSlice<T>(posted_, begin, end, mean));
  }
  // No replica may reuse its buffer (or post the next one) before all
  // slices are written.
  return barrier_.Wait(replica, absl::StrCat(what, ", completion"));
}

}  // namespace mirrortrain::distribute
