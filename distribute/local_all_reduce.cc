#include "distribute/local_all_reduce.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "distribute/device_slice_sum.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/ops/op_util.h"
#include "tensor/ordered_sum.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

// The sum in replica order, written to every replica.
template <typename T>
void SumSegment(const SliceSegment& segment, bool mean) {
  std::vector<T*> at;
  for (void* p : segment.at) at.push_back(static_cast<T*>(p));
  OrderedSum<T>({at.data(), at.size()}, segment.n, mean, at);
}

// Where replica r's slice of n elements starts: equal shares cut at
// multiples of 64 elements, so every slice of one GPU buffer starts
// 256-byte aligned and the device sum can use 16-byte accesses (a slice
// that starts inside one of a list's tensors may not be; the device sum
// then takes the elements up to the next 16 bytes alone).
int64_t SliceStart(int64_t n, int r, int replicas) {
  if (r >= replicas) return n;
  return n * r / replicas / 64 * 64;
}

int64_t TotalElements(absl::Span<const Tensor> tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.num_elements();
  return n;
}

std::string Describe(absl::Span<const Tensor> tensors) {
  if (tensors.size() == 1) return tensors[0].DebugString();
  std::string shapes;
  for (const Tensor& t : tensors) {
    absl::StrAppend(&shapes, shapes.empty() ? "" : ", ",
                    ShapeToString(t.shape()));
  }
  return absl::StrCat(tensors.size(), " tensors of ", TotalElements(tensors),
                      " elements (", shapes, ")");
}

// Elements [begin, end) of the replicas' lists (each taken as one buffer,
// all of `element_size` bytes) as runs that are contiguous in every
// replica's memory: cut wherever any replica's tensor ends.
std::vector<SliceSegment> Segments(absl::Span<const absl::Span<Tensor>> posted,
                                   int64_t begin, int64_t end,
                                   size_t element_size) {
  struct Cursor {
    size_t tensor = 0;
    int64_t offset = 0;  // Elements into that tensor.
  };
  std::vector<Cursor> at(posted.size());
  for (size_t r = 0; r < posted.size(); ++r) {
    at[r].offset = begin;
    // Past every tensor that ends at or before `begin` (and empty ones).
    while (at[r].tensor < posted[r].size() &&
           at[r].offset >= posted[r][at[r].tensor].num_elements()) {
      at[r].offset -= posted[r][at[r].tensor].num_elements();
      ++at[r].tensor;
    }
  }
  std::vector<SliceSegment> segments;
  for (int64_t position = begin; position < end;) {
    SliceSegment segment;
    segment.n = end - position;
    for (size_t r = 0; r < posted.size(); ++r) {
      const Tensor& t = posted[r][at[r].tensor];
      segment.n = std::min(segment.n, t.num_elements() - at[r].offset);
      segment.at.push_back(static_cast<char*>(t.raw_data()) +
                           at[r].offset * element_size);
    }
    for (size_t r = 0; r < posted.size(); ++r) {
      at[r].offset += segment.n;
      while (at[r].tensor < posted[r].size() &&
             at[r].offset == posted[r][at[r].tensor].num_elements()) {
        at[r].offset = 0;
        ++at[r].tensor;
      }
    }
    position += segment.n;
    segments.push_back(std::move(segment));
  }
  return segments;
}

}  // namespace

LocalAllReduce::LocalAllReduce(int replicas, std::chrono::milliseconds watchdog)
    : replicas_(replicas),
      barrier_(replicas, watchdog),
      posted_(replicas),
      cuts_(replicas, ListCuts::kAny),
      calls_(replicas, 0),
      events_(replicas),
      shared_gpu_(replicas) {}

absl::Status LocalAllReduce::AllReduceList(int replica, ReduceOp op,
                                           absl::Span<Tensor> tensors,
                                           ListCuts cuts) {
  const std::string what = absl::StrCat("all-reduce #", calls_[replica]++, " (",
                                        Describe(tensors), ")");
  // Nothing to sum (every replica must agree; SumMySlice checks): no
  // device work and no events, even while recording.
  const bool on_gpu =
      TotalElements(tensors) > 0 && tensors[0].device().is_cuda();
  posted_[replica] = tensors;
  cuts_[replica] = cuts;
  if (on_gpu) {
    const int device = tensors[0].device().index;
    absl::StatusOr<bool> capturing =
        cuda::StreamIsCapturing(cuda::CurrentStream());
    if (capturing.ok() && *capturing) {
      return CapturedAllReduce(replica, op, device, what);
    }
    // Other replicas' kernels will read these buffers: they must be
    // complete, not just enqueued, before this replica says they are posted.
    absl::Status ready = capturing.status();
    if (ready.ok()) ready = cuda::Synchronize(device);
    if (!ready.ok()) {
      // The peers must not wait for a replica that will not post.
      barrier_.Abort(ready);
      return ready;
    }
  }
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Everyone's buffer is posted. From here on every replica reads and
  // writes the others' buffers, so none may return (and let its buffer be
  // freed) before all are done: errors wait for the Join too.
  absl::Status status = SumMySlice(replica, op);
  // The slice is summed when the call returns.
  if (status.ok() && on_gpu) {
    status = cuda::Synchronize(tensors[0].device().index);
  }
  barrier_.Join();
  if (!status.ok()) barrier_.Abort(status);
  return status;
}

absl::Status LocalAllReduce::CapturedAllReduce(int replica, ReduceOp op,
                                               int device,
                                               const std::string& what) {
  MT_RETURN_IF_ERROR(RecordPoint(replica, device, &ReplicaEvents::posted));
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Every replica's events exist and are recorded for this collective. A
  // replica re-records its events only in its next collective, after the
  // next Wait, which needs every peer to be done waiting on them here.
  // Checked before any peer's events are used: a peer that posted nothing
  // recorded none.
  absl::Status status = CheckPosted(replica);
  if (status.ok()) status = WaitForPeers(replica, &ReplicaEvents::posted);
  if (status.ok()) status = SumMySlice(replica, op);
  if (status.ok()) {
    status = events_[replica]->summed.Record(cuda::CurrentStream());
  }
  barrier_.Join();
  // Every slice sum is recorded (or its replica failed and aborts): this
  // replica's later work waits for all of them, as its buffers hold their
  // results.
  if (status.ok()) status = WaitForPeers(replica, &ReplicaEvents::summed);
  if (!status.ok()) barrier_.Abort(status);
  return status;
}

absl::Status LocalAllReduce::RecordPoint(int replica, int device,
                                         cuda::Event ReplicaEvents::*which) {
  absl::Status status = [&]() -> absl::Status {
    std::unique_ptr<ReplicaEvents>& mine = events_[replica];
    if (mine == nullptr) {
      MT_ASSIGN_OR_RETURN(cuda::Event posted, cuda::Event::Create(device));
      MT_ASSIGN_OR_RETURN(cuda::Event summed, cuda::Event::Create(device));
      MT_ASSIGN_OR_RETURN(cuda::Event read, cuda::Event::Create(device));
      mine = std::make_unique<ReplicaEvents>(
          ReplicaEvents{std::move(posted), std::move(summed), std::move(read)});
    }
    return ((*mine).*which).Record(cuda::CurrentStream());
  }();
  // The peers must not wait for a replica that will not come, nor pair its
  // next collective with this one.
  if (!status.ok()) barrier_.Abort(status);
  return status;
}

absl::Status LocalAllReduce::WaitForPeers(
    int replica, cuda::Event ReplicaEvents::*which) const {
  absl::Status status;
  for (int r = 0; r < replicas_ && status.ok(); ++r) {
    if (r != replica) {
      status = ((*events_[r]).*which).MakeStreamWait(cuda::CurrentStream());
    }
  }
  return status;
}

absl::StatusOr<std::vector<std::vector<Tensor>>> LocalAllReduce::Share(
    int replica, absl::Span<Tensor> tensors) {
  const std::string what = absl::StrCat(
      "share, collective #", calls_[replica]++, " (", Describe(tensors), ")");
  posted_[replica] = tensors;
  shared_gpu_[replica].reset();
  for (const Tensor& t : tensors) {
    if (t.defined() && t.device().is_cuda()) {
      shared_gpu_[replica] = t.device().index;
      break;
    }
  }
  // On a GPU the replicas' streams are ordered by events, eagerly as while
  // recording, so the host never waits for the device here: the peers'
  // reads wait for this replica's work on its tensors so far.
  if (shared_gpu_[replica]) {
    MT_RETURN_IF_ERROR(
        RecordPoint(replica, *shared_gpu_[replica], &ReplicaEvents::posted));
  }
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Every replica's list is posted; each copies the others' tensors out
  // before the Join, so none may return (and let its list go) before.
  absl::StatusOr<std::vector<std::vector<Tensor>>> lists = SharedLists(replica);
  absl::Status status = lists.status();
  // SharedLists checked that every replica's tensors are on this GPU.
  if (status.ok() && shared_gpu_[replica]) {
    status = WaitForPeers(replica, &ReplicaEvents::posted);
  }
  barrier_.Join();
  if (!status.ok()) {
    barrier_.Abort(status);
    return status;
  }
  return lists;
}

absl::Status LocalAllReduce::EndShare(int replica) {
  const std::string what =
      absl::StrCat("end of a share, collective #", calls_[replica]++);
  if (shared_gpu_[replica]) {
    MT_RETURN_IF_ERROR(
        RecordPoint(replica, *shared_gpu_[replica], &ReplicaEvents::read));
  }
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, what));
  // Every replica's reads are enqueued before its `read` event: this
  // replica's later work, which may free (its stream's allocator reuses a
  // block at once) or overwrite its tensors, waits for them on the device.
  // A peer re-records its event only in its next EndShare, after the next
  // Share's rendezvous, which needs this replica to be done here.
  absl::Status status;
  if (shared_gpu_[replica])
    status = WaitForPeers(replica, &ReplicaEvents::read);
  if (!status.ok()) barrier_.Abort(status);
  return status;
}

absl::StatusOr<std::vector<std::vector<Tensor>>> LocalAllReduce::SharedLists(
    int replica) const {
  const absl::Span<Tensor> mine = posted_[replica];
  // Every replica runs the same checks over the same lists: all fail alike.
  std::vector<std::vector<Tensor>> lists(replicas_);
  for (int r = 0; r < replicas_; ++r) {
    const absl::Span<Tensor> theirs = posted_[r];
    bool same = theirs.size() == mine.size();
    for (size_t i = 0; same && i < mine.size(); ++i) {
      const Tensor& a = theirs[i];
      const Tensor& b = mine[i];
      same = a.defined() && b.defined() && a.shape() == b.shape() &&
             a.dtype() == b.dtype() && a.device().SameMemory(b.device()) &&
             b.device().SameMemory(mine[0].device());
    }
    if (!same) {
      return absl::InternalError(
          absl::StrCat("share: replica ", r, " posted ", Describe(theirs),
                       " but replica ", replica, " posted ", Describe(mine)));
    }
    lists[r].assign(theirs.begin(), theirs.end());
  }
  return lists;
}

absl::Status LocalAllReduce::CheckPosted(int replica) const {
  const absl::Span<Tensor> mine = posted_[replica];
  const int64_t n = TotalElements(mine);
  // Every replica runs the same checks over the same lists, so all see the
  // same mismatch and none sums.
  const Tensor* first = nullptr;
  for (int r = 0; r < replicas_; ++r) {
    bool same = TotalElements(posted_[r]) == n;
    if (std::find(cuts_.begin(), cuts_.end(), ListCuts::kSame) != cuts_.end()) {
      same &= posted_[r].size() == mine.size();
      for (size_t i = 0; same && i < mine.size(); ++i) {
        same &= posted_[r][i].shape() == mine[i].shape();
      }
    }
    for (const Tensor& t : posted_[r]) {
      if (first == nullptr) first = &t;
      same &= t.dtype() == first->dtype() && t.device() == first->device();
    }
    if (!same) {
      return absl::InternalError(absl::StrCat(
          "all-reduce: replica ", r, " posted ", Describe(posted_[r]),
          " but replica ", replica, " posted ", Describe(mine)));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalAllReduce::SumMySlice(int replica, ReduceOp op) {
  MT_RETURN_IF_ERROR(CheckPosted(replica));
  const int64_t n = TotalElements(posted_[replica]);
  if (n == 0) return absl::OkStatus();
  // Checked: every tensor of every list has this dtype and device.
  const Tensor& first = posted_[replica][0];
  const Device device = first.device();
  // Every replica fails alike, also one whose slice is empty.
  if (device.is_cuda()) {
    MT_RETURN_IF_ERROR(CheckReplicasPerGpu(replicas_, device.index));
  }
  const std::vector<SliceSegment> segments =
      Segments(posted_, SliceStart(n, replica, replicas_),
               SliceStart(n, replica + 1, replicas_), DTypeSize(first.dtype()));
  const bool mean = op == ReduceOp::kMean;
  if (device.is_cuda()) {
    // Replicas sharing one GPU: the same sums as kernels.
    return DeviceSliceSum(first.dtype(), segments, mean, device.index);
  }
  for (const SliceSegment& segment : segments) {
    MT_DISPATCH_ALL(first.dtype(), T, SumSegment<T>(segment, mean));
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::distribute
