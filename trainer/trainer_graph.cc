// train.cuda_graph: a GPU replica's step recorded once and replayed.
//
// The step's host half runs before every replay, outside the graph: the
// dropout seed, the optimizer's parameters and the EMA's decay are staged
// (StagedTensor) where the recorded kernels read them, and the shard is
// copied into the graph's fixed input buffers. Everything the graph
// allocates comes from its own memory pool, so eager work between replays
// (evaluation, checkpoints, an epoch's short last batch) never gets memory
// the graph writes. The replay is then one launch on the replica's stream.
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

absl::Status GraphError(int64_t step, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat("train.cuda_graph: capturing step ", step + 1,
                             " failed (train.cuda_graph: off trains without "
                             "graphs): ",
                             s.message()));
}

}  // namespace

absl::Status Trainer::GraphedReplicaStep(distribute::ReplicaContext& ctx,
                                         absl::Span<const Batch> micro_batches,
                                         int64_t step) {
  Replica& r = replicas_[ctx.replica_id()];
  if (r.graph == nullptr) r.graph = std::make_unique<GraphedStep>();
  GraphedStep& g = *r.graph;
  if (g.eager_steps < kCudaGraphWarmupSteps) {
    ++g.eager_steps;
    return EagerReplicaStep(ctx, micro_batches, step);
  }
  MT_ASSIGN_OR_RETURN(const ShardInputs in,
                      ReplicaShard(ctx, micro_batches[0]));
  if (g.images.defined() && (in.images.shape() != g.images.shape() ||
                             in.labels.shape() != g.labels.shape())) {
    return EagerReplicaStep(ctx, micro_batches, step);
  }
  if (!g.images.defined()) {
    const Device device = ctx.device();
    MT_ASSIGN_OR_RETURN(
        g.images, Tensor::Empty(in.images.dtype(), in.images.shape(), device));
    MT_ASSIGN_OR_RETURN(
        g.labels, Tensor::Empty(in.labels.dtype(), in.labels.shape(), device));
    MT_ASSIGN_OR_RETURN(g.step_seed,
                        StagedTensor::Create(DType::kI64, {1}, device));
    g.memory_pool = cuda::NewGraphMemoryPoolId();
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
  if (!g.graph.defined()) {
    MT_RETURN_IF_ERROR(CaptureStep(ctx, r, micro_batches, step));
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
  const int device = ctx.device().index;
  const int64_t iterations = r.optimizer->iterations();
  absl::Status recorded;
  absl::StatusOr<cuda::CudaGraph> graph;
  {
    cuda::ScopedGraphMemoryPool pool(g.memory_pool);
    MT_RETURN_IF_ERROR(GraphError(step, cuda::CudaGraph::BeginCapture(device)));
    recorded = [&]() -> absl::Status {
      MT_ASSIGN_OR_RETURN(std::vector<Tensor> grads,
                          ComputeGradients(ctx, r, micro_batches, step,
                                           StepSeed(config_.seed, step), &g));
      return ApplyUpdate(r, std::move(grads), /*staged=*/true);
    }();
    // Ended whatever happened, so the stream is usable again.
    graph = cuda::CudaGraph::EndCapture(device);
  }
  // Recording ran nothing: the update the optimizer counted is the replay's.
  r.optimizer->set_iterations(iterations);
  MT_RETURN_IF_ERROR(GraphError(step, recorded));
  MT_RETURN_IF_ERROR(GraphError(step, graph.status()));
  g.graph = *std::move(graph);
  g.loss = r.loss;
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
