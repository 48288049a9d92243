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
      calls_(replicas, 0),
      events_(replicas) {}

absl::Status LocalAllReduce::AllReduce(int replica, ReduceOp op,
                                       Tensor& buffer) {
  const std::string what = absl::StrCat("all-reduce #", calls_[replica]++, " (",
                                        buffer.DebugString(), ")");
  if (buffer.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(const bool capturing,
                        cuda::StreamIsCapturing(cuda::CurrentStream()));
    if (capturing) return CapturedAllReduce(replica, op, buffer, what);
    // Other replicas' kernels will read this buffer: it must be complete,
    // not just enqueued, before this replica says it is posted.
    MT_RETURN_IF_ERROR(cuda::Synchronize(buffer.device().index));
  }
  posted_[replica] = &buffer;
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Everyone's buffer is posted. From here on every replica reads and
  // writes the others' buffers, so none may return (and let its buffer be
  // freed) before all are done: errors wait for the Join too.
  absl::Status status = SumMySlice(replica, op);
  // The slice is summed when the call returns.
  if (status.ok() && buffer.device().is_cuda()) {
    status = cuda::Synchronize(buffer.device().index);
  }
  barrier_.Join();
  if (!status.ok()) barrier_.Abort(status);
  return status;
}

absl::Status LocalAllReduce::CapturedAllReduce(int replica, ReduceOp op,
                                               Tensor& buffer,
                                               const std::string& what) {
  const cuda::StreamHandle stream = cuda::CurrentStream();
  std::unique_ptr<CaptureEvents>& mine = events_[replica];
  absl::Status posted = [&]() -> absl::Status {
    if (mine == nullptr) {
      const int device = buffer.device().index;
      MT_ASSIGN_OR_RETURN(cuda::Event p, cuda::Event::Create(device));
      MT_ASSIGN_OR_RETURN(cuda::Event s, cuda::Event::Create(device));
      mine = std::make_unique<CaptureEvents>(
          CaptureEvents{std::move(p), std::move(s)});
    }
    return mine->posted.Record(stream);
  }();
  if (!posted.ok()) {
    // The peers must not pair this replica's next collective with this one.
    barrier_.Abort(posted);
    return posted;
  }
  posted_[replica] = &buffer;
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Every replica's events exist and are recorded for this collective. A
  // replica re-records its events only in its next collective, after the
  // next Wait, which needs every peer to be done waiting on them here.
  absl::Status status;
  for (int r = 0; r < replicas_ && status.ok(); ++r) {
    if (r != replica) status = events_[r]->posted.MakeStreamWait(stream);
  }
  if (status.ok()) status = SumMySlice(replica, op);
  if (status.ok()) status = mine->summed.Record(stream);
  barrier_.Join();
  // Every slice sum is recorded (or its replica failed and aborts): this
  // replica's later work waits for all of them, as its buffer holds their
  // results.
  for (int r = 0; r < replicas_ && status.ok(); ++r) {
    if (r != replica) status = events_[r]->summed.MakeStreamWait(stream);
  }
  if (!status.ok()) barrier_.Abort(status);
  return status;
}

absl::Status LocalAllReduce::SumMySlice(int replica, ReduceOp op) {
  const Tensor& mine = *posted_[replica];
  for (int r = 0; r < replicas_; ++r) {
    if (posted_[r]->dtype() != mine.dtype() ||
        posted_[r]->num_elements() != mine.num_elements() ||
        posted_[r]->device() != mine.device()) {
      // Every replica sees the same mismatch, so none sums.
      return absl::InternalError(absl::StrCat(
          "all-reduce: replica ", r, " posted ", posted_[r]->DebugString(),
          " but replica ", replica, " posted ", mine.DebugString()));
    }
  }
  const int64_t n = mine.num_elements();
  const int64_t begin = SliceStart(n, replica, replicas_);
  const int64_t end = SliceStart(n, replica + 1, replicas_);
  const bool mean = op == ReduceOp::kMean;
  if (mine.device().is_cuda()) {
    // Replicas sharing one GPU: the same slice sum as a kernel.
    std::vector<void*> buffers;
    for (Tensor* t : posted_) buffers.push_back(t->raw_data());
    return DeviceSliceSum(mine.dtype(), buffers, begin, end, mean,
                          mine.device().index);
  }
  MT_DISPATCH_ALL(mine.dtype(), T, SumSlice<T>(posted_, begin, end, mean));
  return absl::OkStatus();
}

}  // namespace mirrortrain::distribute
