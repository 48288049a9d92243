#include "trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <numbers>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "distribute/device_set.h"
#include "distribute/mirrored_variable.h"
#include "distribute/strategy_factory.h"
#include "models/losses.h"
#include "models/presets.h"
#include "tensor/cuda/stream.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/data/augment.h"
#include "trainer/data/data_source.h"
#include "trainer/data/normalize.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"
#include "trainer/signals.h"

namespace mirrortrain::trainer {
namespace {

// Evaluation batches: this many examples, or of sequences as many as hold
// about kEvalLabels labels (their logits are labels x classes).
constexpr int64_t kEvalBatch = 1000;
constexpr int64_t kEvalLabels = 8192;

// The first `limit` examples (0: all) as views.
absl::StatusOr<InMemoryDataset> Subset(InMemoryDataset data, int64_t limit) {
  const int64_t n = data.labels.dim(0);
  if (limit <= 0 || limit >= n) return data;
  MT_ASSIGN_OR_RETURN(data.images, data.images.SliceRows(0, limit));
  MT_ASSIGN_OR_RETURN(data.labels, data.labels.SliceRows(0, limit));
  return data;
}

absl::StatusOr<InMemoryDataset> LoadSplit(const DataConfig& d, bool train,
                                          uint64_t seed) {
  const DataSource* source = DataSourceRegistry::Global().Find(d.name);
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.name: unknown data source '", d.name, "'"));
  }
  MT_ASSIGN_OR_RETURN(InMemoryDataset data,
                      source->load(d.source, train, seed));
  MT_ASSIGN_OR_RETURN(data, Subset(std::move(data),
                                   train ? d.train_examples : d.test_examples));
  // In place: the source's tensors are ours alone until the split is built.
  MT_RETURN_IF_ERROR(NormalizeChannels(d.normalize, data.images));
  return data;
}

}  // namespace

absl::StatusOr<models::ModelDef> ModelDefinition(const ModelConfig& m,
                                                 const InMemoryDataset& data) {
  models::ModelDef def;
  if (!m.input_shape.empty()) {
    def.input_shape = m.input_shape;
  } else {
    const Shape& images = data.images.shape();
    def.input_shape.assign(images.begin() + 1, images.end());
  }
  if (m.preset.empty()) {
    def.layers = m.layers;
    return def;
  }
  const models::ModelPreset* preset =
      models::PresetRegistry::Global().Find(m.preset);
  if (preset == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.name: unknown preset '", m.preset, "'"));
  }
  MT_ASSIGN_OR_RETURN(def.layers,
                      preset->expand(m.preset_params, data.num_classes));
  return def;
}

namespace {

// The model must map an example to one logit per class and label: [classes]
// for one label per example, [T, classes] for sequences of T labels.
absl::Status CheckClassifier(const models::Model& model,
                             const InMemoryDataset& data) {
  const Shape& out = model.output_shape();
  Shape expected(data.labels.shape().begin() + 1, data.labels.shape().end());
  expected.push_back(data.num_classes);
  if (out != expected) {
    const std::string needs =
        expected.size() == 1
            ? absl::StrCat("the data has ", data.num_classes, " classes")
            : absl::StrCat("the data needs ", ShapeToString(expected),
                           " (one logit per class and label)");
    return absl::InvalidArgumentError(absl::StrCat(
        "model: the last layer gives ", ShapeToString(out), " per example but ",
        needs, " (end with a dense layer of ", data.num_classes, " units)"));
  }
  return absl::OkStatus();
}

// Step randomness (dropout) from the seed and the step, never from the
// replica, so every replica and every replica count agree.
uint64_t StepSeed(uint64_t seed, int64_t step) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1));
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 29);
}

double ScalarValue(const Tensor& t) {
  return t.device().is_cpu() ? t.ScalarAt(0) : t.To(Device::Cpu())->ScalarAt(0);
}

}  // namespace

absl::StatusOr<std::string> ModelSummary(const Config& config) {
  MT_ASSIGN_OR_RETURN(InMemoryDataset data,
                      LoadSplit(config.data, /*train=*/false, config.seed));
  MT_ASSIGN_OR_RETURN(const models::ModelDef def,
                      ModelDefinition(config.model, data));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                      models::Model::Build(def, config.seed, Device::Cpu()));
  MT_RETURN_IF_ERROR(CheckClassifier(*model, data));
  return model->Summary();
}

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const Config& config, const std::string& run_dir, bool need_train_data) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  t->run_dir_ = run_dir;
  // Owned before anything in it is read or written.
  if (!run_dir.empty()) {
    MT_ASSIGN_OR_RETURN(RunDirLock lock, RunDirLock::Acquire(run_dir));
    t->run_dir_lock_.emplace(std::move(lock));
  }
  if (need_train_data) MT_RETURN_IF_ERROR(t->PrepareRestoreForTraining());
  // Validated by the config; process-wide, like TensorFlow's switch.
  MT_ASSIGN_OR_RETURN(MatMulPrecision precision,
                      ParseMatMulPrecision(config.precision));
  SetMatMulPrecision(precision);
  MT_ASSIGN_OR_RETURN(std::vector<Device> devices,
                      distribute::ResolveDevices(config.distribute.devices));
  MT_ASSIGN_OR_RETURN(t->strategy_, distribute::MakeStrategy(
                                        config.distribute.strategy, devices,
                                        {config.distribute.cross_device_ops,
                                         config.distribute.bucket_bytes,
                                         config.distribute.watchdog_seconds}));
  // The test split first: it gives the model its input shape and classes.
  MT_ASSIGN_OR_RETURN(t->test_data_,
                      LoadSplit(config.data, /*train=*/false, config.seed));
  if (const Shape& images = t->test_data_.images.shape();
      !config.model.input_shape.empty() &&
      !std::equal(images.begin() + 1, images.end(),
                  config.model.input_shape.begin(),
                  config.model.input_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.input_shape: ", ShapeToString(config.model.input_shape),
        " but the examples of ", t->test_data_.name, " are ",
        ShapeToString(Shape(images.begin() + 1, images.end()))));
  }
  // Evaluating nothing would report loss 0 and accuracy 0 as if measured.
  if (t->test_data_.labels.dim(0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: the test split (", t->test_data_.name,
                     ") has no examples: nothing to evaluate"));
  }
  MT_ASSIGN_OR_RETURN(const models::ModelDef def,
                      ModelDefinition(config.model, t->test_data_));
  for (const Device& device : t->strategy_->devices()) {
    Replica r;
    MT_ASSIGN_OR_RETURN(r.model,
                        models::Model::Build(def, config.seed, device));
    MT_RETURN_IF_ERROR(CheckClassifier(*r.model, t->test_data_));
    MT_ASSIGN_OR_RETURN(std::unique_ptr<LearningRateSchedule> schedule,
                        MakeSchedule(config.optimizer.schedule,
                                     config.optimizer.schedule_params,
                                     config.optimizer.learning_rate));
    MT_ASSIGN_OR_RETURN(r.optimizer, MakeOptimizer(config.optimizer.name,
                                                   config.optimizer.params,
                                                   std::move(schedule)));
    MT_RETURN_IF_ERROR(
        r.optimizer->CreateSlots(r.model->trainable_variables()));
    if (config.ema.decay.has_value()) {
      r.ema = std::make_unique<ExponentialMovingAverage>(
          *config.ema.decay, config.ema.use_num_updates);
      MT_RETURN_IF_ERROR(r.ema->Track(r.model->trainable_variables()));
    }
    t->replicas_.push_back(std::move(r));
  }
  std::vector<std::vector<Variable*>> states;
  for (int r = 0; r < t->num_replicas(); ++r) {
    states.push_back(t->ReplicaState(r));
  }
  MT_ASSIGN_OR_RETURN(t->mirrored_, distribute::MirrorReplicaStates(states));
  if (need_train_data) {
    MT_ASSIGN_OR_RETURN(t->train_data_,
                        LoadSplit(config.data, /*train=*/true, config.seed));
    BatchIteratorOptions opt;
    opt.batch_size = config.data.global_batch_size;
    opt.shuffle = config.data.shuffle;
    opt.drop_remainder = config.data.drop_remainder;
    opt.seed = static_cast<uint64_t>(config.seed);
    opt.prefetch = config.data.prefetch;
    opt.augment = config.data.augment;
    MT_RETURN_IF_ERROR(
        CheckAugmentable(opt.augment, t->train_data_.images.shape()));
    if (t->strategy_->devices()[0].is_cuda()) {
      MT_ASSIGN_OR_RETURN(t->stager_,
                          DeviceStager::Create(t->strategy_->devices()));
      opt.stage = [stager = t->stager_.get()](Batch& batch) {
        return stager->Stage(batch);
      };
      opt.host_allocator = t->stager_->host_allocator();
    }
    absl::StatusOr<std::unique_ptr<BatchIterator>> it =
        BatchIterator::Create(&t->train_data_, opt);
    if (!it.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: ", it.status().message()));
    }
    t->train_iterator_ = *std::move(it);
    MT_RETURN_IF_ERROR(t->TotalSteps().status());
  }
  // Restore before writing anything, so a bad checkpoint leaves the run
  // directory as it was.
  if (need_train_data) MT_RETURN_IF_ERROR(t->RestoreForTraining());
  if (!run_dir.empty()) {
    t->run_dir_lock_->KeepFiles();
    MT_RETURN_IF_ERROR(
        WriteFileAtomically(run_dir + "/config.yaml", config.resolved_yaml));
    MT_ASSIGN_OR_RETURN(t->logger_, MetricsLogger::Create(run_dir));
  }
  return t;
}

int64_t Trainer::global_step() const {
  return replicas_[0].optimizer->iterations();
}

std::vector<Variable*> Trainer::ReplicaState(int replica) const {
  const Replica& r = replicas_[replica];
  std::vector<Variable*> state = r.model->variables();
  for (Variable* v : r.optimizer->SlotVariables()) state.push_back(v);
  if (r.ema) {
    for (Variable* v : r.ema->ShadowVariables()) state.push_back(v);
  }
  return state;
}

absl::Status Trainer::CheckReplicasIdentical() const {
  for (const distribute::MirroredVariable& v : mirrored_) {
    MT_RETURN_IF_ERROR(v.CheckIdentical());
  }
  return absl::OkStatus();
}

absl::Status Trainer::ClipGradients(std::vector<Tensor>& grads,
                                    int64_t step) const {
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
    if (!std::isfinite(clipped.global_norm)) {
      return absl::AbortedError(
          absl::StrCat("non-finite gradient global norm at step ", step + 1));
    }
    grads = std::move(clipped.tensors);
  }
  return absl::OkStatus();
}

absl::Status Trainer::AddL2Regularization(const std::vector<Variable*>& vars,
                                          std::vector<Tensor>& grads) const {
  const double l2 = config_.optimizer.l2_regularization;
  if (l2 == 0) return absl::OkStatus();
  for (size_t i = 0; i < vars.size(); ++i) {
    // Biases and normalization parameters (rank 1) are not decayed.
    if (vars[i]->shape().size() < 2) continue;
    MT_ASSIGN_OR_RETURN(Tensor decay, ops::Scale(vars[i]->value(), l2));
    MT_ASSIGN_OR_RETURN(grads[i], ops::Add(grads[i], decay));
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::ShardInputs> Trainer::ReplicaShard(
    distribute::ReplicaContext& ctx, const Batch& batch) const {
  ShardInputs in;
  in.shard = distribute::ShardOf(batch.labels.dim(0), ctx.replica_id(),
                                 ctx.num_replicas());
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

absl::Status Trainer::ReplicaStep(distribute::ReplicaContext& ctx,
                                  absl::Span<const Batch> micro_batches,
                                  int64_t step) {
  Replica& r = replicas_[ctx.replica_id()];
  // The loss is divided by the labels (examples, or tokens) of the whole
  // update, all micro-batches and replicas, so the summed gradients are the
  // gradient of the mean over the K-times-larger batch.
  int64_t update_rows = 0;
  for (const Batch& b : micro_batches) update_rows += b.labels.dim(0);
  const int64_t update_labels = update_rows * train_data_.labels_per_example();
  std::vector<Variable*> vars = r.model->trainable_variables();
  // Earlier micro-batches' gradients, summed on this replica; the last
  // micro-batch's backward adds them before the one all-reduce.
  std::vector<Tensor> grads;
  Tensor loss_sum;
  // Rows of the update before this micro-batch: with the step's seed, a
  // micro-batch draws the dropout masks of its rows of the large batch.
  int64_t row_offset = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Batch& batch = micro_batches[i];
    MT_ASSIGN_OR_RETURN(const ShardInputs in, ReplicaShard(ctx, batch));
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
          .step_seed = StepSeed(config_.seed, step),
          .row_offset = row_offset + in.shard.begin,
          .global_batch = batch.labels.dim(0),
          .all_reduce_sum = ctx.reduces() ? &all_reduce : nullptr};
      MT_ASSIGN_OR_RETURN(Tensor logits, r.model->Call(in.images, fctx));
      MT_ASSIGN_OR_RETURN(loss, models::SparseCategoricalCrossentropy(
                                    logits, in.labels, update_labels));
      std::vector<Tensor> sources;
      for (Variable* v : vars) sources.push_back(v->value());
      if (i + 1 < micro_batches.size()) {
        MT_RETURN_IF_ERROR(
            distribute::AccumulateGradients(tape, loss, sources, grads));
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
  MT_RETURN_IF_ERROR(AddL2Regularization(vars, grads));
  MT_RETURN_IF_ERROR(ClipGradients(grads, step));
  std::vector<GradAndVar> pairs;
  for (size_t i = 0; i < vars.size(); ++i) pairs.push_back({grads[i], vars[i]});
  MT_RETURN_IF_ERROR(r.optimizer->ApplyGradients(pairs));
  if (r.ema) MT_RETURN_IF_ERROR(r.ema->Apply(r.optimizer->iterations()));
  return absl::OkStatus();
}

absl::Status Trainer::Step(absl::Span<const Batch> micro_batches,
                           int64_t step) {
  absl::Status s = strategy_->Run([&](distribute::ReplicaContext& ctx) {
    return ReplicaStep(ctx, micro_batches, step);
  });
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
  const int64_t k = config_.train.accumulation_steps;
  return (train_iterator_->BatchesPerEpoch() + k - 1) / k;
}

absl::StatusOr<EvalResult> Trainer::Evaluate(bool ema) {
  if (ema && replicas_[0].ema == nullptr) {
    return absl::InvalidArgumentError(
        "EMA weights requested but the config has no ema.decay");
  }
  // Every eval batch is sharded over the replicas like a training batch;
  // per-replica sums are then reduced (Strategy::Reduce).
  const int64_t n = test_data_.labels.dim(0);
  const int64_t labels_per_example = test_data_.labels_per_example();
  const int64_t eval_batch =
      labels_per_example == 1
          ? kEvalBatch
          : std::max<int64_t>(1, kEvalLabels / labels_per_example);
  std::vector<double> loss_sums(num_replicas(), 0.0);
  std::vector<double> corrects(num_replicas(), 0.0);
  MT_RETURN_IF_ERROR(
      strategy_->Run([&](distribute::ReplicaContext& ctx) -> absl::Status {
        const int id = ctx.replica_id();
        Replica& r = replicas_[id];
        std::optional<ScopedEmaWeights> swap;
        if (ema) {
          MT_ASSIGN_OR_RETURN(swap, ScopedEmaWeights::Create(*r.ema));
        }
        for (int64_t begin = 0; begin < n; begin += eval_batch) {
          const int64_t count = std::min(eval_batch, n - begin);
          const distribute::ShardRange shard =
              distribute::ShardOf(count, id, ctx.num_replicas());
          const int64_t rows = shard.end - shard.begin;
          if (rows == 0) continue;
          MT_ASSIGN_OR_RETURN(Tensor images, test_data_.images.SliceRows(
                                                 begin + shard.begin, rows));
          MT_ASSIGN_OR_RETURN(Tensor labels, test_data_.labels.SliceRows(
                                                 begin + shard.begin, rows));
          MT_ASSIGN_OR_RETURN(images, images.To(ctx.device()));
          MT_ASSIGN_OR_RETURN(Tensor logits, r.model->Call(images, {}));
          MT_ASSIGN_OR_RETURN(logits, logits.To(Device::Cpu()));
          // The sum of per-label losses: a "global batch" of 1.
          MT_ASSIGN_OR_RETURN(
              Tensor loss,
              models::SparseCategoricalCrossentropy(logits, labels, 1));
          loss_sums[id] += ScalarValue(loss);
          MT_ASSIGN_OR_RETURN(int64_t c, models::CountCorrect(logits, labels));
          corrects[id] += static_cast<double>(c);
        }
        if (swap) MT_RETURN_IF_ERROR(swap->Restore());
        return absl::OkStatus();
      }));
  const double loss_sum =
      distribute::Strategy::Reduce(distribute::ReduceOp::kSum, loss_sums);
  const double correct =
      distribute::Strategy::Reduce(distribute::ReduceOp::kSum, corrects);
  EvalResult result;
  result.examples = n;
  result.labels = n * labels_per_example;
  const double labels = static_cast<double>(result.labels);
  result.loss = labels > 0 ? loss_sum / labels : 0;
  result.accuracy = labels > 0 ? correct / labels : 0;
  if (test_data_.bytes_as_tokens)
    result.bits_per_byte = result.loss / std::numbers::ln2;
  return result;
}

absl::Status Trainer::EvaluateAndLog(int64_t step) {
  const int64_t steps_per_epoch = StepsPerEpoch();
  std::vector<bool> which = {false};
  if (replicas_[0].ema) which.push_back(true);
  std::string line = absl::StrCat("eval step ", step);
  for (bool ema : which) {
    MT_ASSIGN_OR_RETURN(EvalResult e, Evaluate(ema));
    MetricsRecord rec{step,
                      step / steps_per_epoch,
                      "test",
                      ema ? "ema" : "raw",
                      {{"loss", e.loss}, {"accuracy", e.accuracy}}};
    absl::StrAppend(&line,
                    absl::StrFormat("  %s: loss %.4f accuracy %.4f",
                                    ema ? "ema" : "raw", e.loss, e.accuracy));
    if (e.bits_per_byte) {
      rec.values.push_back({"bits_per_byte", *e.bits_per_byte});
      absl::StrAppend(&line,
                      absl::StrFormat(" bits/byte %.4f", *e.bits_per_byte));
    }
    if (logger_) MT_RETURN_IF_ERROR(logger_->Log(rec));
  }
  progress_->Message(line);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Trainer::TotalSteps() const {
  if (config_.train.steps.has_value()) return *config_.train.steps;
  const int64_t steps_per_epoch = StepsPerEpoch();
  int64_t total = 0;
  if (__builtin_mul_overflow(*config_.train.epochs, steps_per_epoch, &total)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.epochs: ", *config_.train.epochs, " epochs of ", steps_per_epoch,
        " steps are more steps than fit 64 bits"));
  }
  return total;
}

absl::Status Trainer::Train() {
  const int64_t steps_per_epoch = StepsPerEpoch();
  MT_ASSIGN_OR_RETURN(const int64_t total_steps, TotalSteps());
  progress_ = std::make_unique<Progress>(total_steps, steps_per_epoch,
                                         config_.train.log_every_steps);
  int64_t step = global_step();
  double window_loss = 0;
  int64_t window_steps = 0, window_samples = 0;
  auto window_start = std::chrono::steady_clock::now();
  bool evaluated_at_end = false;
  auto save = [&]() -> absl::Status {
    // Without a run directory (tests, tools) nothing is written.
    if (run_dir_.empty() || last_saved_step_ == global_step()) {
      return absl::OkStatus();
    }
    MT_ASSIGN_OR_RETURN(std::string path, SaveCheckpoint());
    progress_->Message(absl::StrCat("saved ", path));
    return absl::OkStatus();
  };
  // A stop signal: checkpoint, then end with Cancelled.
  auto stop = [&]() -> absl::Status {
    MT_RETURN_IF_ERROR(save());
    progress_->Message(absl::StrCat("stopped by signal after step ", step));
    return absl::CancelledError(
        absl::StrCat("stopped by signal at step ", step));
  };
  if (!restored_from_.empty()) {
    progress_->Message(
        absl::StrCat("restored ", restored_from_, " at step ", step));
  }
  while (step < total_steps) {
    if (StopSignal() != 0) return stop();
    MT_ASSIGN_OR_RETURN(const std::vector<Batch> micro_batches,
                        NextMicroBatches());
    MT_RETURN_IF_ERROR(Step(micro_batches, step));
    ++step;
    double loss = 0;
    for (const Replica& r : replicas_) loss += ScalarValue(r.loss);
    if (!std::isfinite(loss)) {
      progress_->Finish();
      return absl::AbortedError(
          absl::StrCat("non-finite loss (", loss, ") at step ", step));
    }
    const int64_t check_every = config_.distribute.check_replicas_every_steps;
    if (check_every > 0 && step % check_every == 0) {
      absl::Status same = CheckReplicasIdentical();
      if (!same.ok()) {
        progress_->Finish();
        return absl::InternalError(
            absl::StrCat("step ", step, ": ", same.message()));
      }
    }
    window_loss += loss;
    ++window_steps;
    for (const Batch& b : micro_batches) window_samples += b.labels.dim(0);
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - window_start)
                               .count();
    const double samples_per_sec = seconds > 0 ? window_samples / seconds : 0;
    progress_->Update(step, loss, samples_per_sec);
    if (step % config_.train.log_every_steps == 0 || step == total_steps) {
      MetricsRecord rec{
          step,
          step / steps_per_epoch,
          "train",
          "",
          {{"loss", window_loss / window_steps},
           {"learning_rate", replicas_[0].optimizer->LearningRate()},
           {"samples_per_sec", samples_per_sec}}};
      // Sequences: the labelled tokens per second too.
      if (const int64_t t = train_data_.labels_per_example(); t > 1) {
        rec.values.push_back(
            {"tokens_per_sec", samples_per_sec * static_cast<double>(t)});
      }
      if (logger_) MT_RETURN_IF_ERROR(logger_->Log(rec));
      window_loss = 0;
      window_steps = window_samples = 0;
      window_start = std::chrono::steady_clock::now();
    }
    const bool epoch_end = step % steps_per_epoch == 0;
    const int64_t every = config_.train.eval_every_epochs;
    if (epoch_end && every > 0 && (step / steps_per_epoch) % every == 0) {
      MT_RETURN_IF_ERROR(EvaluateAndLog(step));
      evaluated_at_end = step == total_steps;
    }
    const int64_t every_save = config_.checkpoint.every_steps;
    if (every_save > 0 && step % every_save == 0) MT_RETURN_IF_ERROR(save());
    if (step_observer_) step_observer_(step);
  }
  if (!evaluated_at_end && StopSignal() == 0) {
    MT_RETURN_IF_ERROR(EvaluateAndLog(step));
  }
  // A signal during the last step's evaluation (or the one above) still
  // ends the run as a signal does.
  if (StopSignal() != 0) return stop();
  MT_RETURN_IF_ERROR(save());
  progress_->Finish();
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
