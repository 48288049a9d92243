#include "trainer/trainer.h"

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "distribute/mirrored_variable.h"
#include "distribute/one_device_strategy.h"
#include "models/losses.h"
#include "models/metrics.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/index_checks.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/checkpoint_format.h"
#include "trainer/optim/optimizers.h"

namespace mirrortrain::trainer {
namespace {

// Evaluation batches: this many examples, or of sequences as many as hold
// about kEvalLabels labels (their logits are labels x classes).
constexpr int64_t kEvalBatch = 1000;
constexpr int64_t kEvalLabels = 8192;
// Test splits up to this size are copied to each evaluating GPU once, not
// batch by batch at every evaluation (Fashion-MNIST's: 31 MB of f32).
constexpr size_t kMaxTestBytesOnDevice = size_t{256} << 20;

// One replica's evaluation sums over its batches.
struct EvalSums {
  double loss = 0;    // Per-label losses (under the loss's keys).
  double plain = 0;   // The same unsmoothed, where `plain` is asked for.
  double metric = 0;  // The loss's metric summed (right labels: accuracy).
  double labels = 0;  // The labels counted: those unmasked, if masked.
  std::vector<double> metrics;  // The config's `metrics`' sums, in order.
};

// Adds the batch of host `logits` and `labels` to `sums`: summed losses
// are a "global batch" of 1. `mask`: the model's output mask (host), which
// weighs the labels (undefined: all count).
absl::Status AddEvalSums(const models::LossType& loss_type,
                         const Params& params,
                         absl::Span<const models::MetricType* const> metrics,
                         absl::Span<const MetricConfig> metric_params,
                         const Tensor& logits, const Tensor& labels,
                         const Tensor& mask, const Params* plain,
                         EvalSums& sums) {
  MT_ASSIGN_OR_RETURN(const Tensor loss,
                      loss_type.compute(logits, labels, mask, 1, params));
  sums.loss += loss.ScalarAt(0);
  if (plain != nullptr) {
    MT_ASSIGN_OR_RETURN(const Tensor xent,
                        loss_type.compute(logits, labels, mask, 1, *plain));
    sums.plain += xent.ScalarAt(0);
  }
  MT_ASSIGN_OR_RETURN(const double metric,
                      loss_type.metric_sum(logits, labels, mask));
  sums.metric += metric;
  sums.metrics.resize(metrics.size(), 0.0);
  for (size_t i = 0; i < metrics.size(); ++i) {
    MT_ASSIGN_OR_RETURN(
        const double sum,
        metrics[i]->sum(logits, labels, mask, metric_params[i].params));
    sums.metrics[i] += sum;
  }
  // compute() above has checked that the mask's elements divide the labels.
  double counted = static_cast<double>(labels.num_elements());
  if (mask.defined() && mask.num_elements() > 0) {
    // Each mask element weighs labels / mask elements of them.
    double kept = 0;
    for (int64_t i = 0; i < mask.num_elements(); ++i) kept += mask.ScalarAt(i);
    counted *= kept / static_cast<double>(mask.num_elements());
  }
  sums.labels += counted;
  return absl::OkStatus();
}

}  // namespace

Trainer::~Trainer() = default;

uint64_t Trainer::StepSeed(uint64_t seed, int64_t step, int worker) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1));
  z ^= 0xd1b54a32d192ed03ULL * static_cast<uint64_t>(worker);
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 29);
}

absl::StatusOr<double> Trainer::HostValue(const Tensor& t) {
  if (t.device().is_cpu()) return t.ScalarAt(0);
  MT_ASSIGN_OR_RETURN(const Tensor host, t.To(Device::Cpu()));
  return host.ScalarAt(0);
}

const std::vector<std::string>& Trainer::mask_warnings() const {
  return primary().model->mask_warnings();
}

int64_t Trainer::global_step() const {
  if (ps_) return clock().applied();
  return primary().optimizer->iterations();
}

std::vector<Variable*> Trainer::StateOf(const Replica& r) {
  std::vector<Variable*> state = r.model->variables();
  if (r.optimizer) {
    for (Variable* v : r.optimizer->SlotVariables()) state.push_back(v);
  }
  if (r.ema) {
    for (Variable* v : r.ema->ShadowVariables()) state.push_back(v);
  }
  return state;
}

std::vector<Variable*> Trainer::ReplicaState(int replica) const {
  return StateOf(replicas_[replica]);
}

std::vector<Variable*> Trainer::TrainingState() const {
  return StateOf(primary());
}

absl::Status Trainer::CheckReplicasIdentical() const {
  absl::Status local = absl::OkStatus();
  for (const distribute::MirroredVariable& v : mirrored_) {
    local = v.CheckIdentical();
    if (!local.ok()) break;
  }
  if (processes_->size() == 1) return local;
  // Across processes: every process against the chief's copy, bytewise.
  // Every process makes all the broadcasts, whatever it found, so the
  // caller's agreement on the result meets them all there.
  absl::Status across = absl::OkStatus();
  for (const distribute::MirroredVariable& v : mirrored_) {
    // A copy that fails here is this process's finding too: the broadcast
    // still takes the variable's bytes.
    absl::StatusOr<Tensor> mine = v.value().To(Device::Cpu());
    Tensor chiefs = Tensor::HostEmpty(v.value().dtype(), v.value().shape());
    if (mine.ok()) {
      std::memcpy(chiefs.raw_data(), mine->raw_data(), chiefs.bytes());
    } else {
      std::memset(chiefs.raw_data(), 0, chiefs.bytes());
      if (across.ok()) across = mine.status();
    }
    MT_RETURN_IF_ERROR(processes_->Broadcast(
        chiefs.raw_data(), static_cast<int64_t>(chiefs.bytes()), 0,
        "the replica check"));
    if (across.ok() &&
        std::memcmp(mine->raw_data(), chiefs.raw_data(), mine->bytes()) != 0) {
      across = absl::InternalError(absl::StrCat(v.name(), " of process ",
                                                processes_->rank(),
                                                " differs from process 0's"));
    }
  }
  return local.ok() ? across : local;
}

absl::Status Trainer::ClipGradients(std::vector<Tensor>& grads,
                                    Tensor* global_norm) const {
  const OptimizerConfig& o = config_.optimizer;
  if (o.clip_value) {
    for (Tensor& g : grads) {
      MT_ASSIGN_OR_RETURN(g,
                          ops::ClipByValue(g, -*o.clip_value, *o.clip_value));
    }
  }
  if (o.clip_norm) {
    for (Tensor& g : grads) {
      MT_ASSIGN_OR_RETURN(g, ops::ClipByNorm(g, *o.clip_norm));
    }
  }
  if (o.clip_global_norm) {
    MT_ASSIGN_OR_RETURN(ops::GlobalNormClipped clipped,
                        ops::ClipByGlobalNorm(grads, *o.clip_global_norm));
    grads = std::move(clipped.tensors);
    *global_norm = std::move(clipped.global_norm);
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckGlobalNorm(const Tensor& global_norm,
                                      absl::string_view where) {
  if (!global_norm.defined()) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(const double norm, HostValue(global_norm));
  if (std::isfinite(norm)) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("non-finite gradient global norm (", norm, ") ", where));
}

absl::Status Trainer::AddL2Regularization(const std::vector<Variable*>& vars,
                                          std::vector<Tensor>& grads) const {
  const double l2 = config_.optimizer.l2_regularization;
  if (l2 == 0) return absl::OkStatus();
  for (size_t i = 0; i < vars.size(); ++i) {
    // Biases and normalization parameters are not decayed: rank 1, or
    // named a bias (attention's query/key/value biases are [heads, key_dim]).
    if (vars[i]->shape().size() < 2 ||
        absl::EndsWith(vars[i]->name(), "/bias")) {
      continue;
    }
    MT_ASSIGN_OR_RETURN(Tensor decay, ops::Scale(vars[i]->value(), l2));
    MT_ASSIGN_OR_RETURN(grads[i], ops::Add(grads[i], decay));
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::ShardInputs> Trainer::ReplicaShard(
    distribute::ReplicaContext& ctx, const Batch& batch) const {
  ShardInputs in;
  in.shard = ctx.InputShard(batch.labels.dim(0));
  if (!batch.device_shards.empty()) {
    // Already on the GPU (DeviceStager): wait for the copy on the GPU only.
    const DeviceShard& staged = batch.device_shards[ctx.replica_id()];
    MT_RETURN_IF_ERROR(staged.ready->MakeStreamWait(cuda::CurrentStream()));
    in.images = staged.images;
    in.labels = staged.labels;
    return in;
  }
  const int64_t rows = in.shard.end - in.shard.begin;
  MT_ASSIGN_OR_RETURN(in.images, batch.images.SliceRows(in.shard.begin, rows));
  MT_ASSIGN_OR_RETURN(in.labels, batch.labels.SliceRows(in.shard.begin, rows));
  MT_ASSIGN_OR_RETURN(in.images, in.images.To(ctx.device()));
  MT_ASSIGN_OR_RETURN(in.labels, in.labels.To(ctx.device()));
  return in;
}

absl::StatusOr<Tensor> Trainer::MaskedLoss(
    distribute::ReplicaContext& ctx, const Tensor& logits, const Tensor& labels,
    const Tensor& mask, int64_t micro_batches, double count_scale) const {
  // Keras's masked mean: the weighted sum over the unmasked labels' count,
  // here the count of the micro-batch's global batch (every replica's), so
  // the replicas' summed gradients are its gradient; micro-batches weigh
  // 1 / K each (Keras's gradient_accumulation_steps).
  const int64_t per_mask =
      mask.num_elements() > 0 ? labels.num_elements() / mask.num_elements() : 1;
  MT_ASSIGN_OR_RETURN(const Tensor sum, loss_->compute(logits, labels, mask,
                                                       micro_batches * per_mask,
                                                       config_.loss.params));
  MT_ASSIGN_OR_RETURN(Tensor count, ops::ReduceSum(mask));
  MT_ASSIGN_OR_RETURN(count, ops::Reshape(count, {1}));
  if (count.dtype() != sum.dtype()) {
    MT_ASSIGN_OR_RETURN(count, ops::Cast(count, sum.dtype()));
  }
  if (ctx.reduces()) {
    Tensor parts[] = {count};
    MT_RETURN_IF_ERROR(
        ctx.AllReduce(distribute::ReduceOp::kSum, absl::MakeSpan(parts)));
    count = parts[0];
  } else if (count_scale != 1.0) {
    MT_ASSIGN_OR_RETURN(count, ops::Scale(count, count_scale));
  }
  // A batch of padding alone: its sum is 0, and so is the loss (Keras's
  // divide_no_nan).
  MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(count, 1));
  MT_ASSIGN_OR_RETURN(
      count, ops::internal::BinaryKernel("MaskedLoss", BinaryKind::kMaximum,
                                         count, one));
  MT_ASSIGN_OR_RETURN(Tensor loss, ops::Div(sum, count));
  return ops::Reshape(loss, sum.shape());
}

namespace {

// N replicas' updates that each read N gradients move N^2 gradients' bytes;
// the all-reduce reads and writes N and the updates read their N sums: 3N.
// Sharing moves less for two replicas, as much for three, more from four.
constexpr int kMaxSharingReplicas = 3;
static_assert(kMaxSharingReplicas <= kMaxGradientTerms);

}  // namespace

bool Trainer::SumsInUpdate(const distribute::ReplicaContext& ctx) const {
  const OptimizerConfig& o = config_.optimizer;
  return config_.distribute.sum_in_update &&
         placement() == distribute::VariablePlacement::kMirrored &&
         ctx.shares_memory() && ctx.num_replicas() <= kMaxSharingReplicas &&
         !o.clip_value && !o.clip_norm && !o.clip_global_norm &&
         o.l2_regularization == 0;
}

absl::StatusOr<Trainer::StepGradients> Trainer::ComputeGradients(
    distribute::ReplicaContext& ctx, Replica& r,
    absl::Span<const Batch> micro_batches, uint64_t step_seed,
    const GraphInputs* graph) {
  // The loss is divided by the labels (examples, or tokens) of the whole
  // update, all micro-batches and replicas, so the summed gradients are the
  // gradient of the mean over the K-times-larger batch; a masked output's
  // by each micro-batch's unmasked count instead, 1/K each (MaskedLoss).
  int64_t update_rows = 0;
  for (const Batch& b : micro_batches) update_rows += b.labels.dim(0);
  const int64_t update_labels = update_rows * train_data_.labels_per_example();
  std::vector<Variable*> vars = r.model->trainable_variables();
  // Steps in flight: token ids are checked on the device, read with the
  // loss (FinishStep), not on the host in the middle of the step.
  std::optional<ops::ScopedIndexChecks> index_checks;
  if (DefersIndexChecks()) {
    MT_RETURN_IF_ERROR(r.index_checks.Reset());
    index_checks.emplace(&r.index_checks);
  }
  // Earlier micro-batches' gradients, summed on this replica; the last
  // micro-batch's backward adds them before the one all-reduce (or share).
  std::vector<Tensor> grads;
  StepGradients out;
  const bool share = SumsInUpdate(ctx);
  Tensor loss_sum;
  // Rows of the update before this micro-batch: with the step's seed, a
  // micro-batch draws the dropout masks of its rows of the large batch.
  int64_t row_offset = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Batch& batch = micro_batches[i];
    ShardInputs in;
    if (graph != nullptr) {
      in = {ctx.InputShard(batch.labels.dim(0)), graph->images[i],
            graph->labels[i]};
    } else {
      MT_ASSIGN_OR_RETURN(in, ReplicaShard(ctx, batch));
    }
    Tensor loss;
    {
      GradientTape tape;
      const ops::AllReduceSumFn all_reduce = [&ctx](absl::Span<Tensor> ts) {
        return ctx.AllReduce(distribute::ReduceOp::kSum, ts);
      };
      // Batch normalization sees one micro-batch (its statistics and
      // moving averages are per micro-batch, as in Keras and PyTorch).
      const models::ForwardContext fctx{
          .training = true,
          .step_seed = step_seed,
          .row_offset = row_offset + in.shard.begin,
          .global_batch = batch.labels.dim(0),
          .all_reduce_sum = ctx.reduces() ? &all_reduce : nullptr,
          .step_seed_tensor =
              graph != nullptr ? graph->step_seed.device() : Tensor()};
      Tensor mask;
      MT_ASSIGN_OR_RETURN(Tensor logits, r.model->Call(in.images, fctx, &mask));
      if (mask.defined()) {
        // Unreduced (parameter-server workers: their own batch; none: a
        // shard) the count stands for the batch's rows, as update_labels.
        const int64_t rows = in.shard.end - in.shard.begin;
        const double count_scale =
            ctx.reduces() || rows == 0
                ? 1.0
                : static_cast<double>(batch.labels.dim(0)) /
                      static_cast<double>(rows);
        MT_ASSIGN_OR_RETURN(
            loss, MaskedLoss(ctx, logits, in.labels, mask,
                             static_cast<int64_t>(micro_batches.size()),
                             count_scale));
      } else {
        MT_ASSIGN_OR_RETURN(
            loss, loss_->compute(logits, in.labels, Tensor(), update_labels,
                                 config_.loss.params));
      }
      std::vector<Tensor> sources;
      for (Variable* v : vars) sources.push_back(v->value());
      if (i + 1 < micro_batches.size()) {
        MT_RETURN_IF_ERROR(
            distribute::AccumulateGradients(tape, loss, sources, grads));
      } else if (share) {
        MT_ASSIGN_OR_RETURN(out.terms,
                            ctx.ShareGradients(tape, loss, sources, grads));
        out.shared = true;
      } else {
        MT_ASSIGN_OR_RETURN(grads,
                            ctx.AllReduceGradients(tape, loss, sources, grads));
      }
    }
    if (loss_sum.defined()) {
      MT_ASSIGN_OR_RETURN(loss_sum, ops::Add(loss_sum, loss));
    } else {
      loss_sum = loss;
    }
    row_offset += batch.labels.dim(0);
  }
  r.loss = loss_sum;
  if (share) return out;  // No L2 term and no clipping (SumsInUpdate).
  MT_RETURN_IF_ERROR(AddL2Regularization(vars, grads));
  MT_RETURN_IF_ERROR(ClipGradients(grads, &r.global_norm));
  out.sums = std::move(grads);
  return out;
}

absl::Status Trainer::ApplyUpdate(Replica& target, const StepGradients& grads,
                                  bool staged) {
  std::vector<Variable*> vars = target.model->trainable_variables();
  std::vector<GradAndVar> pairs;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (grads.shared) {
      const std::vector<Tensor>& terms = grads.terms[i];
      pairs.push_back({terms[0], vars[i], {terms.begin() + 1, terms.end()}});
      continue;
    }
    // Central storage: the reduced gradients come to the central device.
    MT_ASSIGN_OR_RETURN(Tensor grad, grads.sums[i].To(vars[i]->device()));
    pairs.push_back({std::move(grad), vars[i]});
  }
  if (staged) {
    MT_RETURN_IF_ERROR(target.optimizer->ApplyStagedGradients(pairs));
    if (target.ema) MT_RETURN_IF_ERROR(target.ema->ApplyStaged());
    return absl::OkStatus();
  }
  MT_RETURN_IF_ERROR(target.optimizer->ApplyGradients(pairs));
  if (target.ema) {
    MT_RETURN_IF_ERROR(target.ema->Apply(target.optimizer->iterations()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::ApplyMirroredUpdate(distribute::ReplicaContext& ctx,
                                          Replica& r,
                                          const StepGradients& grads,
                                          bool staged) {
  MT_RETURN_IF_ERROR(ApplyUpdate(r, grads, staged));
  return grads.shared ? ctx.EndShare() : absl::OkStatus();
}

absl::Status Trainer::EagerReplicaStep(distribute::ReplicaContext& ctx,
                                       absl::Span<const Batch> micro_batches,
                                       int64_t step) {
  Replica& r = replicas_[ctx.replica_id()];
  MT_ASSIGN_OR_RETURN(
      const StepGradients grads,
      ComputeGradients(ctx, r, micro_batches, StepSeed(config_.seed, step)));
  if (placement() == distribute::VariablePlacement::kMirrored) {
    return ApplyMirroredUpdate(ctx, r, grads);
  }
  // Central storage: every replica holds the reduced gradients; replica 0
  // applies them, once. The others read the central state before the step
  // (LoadReplicaModels), so nothing reads it now.
  if (ctx.replica_id() != 0) return absl::OkStatus();
  MT_RETURN_IF_ERROR(ApplyUpdate(*state_, grads));
  // The forward pass's own state (batch-norm moving statistics) is the same
  // on every replica (its statistics are all-reduced): keep replica 0's.
  const std::vector<Variable*>& central = state_->model->forward_state();
  const std::vector<Variable*>& mine = r.model->forward_state();
  for (size_t i = 0; i < central.size(); ++i) {
    MT_RETURN_IF_ERROR(central[i]->Assign(mine[i]->value()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadReplicaModels(bool ema) {
  const std::vector<Variable*> central = state_->model->variables();
  for (Replica& r : replicas_) {
    const std::vector<Variable*> mine = r.model->variables();
    for (size_t i = 0; i < central.size(); ++i) {
      const Variable* shadow = ema ? state_->ema->Shadow(*central[i]) : nullptr;
      MT_RETURN_IF_ERROR(mine[i]->Assign(
          shadow != nullptr ? shadow->value() : central[i]->value()));
    }
  }
  return WaitForLoopThreadWork();
}

absl::Status Trainer::WaitForLoopThreadWork() const {
  std::set<int> gpus;
  for (const Device& d : strategy_->devices()) {
    if (d.is_cuda()) gpus.insert(d.index);
  }
  const Device central = strategy_->variables_device();
  if (central.is_cuda()) gpus.insert(central.index);
  for (int gpu : gpus) MT_RETURN_IF_ERROR(cuda::Synchronize(gpu));
  return absl::OkStatus();
}

absl::Status Trainer::EagerStep(absl::Span<const Batch> micro_batches,
                                int64_t step) {
  return strategy_->Enqueue([&](distribute::ReplicaContext& ctx) {
    return EagerReplicaStep(ctx, micro_batches, step);
  });
}

absl::Status Trainer::Step(absl::Span<const Batch> micro_batches,
                           int64_t step) {
  absl::Status s = absl::OkStatus();
  if (placement() == distribute::VariablePlacement::kCentral) {
    s = LoadReplicaModels(/*ema=*/false);
  }
  if (s.ok() && cuda_graph_.capture) {
    s = GraphedStep(micro_batches, step);
    ReportCudaGraphFailure(step);
  } else if (s.ok()) {
    s = EagerStep(micro_batches, step);
  }
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("step ", step + 1, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Batch>> Trainer::NextMicroBatches() {
  std::vector<Batch> micro_batches;
  do {
    MT_ASSIGN_OR_RETURN(Batch batch, train_iterator_->Next());
    micro_batches.push_back(std::move(batch));
  } while (static_cast<int64_t>(micro_batches.size()) <
               config_.train.accumulation_steps &&
           train_iterator_->position().batch != 0);
  return micro_batches;
}

int64_t Trainer::StepsPerEpoch() const {
  // Rounded up without forming batches + k - 1, which overflows for a k
  // near 2^63 (a step then takes the whole epoch).
  const int64_t k = config_.train.accumulation_steps;
  const int64_t batches = train_iterator_->BatchesPerEpoch();
  return batches / k + (batches % k != 0 ? 1 : 0);
}

absl::Status Trainer::ReadyWeightsToRead(bool ema) {
  if (ema && primary().ema == nullptr) {
    return absl::InvalidArgumentError(
        "EMA weights requested but the config has no ema.decay");
  }
  if (placement() == distribute::VariablePlacement::kCentral) {
    return LoadReplicaModels(ema);  // The replicas hold copies.
  }
  return ps_ ? SnapshotShards() : absl::OkStatus();
}

absl::Status Trainer::WithModel(
    bool ema, const std::function<absl::Status(models::Model&, Device)>& fn) {
  MT_RETURN_IF_ERROR(ReadyWeightsToRead(ema));
  if (placement() == distribute::VariablePlacement::kCentral) {
    return fn(*replicas_[0].model, strategy_->devices()[0]);
  }
  Replica& r = ps_ ? *state_ : replicas_[0];
  const Device device =
      ps_ ? strategy_->variables_device() : strategy_->devices()[0];
  std::optional<ScopedEmaWeights> swap;
  if (ema) {
    MT_ASSIGN_OR_RETURN(swap, ScopedEmaWeights::Create(*r.ema));
  }
  absl::Status s = fn(*r.model, device);
  if (swap) MT_RETURN_IF_ERROR(swap->Restore());
  return s;
}

absl::StatusOr<EvalResult> Trainer::Evaluate(bool ema) {
  // Every eval batch is sharded over the replicas like a training batch;
  // per-replica sums are then reduced (Strategy::Reduce). Central storage
  // loads the weights into the replicas first; parameter servers' workers
  // are held by the coordinator meanwhile (TrainAsync), and the evaluation
  // runs on the state gathered from the shards, on its own device.
  if (data_needs_ == DataNeeds::kShapes) {
    return absl::FailedPreconditionError(
        "Evaluate: this trainer loaded the data's shapes only");
  }
  MT_RETURN_IF_ERROR(ReadyWeightsToRead(ema));
  distribute::Strategy* runner = strategy_.get();
  std::optional<distribute::OneDeviceStrategy> on_state;
  if (ps_) {
    on_state.emplace(strategy_->variables_device());
    runner = &*on_state;
  }
  const int replicas = runner->num_replicas();
  CopyTestImagesTo(runner->devices());
  const int64_t n = test_data_.labels.dim(0);
  const int64_t labels_per_example = test_data_.labels_per_example();
  const int64_t eval_batch =
      labels_per_example == 1
          ? kEvalBatch
          : std::max<int64_t>(1, kEvalLabels / labels_per_example);
  // Bits per byte (the categorical loss's cross-entropy of byte tokens)
  // measure the plain cross-entropy: summed apart when the logged loss is
  // smoothed.
  const bool bytes =
      test_data_.bytes_as_tokens && loss_->name == models::kDefaultLoss;
  const bool plain_apart =
      bytes && models::LabelSmoothingOf(config_.loss.params) > 0;
  Params plain_params = config_.loss.params;
  plain_params.Set(models::kLabelSmoothing, 0.0);
  std::vector<EvalSums> sums(replicas);
  MT_RETURN_IF_ERROR(
      runner->Run([&](distribute::ReplicaContext& ctx) -> absl::Status {
        const int id = ctx.replica_id();
        Replica& r = ps_ ? *state_ : replicas_[id];
        std::optional<ScopedEmaWeights> swap;
        if (ema && r.ema != nullptr) {
          MT_ASSIGN_OR_RETURN(swap, ScopedEmaWeights::Create(*r.ema));
        }
        for (int64_t begin = 0; begin < n; begin += eval_batch) {
          const int64_t count = std::min(eval_batch, n - begin);
          const distribute::ShardRange shard = ctx.InputShard(count);
          const int64_t rows = shard.end - shard.begin;
          if (rows == 0) continue;
          const Tensor* on_device = TestImagesOn(ctx.device());
          MT_ASSIGN_OR_RETURN(
              Tensor images,
              (on_device != nullptr ? *on_device : test_data_.images)
                  .SliceRows(begin + shard.begin, rows));
          MT_ASSIGN_OR_RETURN(Tensor labels, test_data_.labels.SliceRows(
                                                 begin + shard.begin, rows));
          MT_ASSIGN_OR_RETURN(images, images.To(ctx.device()));
          Tensor mask;
          MT_ASSIGN_OR_RETURN(Tensor logits, r.model->Call(images, {}, &mask));
          MT_ASSIGN_OR_RETURN(logits, logits.To(Device::Cpu()));
          if (mask.defined()) {
            MT_ASSIGN_OR_RETURN(mask, mask.To(Device::Cpu()));
          }
          MT_RETURN_IF_ERROR(AddEvalSums(
              *loss_, config_.loss.params, metrics_, config_.metrics, logits,
              labels, mask, plain_apart ? &plain_params : nullptr, sums[id]));
        }
        if (swap) MT_RETURN_IF_ERROR(swap->Restore());
        return absl::OkStatus();
      }));
  // This process's sums, then (in rank order) every process's.
  auto reduce = [&](double EvalSums::*field) {
    std::vector<double> values;
    for (const EvalSums& s : sums) values.push_back(s.*field);
    return distribute::Strategy::Reduce(distribute::ReduceOp::kSum, values);
  };
  std::vector<double> totals = {
      reduce(&EvalSums::loss), reduce(&EvalSums::metric),
      reduce(&EvalSums::plain), reduce(&EvalSums::labels)};
  for (size_t m = 0; m < metrics_.size(); ++m) {
    std::vector<double> values;
    for (const EvalSums& s : sums) {
      values.push_back(m < s.metrics.size() ? s.metrics[m] : 0.0);
    }
    totals.push_back(
        distribute::Strategy::Reduce(distribute::ReduceOp::kSum, values));
  }
  if (runner == strategy_.get()) {
    MT_RETURN_IF_ERROR(processes_->AllReduceSum(absl::MakeSpan(totals),
                                                "the evaluation sums"));
  }
  const double loss_sum = totals[0], metric_sum = totals[1];
  const double plain_sum = plain_apart ? totals[2] : loss_sum;
  EvalResult result;
  result.examples = n;
  // Masked labels (the model's output mask's 0s) do not count.
  result.labels = static_cast<int64_t>(std::llround(totals[3]));
  const double labels = totals[3];
  result.loss = labels > 0 ? loss_sum / labels : 0;
  result.metric_name = loss_->metric;
  result.metric = labels > 0 ? metric_sum / labels : 0;
  if (bytes) {
    result.bits_per_byte =
        (labels > 0 ? plain_sum / labels : 0) / std::numbers::ln2;
  }
  for (size_t m = 0; m < metrics_.size(); ++m) {
    result.metrics.push_back(
        {config_.metrics[m].reported, labels > 0 ? totals[4 + m] / labels : 0});
  }
  return result;
}

void Trainer::CopyTestImagesTo(const std::vector<Device>& devices) {
  const Tensor& images = test_data_.images;
  if (images.bytes() > kMaxTestBytesOnDevice) {
    return;
  }
  for (const Device& device : devices) {
    if (!device.is_cuda() || TestImagesOn(device) != nullptr) continue;
    // A GPU without room for it evaluates as before, batch by batch (whose
    // copies report any other error).
    absl::StatusOr<Tensor> copy = images.To(device);
    if (copy.ok()) test_images_on_.emplace_back(device, *std::move(copy));
  }
}

const Tensor* Trainer::TestImagesOn(Device device) const {
  for (const auto& [on, images] : test_images_on_) {
    if (on == device) return &images;
  }
  return nullptr;
}

double Trainer::Watched(const EvalResult& result) const {
  const std::string& monitor = config_.train.early_stopping_monitor;
  if (monitor == "loss") return result.loss;
  for (const auto& [name, value] : result.metrics) {
    if (name == monitor) return value;
  }
  return result.metric;
}

absl::StatusOr<EvalResult> Trainer::EvaluateAndLog(int64_t step) {
  const int64_t steps_per_epoch = StepsPerEpoch();
  std::vector<bool> which;  // Raw (false) and EMA (true) weights.
  if (!primary().ema || config_.ema.evaluate_raw) which.push_back(false);
  if (primary().ema) which.push_back(true);
  std::vector<EvalResult> results;
  for (bool ema : which) {
    MT_ASSIGN_OR_RETURN(EvalResult e, Evaluate(ema));
    results.push_back(std::move(e));
  }
  // Where the state is saved (the chief's run directory), a state the save
  // would refuse (non-finite) is not logged either: its numbers would stand
  // for weights the run then refuses. Checked after the evaluation, which
  // every process takes part in, where the save would have failed next.
  if (!run_dir_.empty() && !config_.checkpoint.allow_non_finite) {
    if (ps_) MT_RETURN_IF_ERROR(SnapshotShards());
    MT_RETURN_IF_ERROR(CheckFiniteState(TrainingState(), step));
  }
  std::string line = absl::StrCat("eval step ", step);
  for (size_t i = 0; i < which.size(); ++i) {
    const bool ema = which[i];
    const EvalResult& e = results[i];
    MetricsRecord rec{step,
                      step / steps_per_epoch,
                      "test",
                      ema ? "ema" : "raw",
                      {{"loss", e.loss}, {e.metric_name, e.metric}}};
    // A NaN prints as "nan" (printf gives "-nan" for some), as
    // metrics.jsonl's null says: no number.
    const auto fixed = [](double v) {
      return std::isnan(v) ? std::string("nan") : absl::StrFormat("%.4f", v);
    };
    absl::StrAppend(&line, "  ", ema ? "ema" : "raw", ": loss ", fixed(e.loss),
                    " ", e.metric_name, " ", fixed(e.metric));
    if (e.bits_per_byte) {
      rec.values.push_back({"bits_per_byte", *e.bits_per_byte});
      absl::StrAppend(&line, " bits/byte ", fixed(*e.bits_per_byte));
    }
    for (const auto& [name, value] : e.metrics) {
      rec.values.push_back({name, value});
      absl::StrAppend(&line, " ", name, " ", fixed(value));
    }
    if (logger_) MT_RETURN_IF_ERROR(logger_->Log(rec));
  }
  progress_->Message(line);
  return results.back();
}

absl::StatusOr<int64_t> Trainer::TotalSteps() const {
  // A checkpoint holds steps up to 2^53 (checkpoint_format.h): a run must
  // not save one it cannot restore.
  if (config_.train.steps.has_value()) {
    if (*config_.train.steps > kMaxCheckpointStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train.steps: ", *config_.train.steps, " is more than the ",
          kMaxCheckpointStep, " steps a checkpoint can hold"));
    }
    return *config_.train.steps;
  }
  const int64_t steps_per_epoch = StepsPerEpoch();
  int64_t total = 0;
  if (__builtin_mul_overflow(*config_.train.epochs, steps_per_epoch, &total) ||
      total > kMaxCheckpointStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.epochs: ", *config_.train.epochs, " epochs of ",
                     steps_per_epoch, " steps are more than the ",
                     kMaxCheckpointStep, " steps a checkpoint can hold"));
  }
  return total;
}

absl::Status Trainer::SyncFromChief() {
  // The chief's step, input position and split sizes; `assigned`: whether
  // it restored a checkpoint or warm-started (its state is not the seed's).
  // (Create compared the configs already.)
  const BatchIterator::Position pos = train_iterator_->position();
  const int64_t train_examples = train_data_.size();
  const int64_t test_examples = test_data_.size();
  const bool assigned = !restored_from_.empty() || !warm_start_summary_.empty();
  int64_t header[6] = {global_step(),    pos.epoch,      pos.batch,
                       assigned ? 1 : 0, train_examples, test_examples};
  MT_RETURN_IF_ERROR(processes_->Broadcast(header, sizeof(header), 0,
                                           "the chief's training state"));
  // Hosts that read different data would count their epochs and
  // evaluations differently, and meet different collectives.
  absl::Status same;
  if (header[4] != train_examples || header[5] != test_examples) {
    same = absl::InvalidArgumentError(absl::StrCat(
        "its data has ", train_examples, " training and ", test_examples,
        " test examples, process 0's ", header[4], " and ", header[5],
        " (every process must read the same data)"));
  }
  MT_RETURN_IF_ERROR(processes_->AgreedStatus(same));
  if (header[3] == 0) return absl::OkStatus();  // Same seed, same start.
  for (distribute::MirroredVariable& v : mirrored_) {
    MT_ASSIGN_OR_RETURN(Tensor host, v.value().To(Device::Cpu()));
    MT_RETURN_IF_ERROR(processes_->Broadcast(host.raw_data(),
                                             static_cast<int64_t>(host.bytes()),
                                             0, "the chief's training state"));
    if (!processes_->chief()) MT_RETURN_IF_ERROR(v.AssignAll(host));
  }
  MT_RETURN_IF_ERROR(processes_->BroadcastString(restored_from_, 0,
                                                 "the chief's training state"));
  if (early_stopping_.has_value()) {
    // Only the chief restored: every process must stop at the same
    // evaluation, so all take its state (as "key=value" lines).
    std::string state;
    if (processes_->chief()) {
      std::map<std::string, std::string> metadata;
      early_stopping_->Save(metadata);
      for (const auto& [key, value] : metadata) {
        absl::StrAppend(&state, key, "=", value, "\n");
      }
    }
    MT_RETURN_IF_ERROR(processes_->BroadcastString(
        state, 0, "the chief's early stopping state"));
    if (!processes_->chief()) {
      std::map<std::string, std::string> metadata;
      for (absl::string_view line :
           absl::StrSplit(state, '\n', absl::SkipEmpty())) {
        const std::pair<std::string, std::string> kv =
            absl::StrSplit(line, absl::MaxSplits('=', 1));
        metadata.insert(kv);
      }
      std::string note;
      MT_ASSIGN_OR_RETURN(
          early_stopping_,
          EarlyStopping::Restored(early_stopping_->options(), metadata,
                                  restored_from_, &note));
    }
  }
  if (processes_->chief()) return absl::OkStatus();
  for (Replica& r : replicas_) r.optimizer->set_iterations(header[0]);
  MT_RETURN_IF_ERROR(train_iterator_->Seek({header[1], header[2]}));
  last_saved_step_ = header[0];
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
