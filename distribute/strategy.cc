#include "distribute/strategy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

std::shared_future<absl::Status> ReplicaContext::AllReduceAsync(ReduceOp op,
                                                                Tensor buffer) {
  std::promise<absl::Status> done;
  done.set_value(AllReduce(op, absl::MakeSpan(&buffer, 1)));
  return done.get_future().share();
}

std::shared_future<absl::Status> ReplicaContext::PackAndAllReduceAsync(
    ReduceOp op, std::vector<Tensor> parts, Tensor buffer) {
  absl::Status packed = PackInto(parts, buffer);
  if (!packed.ok()) {
    std::promise<absl::Status> done;
    done.set_value(packed);
    return done.get_future().share();
  }
  return AllReduceAsync(op, std::move(buffer));
}

std::shared_future<absl::Status> ReplicaContext::AllReduceListAsync(
    ReduceOp op, std::vector<Tensor> tensors) {
  std::promise<absl::Status> done;
  done.set_value(AllReduce(op, absl::MakeSpan(tensors)));
  return done.get_future().share();
}

absl::Status PackInto(absl::Span<const Tensor> parts, const Tensor& buffer) {
  if (parts.empty()) return absl::OkStatus();  // Nothing to pack.
  int64_t offset = 0;
  for (const Tensor& part : parts) {
    const int64_t n = part.num_elements();
    MT_ASSIGN_OR_RETURN(Tensor slot, buffer.SliceRows(offset, n));
    MT_RETURN_IF_ERROR(slot.CopyFrom(part));
    offset += n;
  }
  if (offset != buffer.num_elements()) {
    return absl::InternalError(absl::StrCat(
        "packed ", offset, " elements into ", buffer.DebugString()));
  }
  return absl::OkStatus();
}

namespace {

// How much an error says about its cause: another replica's failure passed
// on (Cancelled), an abort that failure caused (Aborted), or its own.
int CauseRank(const absl::Status& s) {
  if (absl::IsCancelled(s)) return 0;
  return absl::IsAborted(s) ? 1 : 2;
}

}  // namespace

absl::Status RootCause(absl::Span<const absl::Status> per_replica,
                       absl::string_view what) {
  absl::Status first;
  for (size_t r = 0; r < per_replica.size(); ++r) {
    const absl::Status& s = per_replica[r];
    if (s.ok()) continue;
    if (first.ok() || CauseRank(s) > CauseRank(first)) {
      first =
          absl::Status(s.code(), absl::StrCat(what, " ", r, ": ", s.message()));
    }
  }
  return first;
}

namespace {

absl::Status NotCaptured() {
  return absl::FailedPreconditionError(
      "this strategy's steps are not recorded into CUDA graphs");
}

}  // namespace

absl::Status Strategy::CanCaptureRuns() const { return NotCaptured(); }

absl::StatusOr<cuda::CudaGraph> Strategy::CaptureRun(const ReplicaFn&) {
  return NotCaptured();
}

absl::Status Strategy::Replay(const cuda::CudaGraph&) { return NotCaptured(); }

absl::Status DeviceFence::Wait() const {
  for (const cuda::Event& e : events_) MT_RETURN_IF_ERROR(e.Synchronize());
  return absl::OkStatus();
}

double Strategy::Reduce(ReduceOp op, absl::Span<const double> per_replica) {
  double sum = 0;
  for (double v : per_replica) sum += v;
  if (op == ReduceOp::kMean && !per_replica.empty()) {
    sum /= static_cast<double>(per_replica.size());
  }
  return sum;
}

absl::StatusOr<std::vector<std::vector<Tensor>>> ReplicaContext::Share(
    absl::Span<Tensor>) {
  return absl::UnimplementedError("these replicas do not share memory");
}

absl::Status ReplicaContext::EndShare() {
  return absl::UnimplementedError("these replicas do not share memory");
}

absl::StatusOr<std::vector<std::vector<Tensor>>> ReplicaContext::ShareGradients(
    GradientTape& tape, const Tensor& target, absl::Span<const Tensor> sources,
    absl::Span<const Tensor> accumulated) {
  // accumulated + gradient, as AllReduceGradients adds them
  // (AccumulateGradients checks the sizes).
  std::vector<Tensor> grads(accumulated.begin(), accumulated.end());
  MT_RETURN_IF_ERROR(AccumulateGradients(tape, target, sources, grads));
  MT_ASSIGN_OR_RETURN(const std::vector<std::vector<Tensor>> lists,
                      Share(absl::MakeSpan(grads)));
  std::vector<std::vector<Tensor>> terms(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    for (const std::vector<Tensor>& list : lists) terms[i].push_back(list[i]);
  }
  return terms;
}

ShardRange ReplicaContext::InputShard(int64_t rows) const {
  return ShardOf(rows, global_replica_id(), num_replicas_in_sync());
}

ShardRange ShardOf(int64_t batch, int replica, int replicas) {
  const int64_t base = batch / replicas, extra = batch % replicas;
  const int64_t begin = replica * base + std::min<int64_t>(replica, extra);
  return {begin, begin + base + (replica < extra ? 1 : 0)};
}

}  // namespace mirrortrain::distribute
