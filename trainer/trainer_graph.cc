// train.cuda_graph: the step over every replica recorded once and replayed.
//
// The step's host half runs before every replay, outside the graph, on
// every replica (a Strategy::Enqueue): the dropout seed, the optimizer's
// parameters and the EMA's decay are staged (StagedTensor) where the recorded
// kernels read them, and the shard is copied into the graph's fixed input
// buffers, all of it as one kernel on a GPU (BatchedCopy). The strategy records
// the device half of all replicas, collectives included, into one graph
// (Strategy::CaptureRun) whose memory comes from its own pool, so eager work
// between replays (evaluation, checkpoints, an epoch's short last batch) never
// gets memory the graph writes. A replay is then one launch, and neither it nor
// the staging waits for the devices: the loop reads the step's loss once it is
// done (Trainer::PendStep), read back by the next replay's staging kernel (or
// by a copy of its own when no replay comes first).
#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/batched_copy.h"
#include "tensor/internal_switches.h"
#include "tensor/status_macros.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

// Whether a replay's inputs and staged values go as one BatchedCopy (on by
// default), for bench_gpu.sh to measure against a copy launch each.
std::atomic<bool> batched_step_copies{true};

MT_REGISTER(InternalSwitch,
            {.name = "batched_step_copies",
             .doc = "a replayed step's input copies and staged values' "
                    "uploads as one kernel, which also reads the last "
                    "replay's loss back; off: a copy launch each",
             .set = [](bool on) { batched_step_copies.store(on); }});

}  // namespace

bool Trainer::BatchedStepCopies() {
  return batched_step_copies.load(std::memory_order_relaxed);
}

absl::Status Trainer::GraphedStep(absl::Span<const Batch> micro_batches,
                                  int64_t step) {
  StepGraph& g = step_graph_;
  g.replayed = false;
  // Warm-up, a failed capture, and steps of another shape (an epoch's
  // short last batch, or its fewer last micro-batches) run eagerly; the
  // graph has train.accumulation_steps global batches.
  bool full = static_cast<int64_t>(micro_batches.size()) ==
              config_.train.accumulation_steps;
  for (const Batch& b : micro_batches) {
    full &= b.labels.dim(0) == config_.data.global_batch_size;
  }
  if (g.eager_steps < kCudaGraphWarmupSteps || !g.failure.empty() || !full) {
    g.eager_steps = std::min(g.eager_steps + 1, kCudaGraphWarmupSteps);
    // A replay's loss read back now, not behind this step (FinishStep
    // would wait for both).
    MT_RETURN_IF_ERROR(ReadBackDeferred());
    return EagerStep(micro_batches, step);
  }
  // Enqueued: the copies wait on the devices for the previous replay.
  if (absl::Status staged =
          strategy_->Enqueue([&](distribute::ReplicaContext& ctx) {
            return StageGraphInputs(ctx, micro_batches, step);
          });
      !staged.ok()) {
    // Some replicas may have queued read-backs into the pending steps'
    // host tensors that their fences do not cover: let them land before
    // anything drops those.
    SettleDevices();
    return staged;
  }
  // The pending steps whose loss the staging read back: done after it, on
  // every replica's stream, before this replay overwrites the graph's
  // outputs.
  for (PendingStep& p : pending_) {
    if (!p.deferred) continue;
    MT_ASSIGN_OR_RETURN(p.done, strategy_->Fence());
    p.MarkReadBack();
  }
  bool stale = !g.graph.defined();
  for (const Replica& r : replicas_) stale |= r.graph->stale;
  if (stale) {
    // The tables the graph would read were reallocated (or nothing is
    // captured yet). Dropping the old graph frees its pool's blocks.
    g.graph = cuda::CudaGraph();
    const absl::Status captured = CaptureStep(micro_batches, step);
    if (!captured.ok()) {
      // Recording ran nothing and changed no state the eager step reads.
      g.failure = std::string(captured.message());
      return EagerStep(micro_batches, step);
    }
  }
  MT_RETURN_IF_ERROR(strategy_->Replay(g.graph));
  g.replayed = true;
  for (Replica& r : replicas_) {
    r.optimizer->set_iterations(r.optimizer->iterations() + 1);
    r.loss = r.graph->loss;
    r.global_norm = r.graph->global_norm;
  }
  return absl::OkStatus();
}

absl::Status Trainer::StageGraphInputs(distribute::ReplicaContext& ctx,
                                       absl::Span<const Batch> micro_batches,
                                       int64_t step) {
  Replica& r = replicas_[ctx.replica_id()];
  if (r.graph == nullptr) r.graph = std::make_unique<GraphInputs>();
  GraphInputs& g = *r.graph;
  const Device device = ctx.device();
  if (!g.step_seed.device().defined()) {
    MT_ASSIGN_OR_RETURN(g.step_seed,
                        StagedTensor::Create(DType::kI64, {1}, device));
  }
  // The inputs' copies and the staged values' uploads as one kernel at the
  // end (on a GPU; on a CPU the copies run at once).
  BatchedCopy copies;
  BatchedCopy* const uploads =
      batched_step_copies.load(std::memory_order_relaxed) ? &copies : nullptr;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    MT_ASSIGN_OR_RETURN(const ShardInputs in,
                        ReplicaShard(ctx, micro_batches[i]));
    if (g.images.size() <= i) {
      MT_ASSIGN_OR_RETURN(
          Tensor images,
          Tensor::Empty(in.images.dtype(), in.images.shape(), device));
      MT_ASSIGN_OR_RETURN(
          Tensor labels,
          Tensor::Empty(in.labels.dtype(), in.labels.shape(), device));
      g.images.push_back(std::move(images));
      g.labels.push_back(std::move(labels));
    }
    if (uploads != nullptr) {
      MT_RETURN_IF_ERROR(copies.Add(g.images[i], in.images));
      MT_RETURN_IF_ERROR(copies.Add(g.labels[i], in.labels));
    } else {
      MT_RETURN_IF_ERROR(g.images[i].CopyFrom(in.images));
      MT_RETURN_IF_ERROR(g.labels[i].CopyFrom(in.labels));
    }
  }
  MT_ASSIGN_OR_RETURN(const Tensor seed, g.step_seed.Host());
  *seed.data<int64_t>() = static_cast<int64_t>(StepSeed(config_.seed, step));
  MT_RETURN_IF_ERROR(g.step_seed.Upload(uploads));
  MT_RETURN_IF_ERROR(
      r.optimizer->StageUpdate(r.model->trainable_variables(), uploads));
  if (r.ema) {
    MT_RETURN_IF_ERROR(r.ema->Stage(r.optimizer->iterations() + 1, uploads));
  }
  // The earlier replays' scalars that wait for it (PendStep), back with the
  // same kernel. Read-only here: the main thread waits in Enqueue.
  for (PendingStep& p : pending_) {
    if (!p.deferred) continue;
    for (const auto& [host, on_device] : p.Readbacks(ctx.replica_id())) {
      if (on_device->defined()) {
        MT_RETURN_IF_ERROR(copies.AddReadback(*host, *on_device));
      }
    }
  }
  MT_RETURN_IF_ERROR(copies.Flush());
  const int64_t ema_generation = r.ema ? r.ema->staging_generation() : 0;
  g.stale = g.optimizer_generation != r.optimizer->staging_generation() ||
            g.ema_generation != ema_generation;
  return absl::OkStatus();
}

absl::Status Trainer::CaptureStep(absl::Span<const Batch> micro_batches,
                                  int64_t step) {
  std::vector<int64_t> iterations;
  for (const Replica& r : replicas_) {
    iterations.push_back(r.optimizer->iterations());
  }
  absl::StatusOr<cuda::CudaGraph> graph = strategy_->CaptureRun(
      [&](distribute::ReplicaContext& ctx) -> absl::Status {
        Replica& r = replicas_[ctx.replica_id()];
        MT_ASSIGN_OR_RETURN(
            const StepGradients grads,
            ComputeGradients(ctx, r, micro_batches,
                             StepSeed(config_.seed, step), r.graph.get()));
        return ApplyMirroredUpdate(ctx, r, grads, /*staged=*/true);
      });
  // Recording ran nothing: the update the optimizers counted is the
  // replays'.
  for (size_t i = 0; i < replicas_.size(); ++i) {
    replicas_[i].optimizer->set_iterations(iterations[i]);
  }
  MT_RETURN_IF_ERROR(graph.status());
  step_graph_.graph = *std::move(graph);
  for (Replica& r : replicas_) {
    GraphInputs& g = *r.graph;
    g.loss = r.loss;
    g.global_norm = r.global_norm;
    g.optimizer_generation = r.optimizer->staging_generation();
    g.ema_generation = r.ema ? r.ema->staging_generation() : 0;
    g.stale = false;
  }
  return absl::OkStatus();
}

void Trainer::ReportCudaGraphFailure(int64_t step) {
  StepGraph& g = step_graph_;
  if (g.failure.empty() || g.failure_reported) return;
  g.failure_reported = true;
  if (progress_ == nullptr) return;
  progress_->Message(
      absl::StrCat("train.cuda_graph: eager steps: capturing "
                   "step ",
                   step + 1, " failed: ", g.failure));
}

}  // namespace mirrortrain::trainer
