#include "trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <numbers>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "distribute/device_set.h"
#include "distribute/mirrored_variable.h"
#include "distribute/one_device_strategy.h"
#include "distribute/parameter_server_strategy.h"
#include "distribute/strategy_factory.h"
#include "distribute/variable_partitioner.h"
#include "models/losses.h"
#include "models/presets.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/index_checks.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/data/augment.h"
#include "trainer/data/data_source.h"
#include "trainer/data/normalize.h"
#include "trainer/gpu_warm_up.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"
#include "trainer/process_age.h"

namespace mirrortrain::trainer {
namespace {

// Evaluation batches: this many examples, or of sequences as many as hold
// about kEvalLabels labels (their logits are labels x classes).
constexpr int64_t kEvalBatch = 1000;
constexpr int64_t kEvalLabels = 8192;
// Test splits up to this size are copied to each evaluating GPU once, not
// batch by batch at every evaluation (Fashion-MNIST's: 31 MB of f32).
constexpr size_t kMaxTestBytesOnDevice = size_t{256} << 20;

// The first `limit` examples (0: all) as views.
absl::StatusOr<InMemoryDataset> Subset(InMemoryDataset data, int64_t limit) {
  const int64_t n = data.labels.dim(0);
  if (limit <= 0 || limit >= n) return data;
  MT_ASSIGN_OR_RETURN(data.images, data.images.SliceRows(0, limit));
  MT_ASSIGN_OR_RETURN(data.labels, data.labels.SliceRows(0, limit));
  return data;
}

absl::StatusOr<InMemoryDataset> LoadSplit(const DataConfig& d, bool train,
                                          uint64_t seed,
                                          const Shape& example_shape,
                                          bool shapes_only = false) {
  const DataSource* source = DataSourceRegistry::Global().Find(d.name);
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.name: unknown data source '", d.name, "'"));
  }
  const SplitRequest request{
      .train = train,
      .seed = seed,
      .example_shape = example_shape,
      .max_examples = train ? d.train_examples : d.test_examples,
      .shapes_only = shapes_only};
  MT_ASSIGN_OR_RETURN(InMemoryDataset data, source->load(d.source, request));
  MT_ASSIGN_OR_RETURN(data, Subset(std::move(data),
                                   train ? d.train_examples : d.test_examples));
  // Token ids are not measurements: normalizing them would change which
  // embedding rows they pick (augmentation refuses them likewise).
  if (data.bytes_as_tokens && d.normalize.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.normalize: ", d.name,
                     " gives token ids, which are not "
                     "normalized (remove data.normalize)"));
  }
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
  if (data.bytes_as_tokens) def.input_vocabulary = data.num_classes;
  def.continuous_inputs = data.continuous;
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
    // More axes than the labels have: a flatten (or a global pooling) is
    // probably missing before the classifier; a dense layer keeps the
    // other axes (Keras's last-axis Dense).
    const std::string hint =
        out.size() > expected.size()
            ? absl::StrCat(
                  " (flatten or pool the features before a last "
                  "dense layer of ",
                  data.num_classes, " units)")
            : absl::StrCat(" (end with a dense layer of ", data.num_classes,
                           " units)");
    return absl::InvalidArgumentError(
        absl::StrCat("model: the last layer gives ", ShapeToString(out),
                     " per example but ", needs, hint));
  }
  return absl::OkStatus();
}

// Token ids from files (npz) for a model whose first layer is an
// embedding: checked when the split is loaded, naming the example, not at
// the first step whose batch holds a bad one (after the run directory got
// its files). The embedding truncates ids to integers (Keras's cast), so an
// id is good when it truncates into [0, input_dim). The text source's
// bytes are checked against input_dim when the model is built.
absl::Status CheckTokenIds(const models::ModelDef& def, const DataConfig& d,
                           const InMemoryDataset& data) {
  if (def.layers.empty() || def.layers[0].type != "embedding" ||
      data.bytes_as_tokens) {
    return absl::OkStatus();
  }
  const models::LayerSpec& embedding = def.layers[0];
  // Ids are not measurements (as the text source's): normalizing or
  // augmenting them would pick other rows.
  for (const auto& [key, on] : {std::pair{"normalize", d.normalize.enabled()},
                                std::pair{"augment", d.augment.enabled()}}) {
    if (on) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.", key, ": ", embedding.path,
          " (embedding) reads the data as token ids, which are not ",
          key == std::string("normalize") ? "normalized" : "augmented",
          " (remove data.", key, ")"));
    }
  }
  const double input_dim =
      static_cast<double>(embedding.params.Int("input_dim"));
  const float* x = data.images.data<float>();
  const int64_t n = data.images.num_elements();
  const int64_t per_example =
      data.images.dim(0) > 0 ? n / data.images.dim(0) : 1;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > -1.0f && x[i] < input_dim) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "data: ", data.name, ": example ", i / per_example, " holds ", x[i],
        " at position ", i % per_example, ", not a token id in [0, ", input_dim,
        ") of ", embedding.path, " (embedding)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeConfiguredOptimizer(
    const OptimizerConfig& o) {
  MT_ASSIGN_OR_RETURN(
      std::unique_ptr<LearningRateSchedule> schedule,
      MakeSchedule(o.schedule, o.schedule_params, o.learning_rate));
  return MakeOptimizer(o.name, o.params, std::move(schedule));
}

// The test split gives the model its input shape: a configured one must
// agree, and evaluating no examples would report loss 0 and accuracy 0 as
// if measured.
absl::Status CheckTestSplit(const ModelConfig& model,
                            const InMemoryDataset& test,
                            bool need_examples = true) {
  if (const Shape& images = test.images.shape();
      !model.input_shape.empty() &&
      !std::equal(images.begin() + 1, images.end(), model.input_shape.begin(),
                  model.input_shape.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_shape: ", ShapeToString(model.input_shape),
                     " but the examples of ", test.name, " are ",
                     ShapeToString(Shape(images.begin() + 1, images.end()))));
  }
  if (need_examples && test.labels.dim(0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: the test split (", test.name,
                     ") has no examples: nothing to evaluate"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ModelSummary(const Config& config) {
  MT_ASSIGN_OR_RETURN(InMemoryDataset data,
                      LoadSplit(config.data, /*train=*/false, config.seed,
                                config.model.input_shape));
  MT_RETURN_IF_ERROR(CheckTestSplit(config.model, data));
  MT_ASSIGN_OR_RETURN(const models::ModelDef def,
                      ModelDefinition(config.model, data));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                      models::Model::Build(def, config.seed, Device::Cpu()));
  MT_RETURN_IF_ERROR(CheckClassifier(*model, data));
  // What `train` checks of the data before its first step, on the split
  // loaded here (the training split's examples are not read).
  MT_RETURN_IF_ERROR(CheckTokenIds(def, config.data, data));
  MT_RETURN_IF_ERROR(
      CheckAugmentable(config.data.augment, data.images.shape()));
  return model->Summary();
}

Trainer::~Trainer() = default;

uint64_t Trainer::StepSeed(uint64_t seed, int64_t step, int worker) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1));
  z ^= 0xd1b54a32d192ed03ULL * static_cast<uint64_t>(worker);
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 29);
}

double Trainer::HostValue(const Tensor& t) {
  return t.device().is_cpu() ? t.ScalarAt(0) : t.To(Device::Cpu())->ScalarAt(0);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const Config& config, const std::string& run_dir, DataNeeds data,
    distribute::ProcessGroup* processes) {
  const bool need_train_data = data == DataNeeds::kTrainAndTest;
  const bool shapes_only = data == DataNeeds::kShapes;
  using Clock = std::chrono::steady_clock;
  std::unique_ptr<Trainer> t(new Trainer());
  t->startup_.began = Clock::now();
  t->startup_.before = ProcessAgeSeconds();
  t->config_ = config;
  t->data_needs_ = data;
  if (processes == nullptr) {
    t->single_process_ = distribute::SingleProcessGroup();
    processes = t->single_process_.get();
  }
  t->processes_ = processes;
  processes->set_watchdog(std::chrono::milliseconds(
      static_cast<int64_t>(config.distribute.watchdog_seconds * 1000)));
  const bool chief = processes->chief();
  // Only the chief uses the run directory; the others get its state.
  t->run_dir_ = chief ? run_dir : "";
  // Every process must run the same job: the chief's config hash, sent
  // before any other collective (a config that differs in its devices or
  // cross_device_ops would otherwise meet other collectives than the
  // chief's).
  absl::Status same_config = absl::OkStatus();
  if (processes->size() > 1) {
    uint64_t chief_hash = config.hash;
    MT_RETURN_IF_ERROR(processes->Broadcast(&chief_hash, sizeof(chief_hash), 0,
                                            "the chief's config hash"));
    if (chief_hash != config.hash) {
      // Agree names the process.
      same_config = absl::InvalidArgumentError(
          "the resolved config differs from process 0's (every process must "
          "read the same config file and --set overrides)");
    }
  }
  // Owned before anything in it is read or written.
  const absl::Status chief_part = [&]() -> absl::Status {
    MT_RETURN_IF_ERROR(same_config);
    if (!t->run_dir_.empty()) {
      MT_ASSIGN_OR_RETURN(RunDirLock lock, RunDirLock::Acquire(run_dir));
      t->run_dir_lock_.emplace(std::move(lock));
    }
    if (need_train_data && chief) {
      MT_RETURN_IF_ERROR(t->PrepareRestoreForTraining());
    }
    return absl::OkStatus();
  }();
  MT_RETURN_IF_ERROR(processes->AgreedStatus(chief_part));
  // The training split (the largest file to read and decompress) loads on
  // a thread of its own while the devices start up and the model is built;
  // its errors come after the test split's and the model's. The test split
  // loads on another while the devices start. `config` lives through
  // Create, and every return waits for the loads: a std::async future
  // blocks in its destructor (so an early error waits for them too).
  // Each load times itself; read after its future's get().
  auto timed_load = [&config, shapes_only](
                        bool train, std::chrono::duration<double>* took) {
    const Clock::time_point began = Clock::now();
    absl::StatusOr<InMemoryDataset> split = LoadSplit(
        config.data, train, config.seed, config.model.input_shape, shapes_only);
    *took = Clock::now() - began;
    return split;
  };
  std::future<absl::StatusOr<InMemoryDataset>> train_split;
  if (need_train_data) {
    train_split = std::async(std::launch::async, timed_load, /*train=*/true,
                             &t->startup_.training_split);
  }
  std::future<absl::StatusOr<InMemoryDataset>> test_split = std::async(
      std::launch::async, timed_load, /*train=*/false, &t->startup_.test_split);
  const Clock::time_point devices_began = Clock::now();
  const DistributeConfig& dist = config.distribute;
  std::vector<Device> devices;
  distribute::StrategyOptions options;
  // A device one host lacks fails there alone: agreed before the strategy's
  // first collective.
  const absl::Status devices_found = [&]() -> absl::Status {
    // Validated by the config; process-wide, like TensorFlow's switch.
    MT_ASSIGN_OR_RETURN(MatMulPrecision precision,
                        ParseMatMulPrecision(config.precision));
    SetMatMulPrecision(precision);
    MT_ASSIGN_OR_RETURN(devices,
                        distribute::ResolveDevices(config.distribute.devices));
    MT_ASSIGN_OR_RETURN(
        const cuda::StreamPriority communication_priority,
        distribute::ParseStreamPriority(dist.communication_priority));
    options.mirrored = {dist.cross_device_ops, dist.bucket_bytes,
                        dist.watchdog_seconds, communication_priority};
    MT_ASSIGN_OR_RETURN(options.variables_device,
                        ParseDevice(dist.variables_device));
    MT_ASSIGN_OR_RETURN(options.parameter_server.ps_devices,
                        distribute::ResolveDevices(dist.ps_devices));
    options.parameter_server.max_staleness = dist.max_staleness.value_or(-1);
    options.parameter_server.min_shard_bytes = dist.ps_min_shard_bytes;
    options.processes = processes;
    return absl::OkStatus();
  }();
  MT_RETURN_IF_ERROR(processes->AgreedStatus(devices_found));
  // A failure some processes meet alone in it (after its own agreed
  // checks) is agreed too.
  auto strategy = distribute::MakeStrategy(dist.strategy, devices, options);
  MT_RETURN_IF_ERROR(processes->AgreedStatus(strategy.status()));
  t->strategy_ = *std::move(strategy);
  t->startup_.devices = Clock::now() - devices_began;
  // The GPUs' contexts and the product libraries start on a thread of
  // their own while the model is built and the data loads (gpu_warm_up.h).
  // Every return waits for it, as for the loads. A failure here shows
  // again, reported, where the model or the first step uses the GPU.
  std::future<void> products_warmed;
  // Data, model, state and the restore: what fails here in one process
  // alone (its host's data, the chief's checkpoint) is agreed before
  // SyncFromChief's collectives.
  const absl::Status built = [&]() -> absl::Status {
    if (devices[0].is_cuda()) {
      // `took` outlives the thread: the future, declared after `t`, is
      // destroyed (and waits) first.
      auto warm_up = [devices, took = &t->startup_.gpu_libraries] {
        const Clock::time_point began = Clock::now();
        WarmUpGpus(devices).IgnoreError();
        *took = Clock::now() - began;
      };
      products_warmed = std::async(std::launch::async, warm_up);
    }
    // The test split first: it gives the model its input shape and classes.
    MT_ASSIGN_OR_RETURN(t->test_data_, test_split.get());
    const Clock::time_point model_began = Clock::now();
    MT_RETURN_IF_ERROR(
        CheckTestSplit(config.model, t->test_data_, !shapes_only));
    MT_ASSIGN_OR_RETURN(const models::ModelDef def,
                        ModelDefinition(config.model, t->test_data_));
    MT_RETURN_IF_ERROR(CheckTokenIds(def, config.data, t->test_data_));
    const bool mirrored =
        t->placement() == distribute::VariablePlacement::kMirrored;
    for (const Device& device : t->strategy_->devices()) {
      MT_ASSIGN_OR_RETURN(Replica r, t->BuildReplica(def, device, mirrored));
      t->replicas_.push_back(std::move(r));
    }
    // A device list never mixes CPUs and GPUs (ResolveDevices).
    const absl::Status recordable = t->strategy_->CanCaptureRuns();
    t->cuda_graph_ = DecideCudaGraph(
        config, {.replicas_on_gpus = t->strategy_->devices()[0].is_cuda(),
                 .mirrored_variables = mirrored,
                 .strategy_reason = std::string(recordable.message())});
    if (mirrored) {
      std::vector<std::vector<Variable*>> states;
      for (int r = 0; r < t->num_replicas(); ++r) {
        states.push_back(t->ReplicaState(r));
      }
      MT_ASSIGN_OR_RETURN(t->mirrored_,
                          distribute::MirrorReplicaStates(states));
    } else {
      MT_ASSIGN_OR_RETURN(
          Replica state,
          t->BuildReplica(def, t->strategy_->variables_device(), true));
      t->state_ = std::make_unique<Replica>(std::move(state));
    }
    if (t->placement() == distribute::VariablePlacement::kParameterServers) {
      const auto& ps =
          static_cast<const distribute::ParameterServerStrategy&>(*t->strategy_)
              .options();
      const std::vector<Variable*> vars = t->state_->model->variables();
      std::vector<Shape> shapes;
      for (const Variable* v : vars) shapes.push_back(v->shape());
      std::optional<ParameterServerShards::EmaOptions> ema;
      if (config.ema.decay) {
        ema = {{*config.ema.decay, config.ema.use_num_updates}};
      }
      MT_ASSIGN_OR_RETURN(
          t->ps_,
          ParameterServerShards::Create(
              vars,
              distribute::PartitionVariables(
                  shapes, sizeof(float), static_cast<int>(ps.ps_devices.size()),
                  ps.min_shard_bytes),
              ps.ps_devices,
              [&config] { return MakeConfiguredOptimizer(config.optimizer); },
              ema));
      t->async_window_ = std::make_unique<AsyncWindow>();
      t->async_window_->pushes.assign(t->num_replicas(), 0);
    }
    t->startup_.model = Clock::now() - model_began;
    if (need_train_data) {
      MT_ASSIGN_OR_RETURN(t->train_data_, train_split.get());
      MT_RETURN_IF_ERROR(CheckTokenIds(def, config.data, t->train_data_));
      // Said with the keys that cause it (BatchIterator would name itself).
      if (config.data.drop_remainder &&
          t->train_data_.size() < config.data.global_batch_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.global_batch_size: ", config.data.global_batch_size,
            " is more than the ", t->train_data_.size(), " examples of ",
            t->train_data_.name,
            ", and data.drop_remainder: true leaves no batch"));
      }
      BatchIteratorOptions opt;
      opt.batch_size = config.data.global_batch_size;
      opt.shuffle = config.data.shuffle;
      opt.drop_remainder = config.data.drop_remainder;
      opt.seed = static_cast<uint64_t>(config.seed);
      opt.prefetch = config.data.prefetch;
      opt.augment = config.data.augment;
      MT_RETURN_IF_ERROR(
          CheckAugmentable(opt.augment, t->train_data_.images.shape()));
      const bool async =
          t->placement() == distribute::VariablePlacement::kParameterServers;
      // Asynchronous workers take whole batches, copied in their own step.
      if (t->strategy_->devices()[0].is_cuda() && !async) {
        MT_ASSIGN_OR_RETURN(
            t->stager_,
            DeviceStager::Create(t->strategy_->devices(),
                                 t->strategy_->first_replica(),
                                 t->strategy_->num_replicas_in_sync()));
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
      // parameter_server: every worker its own shuffle of the data (TF's
      // per-worker datasets); worker 0's is the one a single device reads.
      for (int w = 1; async && w < t->num_replicas(); ++w) {
        BatchIteratorOptions worker = opt;
        worker.seed = StepSeed(opt.seed, -1 - w);
        MT_ASSIGN_OR_RETURN(std::unique_ptr<BatchIterator> input,
                            BatchIterator::Create(&t->train_data_, worker));
        t->worker_iterators_.push_back(std::move(input));
      }
      MT_RETURN_IF_ERROR(t->TotalSteps().status());
    }
    // Restore before writing anything, so a bad checkpoint leaves the run
    // directory as it was.
    if (need_train_data) MT_RETURN_IF_ERROR(t->RestoreForTraining());
    return absl::OkStatus();
  }();
  MT_RETURN_IF_ERROR(processes->AgreedStatus(built));
  if (need_train_data && processes->size() > 1) {
    MT_RETURN_IF_ERROR(t->SyncFromChief());
  }
  MT_RETURN_IF_ERROR(t->WaitForLoopThreadWork());
  if (!t->run_dir_.empty()) {
    t->run_dir_lock_->KeepFiles();
    MT_RETURN_IF_ERROR(
        WriteFileAtomically(run_dir + "/config.yaml", config.resolved_yaml));
    MT_ASSIGN_OR_RETURN(
        t->logger_,
        MetricsLogger::Create(run_dir, t->restored_from_.empty()
                                           ? std::nullopt
                                           : std::optional(t->global_step())));
  }
  return t;
}

absl::StatusOr<Trainer::Replica> Trainer::BuildReplica(
    const models::ModelDef& def, Device device, bool with_state) const {
  Replica r;
  MT_ASSIGN_OR_RETURN(r.model, models::Model::Build(def, config_.seed, device));
  MT_ASSIGN_OR_RETURN(const MatMulPrecision precision,
                      ParseMatMulPrecision(config_.precision));
  r.model->SetMixedBFloat16(precision == MatMulPrecision::kBf16);
  MT_RETURN_IF_ERROR(CheckClassifier(*r.model, test_data_));
  MT_ASSIGN_OR_RETURN(r.index_checks, ops::IndexCheckRecord::Create(device));
  if (!with_state) return r;
  MT_ASSIGN_OR_RETURN(r.optimizer, MakeConfiguredOptimizer(config_.optimizer));
  MT_RETURN_IF_ERROR(r.optimizer->CreateSlots(r.model->trainable_variables()));
  if (config_.ema.decay.has_value()) {
    r.ema = std::make_unique<ExponentialMovingAverage>(
        *config_.ema.decay, config_.ema.use_num_updates);
    MT_RETURN_IF_ERROR(r.ema->Track(r.model->trainable_variables()));
  }
  return r;
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
  const double norm = HostValue(global_norm);
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

absl::StatusOr<std::vector<Tensor>> Trainer::ComputeGradients(
    distribute::ReplicaContext& ctx, Replica& r,
    absl::Span<const Batch> micro_batches, uint64_t step_seed,
    const GraphInputs* graph) {
  // The loss is divided by the labels (examples, or tokens) of the whole
  // update, all micro-batches and replicas, so the summed gradients are the
  // gradient of the mean over the K-times-larger batch.
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
  // micro-batch's backward adds them before the one all-reduce.
  std::vector<Tensor> grads;
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
  MT_RETURN_IF_ERROR(ClipGradients(grads, &r.global_norm));
  return grads;
}

absl::Status Trainer::ApplyUpdate(Replica& target, std::vector<Tensor> grads,
                                  bool staged) {
  std::vector<Variable*> vars = target.model->trainable_variables();
  std::vector<GradAndVar> pairs;
  for (size_t i = 0; i < vars.size(); ++i) {
    // Central storage: the reduced gradients come to the central device.
    MT_ASSIGN_OR_RETURN(Tensor grad, grads[i].To(vars[i]->device()));
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

absl::Status Trainer::EagerReplicaStep(distribute::ReplicaContext& ctx,
                                       absl::Span<const Batch> micro_batches,
                                       int64_t step) {
  Replica& r = replicas_[ctx.replica_id()];
  MT_ASSIGN_OR_RETURN(
      std::vector<Tensor> grads,
      ComputeGradients(ctx, r, micro_batches, StepSeed(config_.seed, step)));
  if (placement() == distribute::VariablePlacement::kMirrored) {
    return ApplyUpdate(r, std::move(grads));
  }
  // Central storage: every replica holds the reduced gradients; replica 0
  // applies them, once. The others read the central state before the step
  // (LoadReplicaModels), so nothing reads it now.
  if (ctx.replica_id() != 0) return absl::OkStatus();
  MT_RETURN_IF_ERROR(ApplyUpdate(*state_, std::move(grads)));
  // The forward pass's own state (batch-norm moving statistics) is the same
  // on every replica (its statistics are all-reduced): keep replica 0's.
  const std::vector<Variable*> central = state_->model->variables();
  const std::vector<Variable*> mine = r.model->variables();
  for (size_t i = 0; i < central.size(); ++i) {
    if (!central[i]->trainable()) {
      MT_RETURN_IF_ERROR(central[i]->Assign(mine[i]->value()));
    }
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
  std::vector<double> loss_sums(replicas, 0.0);
  std::vector<double> corrects(replicas, 0.0);
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
          MT_ASSIGN_OR_RETURN(Tensor logits, r.model->Call(images, {}));
          MT_ASSIGN_OR_RETURN(logits, logits.To(Device::Cpu()));
          // The sum of per-label losses: a "global batch" of 1.
          MT_ASSIGN_OR_RETURN(
              Tensor loss,
              models::SparseCategoricalCrossentropy(logits, labels, 1));
          loss_sums[id] += HostValue(loss);
          MT_ASSIGN_OR_RETURN(int64_t c, models::CountCorrect(logits, labels));
          corrects[id] += static_cast<double>(c);
        }
        if (swap) MT_RETURN_IF_ERROR(swap->Restore());
        return absl::OkStatus();
      }));
  // This process's sums, then (in rank order) every process's.
  double sums[2] = {
      distribute::Strategy::Reduce(distribute::ReduceOp::kSum, loss_sums),
      distribute::Strategy::Reduce(distribute::ReduceOp::kSum, corrects)};
  if (runner == strategy_.get()) {
    MT_RETURN_IF_ERROR(
        processes_->AllReduceSum(absl::MakeSpan(sums), "the evaluation sums"));
  }
  const double loss_sum = sums[0], correct = sums[1];
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

absl::Status Trainer::EvaluateAndLog(int64_t step) {
  const int64_t steps_per_epoch = StepsPerEpoch();
  std::vector<bool> which;  // Raw (false) and EMA (true) weights.
  if (!primary().ema || config_.ema.evaluate_raw) which.push_back(false);
  if (primary().ema) which.push_back(true);
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

absl::Status Trainer::SyncFromChief() {
  // The chief's step, input position and split sizes; `restored`: whether
  // it restored a checkpoint. (Create compared the configs already.)
  const BatchIterator::Position pos = train_iterator_->position();
  const int64_t train_examples = train_data_.size();
  const int64_t test_examples = test_data_.size();
  int64_t header[6] = {global_step(),  pos.epoch,
                       pos.batch,      restored_from_.empty() ? 0 : 1,
                       train_examples, test_examples};
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
  if (processes_->chief()) return absl::OkStatus();
  for (Replica& r : replicas_) r.optimizer->set_iterations(header[0]);
  MT_RETURN_IF_ERROR(train_iterator_->Seek({header[1], header[2]}));
  last_saved_step_ = header[0];
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
