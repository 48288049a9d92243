// train.cuda_graph: a GPU replica's step recorded once and replayed.
//
// The step's host half runs before every replay, outside the graph: the
// dropout seed, the optimizer's parameters and the EMA's decay are staged
// (StagedTensor) where the recorded kernels read them, and the shard is
// copied into the graph's fixed input buffers. Everything the graph
// allocates comes from its own memory pool, so eager work between replays
// (evaluation, checkpoints, an epoch's short last batch) never gets memory
// the graph writes. The replay is then one launch on the replica's stream.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

// Ends a capture that is still open when the scope is left early (an
// error return or an exception), so the stream is usable again.
class CaptureScope {
 public:
  explicit CaptureScope(int device) : device_(device) {}
  ~CaptureScope() {
    if (open_) cuda::CudaGraph::EndCapture(device_).status().IgnoreError();
  }
  absl::Status Begin() {
    MT_RETURN_IF_ERROR(cuda::CudaGraph::BeginCapture(device_));
    open_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<cuda::CudaGraph> End() {
    open_ = false;
    return cuda::CudaGraph::EndCapture(device_);
  }

 private:
  const int device_;
  bool open_ = false;
};

}  // namespace

absl::Status Trainer::GraphedReplicaStep(distribute::ReplicaContext& ctx,
                                         absl::Span<const Batch> micro_batches,
                                         int64_t step) {
  Replica& r = replicas_[ctx.replica_id()];
  if (r.graph == nullptr) r.graph = std::make_unique<GraphedStep>();
  GraphedStep& g = *r.graph;
  // Warm-up, a failed capture, and batches of another size (an epoch's
  // short last one) run eagerly; the graph has the global batch's shape.
  if (g.eager_steps < kCudaGraphWarmupSteps || !g.failure.empty() ||
      micro_batches[0].labels.dim(0) != config_.data.global_batch_size) {
    g.eager_steps = std::min(g.eager_steps + 1, kCudaGraphWarmupSteps);
    return EagerReplicaStep(ctx, micro_batches, step);
  }
  MT_ASSIGN_OR_RETURN(const ShardInputs in,
                      ReplicaShard(ctx, micro_batches[0]));
  if (!g.images.defined()) {
    const Device device = ctx.device();
    MT_ASSIGN_OR_RETURN(
        g.images, Tensor::Empty(in.images.dtype(), in.images.shape(), device));
    MT_ASSIGN_OR_RETURN(
        g.labels, Tensor::Empty(in.labels.dtype(), in.labels.shape(), device));
    MT_ASSIGN_OR_RETURN(g.step_seed,
                        StagedTensor::Create(DType::kI64, {1}, device));
  }
  // The host half of the step.
  MT_ASSIGN_OR_RETURN(const Tensor seed, g.step_seed.Host());
  *seed.data<int64_t>() = static_cast<int64_t>(StepSeed(config_.seed, step));
  MT_RETURN_IF_ERROR(g.step_seed.Upload());
  const int64_t iterations = r.optimizer->iterations();
  MT_RETURN_IF_ERROR(r.optimizer->StageUpdate(r.model->trainable_variables()));
  if (r.ema) MT_RETURN_IF_ERROR(r.ema->Stage(iterations + 1));
  MT_RETURN_IF_ERROR(g.images.CopyFrom(in.images));
  MT_RETURN_IF_ERROR(g.labels.CopyFrom(in.labels));
  const int64_t ema_generation = r.ema ? r.ema->staging_generation() : 0;
  if (g.optimizer_generation != r.optimizer->staging_generation() ||
      g.ema_generation != ema_generation) {
    // The tables the graph would read were reallocated (or nothing is
    // captured yet). An earlier graph's pool stays reserved.
    g.graph = cuda::CudaGraph();
    const absl::Status captured = CaptureStep(ctx, r, micro_batches, step);
    if (!captured.ok()) {
      // Recording ran nothing and changed no state the eager step reads.
      g.failure = std::string(captured.message());
      return EagerReplicaStep(ctx, micro_batches, step);
    }
    g.optimizer_generation = r.optimizer->staging_generation();
    g.ema_generation = ema_generation;
  }
  MT_RETURN_IF_ERROR(g.graph.Launch());
  r.optimizer->set_iterations(iterations + 1);
  r.loss = g.loss;
  return absl::OkStatus();
}

absl::Status Trainer::CaptureStep(distribute::ReplicaContext& ctx, Replica& r,
                                  absl::Span<const Batch> micro_batches,
                                  int64_t step) {
  GraphedStep& g = *r.graph;
  g.memory_pool = cuda::NewGraphMemoryPoolId();
  const int64_t iterations = r.optimizer->iterations();
  absl::Status recorded;
  absl::StatusOr<cuda::CudaGraph> graph;
  {
    cuda::ScopedGraphMemoryPool pool(g.memory_pool);
    CaptureScope capture(ctx.device().index);
    MT_RETURN_IF_ERROR(capture.Begin());
    recorded = [&]() -> absl::Status {
      MT_ASSIGN_OR_RETURN(std::vector<Tensor> grads,
                          ComputeGradients(ctx, r, micro_batches, step,
                                           StepSeed(config_.seed, step), &g));
      return ApplyUpdate(r, std::move(grads), /*staged=*/true);
    }();
    graph = capture.End();
  }
  // Recording ran nothing: the update the optimizer counted is the replay's.
  r.optimizer->set_iterations(iterations);
  MT_RETURN_IF_ERROR(recorded);
  MT_RETURN_IF_ERROR(graph.status());
  g.graph = *std::move(graph);
  g.loss = r.loss;
  return absl::OkStatus();
}

void Trainer::ReportCudaGraphFailures(int64_t step) {
  for (Replica& r : replicas_) {
    if (r.graph == nullptr || r.graph->failure.empty() ||
        r.graph->failure_reported) {
      continue;
    }
    r.graph->failure_reported = true;
    if (progress_ == nullptr) continue;
    progress_->Message(
        absl::StrCat("train.cuda_graph: eager steps: capturing "
                     "step ",
                     step + 1, " failed: ", r.graph->failure));
  }
}

}  // namespace mirrortrain::trainer
