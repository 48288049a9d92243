// Trainer::Create and what it builds from a config: the data splits, the
// model definition, the replicas and their state, the input pipeline.
#include <algorithm>
#include <chrono>
#include <future>
#include <optional>

#include "absl/strings/str_cat.h"
#include "distribute/device_set.h"
#include "distribute/mirrored_variable.h"
#include "distribute/parameter_server_strategy.h"
#include "distribute/strategy_factory.h"
#include "distribute/variable_partitioner.h"
#include "models/presets.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/index_checks.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/data/augment.h"
#include "trainer/data/data_source.h"
#include "trainer/data/normalize.h"
#include "trainer/gpu_warm_up.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"
#include "trainer/process_age.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

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

// The logits per example `loss` reads for `data`'s labels
// (LossType::output_shape), or its refusal of the data under loss.name.
absl::StatusOr<Shape> ExpectedOutput(const models::LossType& loss,
                                     const InMemoryDataset& data) {
  const Shape labels(data.labels.shape().begin() + 1,
                     data.labels.shape().end());
  absl::StatusOr<Shape> out = loss.output_shape(labels, data.num_classes);
  if (!out.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss.name: ", out.status().message()));
  }
  return out;
}

}  // namespace

absl::StatusOr<models::ModelDef> ModelDefinition(const ModelConfig& m,
                                                 const LossConfig& loss,
                                                 const InMemoryDataset& data) {
  models::ModelDef def;
  def.loss = loss.name;
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
  // A preset ends in a dense layer of as many units as the loss reads.
  MT_ASSIGN_OR_RETURN(const models::LossType* type,
                      models::FindLoss(loss.name));
  MT_ASSIGN_OR_RETURN(const Shape out, ExpectedOutput(*type, data));
  MT_ASSIGN_OR_RETURN(def.layers, preset->expand(m.preset_params, out.back()));
  return def;
}

namespace {

// Training a model with variables but none trainable would fail at its
// first update (nothing has a gradient); such a model still evaluates.
absl::Status CheckSomethingTrains(const models::Model& model) {
  if (model.variables().empty() || !model.trainable_variables().empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      model.has_frozen_layers()
          ? "model.layers: every layer with variables is frozen (trainable: "
            "false), so nothing would train"
          : "model: none of its variables is trainable, so nothing would "
            "train");
}

// The model must map an example to the logits its loss reads for the
// example's labels (LossType::output_shape): for the categorical loss
// [classes] for one label per example, [T, classes] for sequences of T
// labels.
absl::Status CheckClassifier(const models::Model& model,
                             const models::LossType& loss,
                             const InMemoryDataset& data) {
  const Shape& out = model.output_shape();
  MT_ASSIGN_OR_RETURN(const Shape expected, ExpectedOutput(loss, data));
  if (out != expected) {
    const std::string needs =
        expected.size() == 1 && loss.name == models::kDefaultLoss
            ? absl::StrCat("the data has ", data.num_classes, " classes")
            : absl::StrCat(
                  "the data needs ", ShapeToString(expected), " (",
                  loss.name == models::kDefaultLoss
                      ? "one logit per class and label"
                      : absl::StrCat(loss.name, loss.output_activation.empty()
                                                    ? ": one output per target"
                                                    : ": one logit per label"),
                  ")");
    // More axes than the labels have: a flatten (or a global pooling) is
    // probably missing before the classifier; a dense layer keeps the
    // other axes (Keras's last-axis Dense).
    const std::string units = absl::StrCat(
        expected.back(), expected.back() == 1 ? " unit" : " units");
    std::string hint;
    if (out.size() > expected.size()) {
      hint = absl::StrCat(
          " (flatten or pool the features before a last dense layer of ", units,
          ")");
    } else if (out.size() == expected.size() &&
               std::equal(out.begin(), out.end() - 1, expected.begin())) {
      hint = absl::StrCat(" (end with a dense layer of ", units, ")");
    }
    // The output may be right for these labels under another loss (two
    // logits for one 0/1 label are the categorical loss's).
    for (const models::LossType* other :
         models::LossRegistry::Global().Entries()) {
      // Class labels are not named a regression's targets (its one output
      // per label fits them all).
      if (data.num_classes > 0 && other->output_activation.empty()) continue;
      absl::StatusOr<Shape> fits = ExpectedOutput(*other, data);
      if (other != &loss && fits.ok() && *fits == out) {
        hint = absl::StrCat(" (loss.name: ", other->name,
                            " reads this output for these labels)");
      }
    }
    // Several 0/1 labels per example under the categorical loss: one-hot
    // classes, or multi-label data.
    if (loss.name == models::kDefaultLoss && expected.size() > 1 &&
        data.num_classes <= 2) {
      hint =
          " (the labels are 0/1, several per example: one-hot labels want "
          "their class index, y.argmax(-1); multi-label ones loss.name: "
          "binary_crossentropy)";
    }
    return absl::InvalidArgumentError(
        absl::StrCat("model: the last layer gives ", ShapeToString(out),
                     " per example but ", needs, hint));
  }
  return absl::OkStatus();
}

// Token ids from files (npz) for a model whose first layer is an
// embedding (models::TokenIdLayer, also first inside a container): checked when
// the split is loaded, naming the example, not at the first step whose batch
// holds a bad one (after the run directory got its files). The embedding
// truncates ids to integers (Keras's cast), so an id is good when it truncates
// into [0, input_dim). The text source's bytes are checked against input_dim
// when the model is built.
absl::Status CheckTokenIds(const models::ModelDef& def, const DataConfig& d,
                           const InMemoryDataset& data) {
  // The reader of the fewest ids names the range (two branches may each
  // start with an embedding).
  const models::LayerSpec* reader = nullptr;
  for (const models::LayerSpec* r : models::TokenIdLayers(def.layers)) {
    if (reader == nullptr ||
        r->params.Int("input_dim") < reader->params.Int("input_dim")) {
      reader = r;
    }
  }
  if (reader == nullptr || data.bytes_as_tokens) return absl::OkStatus();
  const std::string layer = absl::StrCat(reader->path, " (", reader->type, ")");
  // Ids are not measurements (as the text source's): normalizing or
  // augmenting them would pick other rows.
  for (const auto& [key, on] : {std::pair{"normalize", d.normalize.enabled()},
                                std::pair{"augment", d.augment.enabled()}}) {
    if (on) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.", key, ": ", layer,
          " reads the data as token ids, which are not ",
          key == std::string("normalize") ? "normalized" : "augmented",
          " (remove data.", key, ")"));
    }
  }
  const double input_dim = static_cast<double>(reader->params.Int("input_dim"));
  const float* x = data.images.data<float>();
  const int64_t n = data.images.num_elements();
  const int64_t per_example =
      data.images.dim(0) > 0 ? n / data.images.dim(0) : 1;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > -1.0f && x[i] < input_dim) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "data: ", data.origin.empty() ? data.name : data.origin, ": example ",
        i / per_example, " holds ", x[i], " at position ", i % per_example,
        ", not a token id in [0, ", input_dim, ") of ", layer));
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
// The devices and options distribute::MakeStrategy takes, from the config.
struct StrategyInputs {
  std::vector<Device> devices;
  distribute::StrategyOptions options;
};

absl::StatusOr<StrategyInputs> StrategyInputsOf(
    const DistributeConfig& dist, distribute::ProcessGroup* processes) {
  StrategyInputs in;
  MT_ASSIGN_OR_RETURN(in.devices, distribute::ResolveDevices(dist.devices));
  MT_ASSIGN_OR_RETURN(
      const cuda::StreamPriority communication_priority,
      distribute::ParseStreamPriority(dist.communication_priority));
  in.options.mirrored = {dist.cross_device_ops, dist.bucket_bytes,
                         dist.watchdog_seconds, communication_priority};
  MT_ASSIGN_OR_RETURN(in.options.variables_device,
                      ParseDevice(dist.variables_device));
  MT_ASSIGN_OR_RETURN(in.options.parameter_server.ps_devices,
                      distribute::ResolveDevices(dist.ps_devices));
  in.options.parameter_server.max_staleness = dist.max_staleness.value_or(-1);
  in.options.parameter_server.min_shard_bytes = dist.ps_min_shard_bytes;
  in.options.processes = processes;
  return in;
}

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
                      ModelDefinition(config.model, config.loss, data));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                      models::Model::Build(def, config.seed, Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const models::LossType* loss,
                      models::FindLoss(config.loss.name));
  MT_RETURN_IF_ERROR(CheckClassifier(*model, *loss, data));
  MT_RETURN_IF_ERROR(CheckSomethingTrains(*model));
  // What `train` checks of the data before its first step, on the split
  // loaded here (the training split's examples are not read).
  MT_RETURN_IF_ERROR(CheckTokenIds(def, config.data, data));
  MT_RETURN_IF_ERROR(
      CheckAugmentable(config.data.augment, data.images.shape()));
  return model->Summary();
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
  MT_ASSIGN_OR_RETURN(t->loss_, models::FindLoss(config.loss.name));
  for (const MetricConfig& m : config.metrics) {
    MT_ASSIGN_OR_RETURN(const models::MetricType* type,
                        models::FindMetric(m.name));
    t->metrics_.push_back(type);
  }
  t->data_needs_ = data;
  // Only training watches; eval, sample and predict leave the state be.
  if (const auto& patience = config.train.early_stopping_patience;
      patience && data == DataNeeds::kTrainAndTest) {
    const std::string& monitor = config.train.early_stopping_monitor;
    bool maximize = monitor == "accuracy";
    for (size_t i = 0; i < config.metrics.size(); ++i) {
      if (config.metrics[i].reported != monitor) continue;
      if (!t->metrics_[i]->maximize.has_value()) {
        return absl::InternalError(
            absl::StrCat("metric ", t->metrics_[i]->name,
                         " does not say whether it improves rising or falling "
                         "(MetricType::maximize)"));
      }
      maximize = *t->metrics_[i]->maximize;
    }
    t->early_stopping_.emplace(EarlyStopping::Options{
        .patience = *patience,
        .maximize = maximize,
        .min_delta = config.train.early_stopping_min_delta,
        .watch = absl::StrCat(config.ema.decay ? "EMA " : "", "test ",
                              config.train.early_stopping_monitor)});
  }
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
  StrategyInputs plan;
  // A device one host lacks fails there alone: agreed before the strategy's
  // first collective.
  const absl::Status devices_found = [&]() -> absl::Status {
    // Validated by the config; process-wide, like TensorFlow's switch.
    MT_ASSIGN_OR_RETURN(MatMulPrecision precision,
                        ParseMatMulPrecision(config.precision));
    SetMatMulPrecision(precision);
    MT_ASSIGN_OR_RETURN(plan, StrategyInputsOf(config.distribute, processes));
    return absl::OkStatus();
  }();
  MT_RETURN_IF_ERROR(processes->AgreedStatus(devices_found));
  // A failure some processes meet alone in it (after its own agreed
  // checks) is agreed too.
  auto strategy = distribute::MakeStrategy(config.distribute.strategy,
                                           plan.devices, plan.options);
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
    if (plan.devices[0].is_cuda()) {
      // `took` outlives the thread: the future, declared after `t`, is
      // destroyed (and waits) first.
      auto warm_up = [devices = plan.devices,
                      took = &t->startup_.gpu_libraries] {
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
    MT_ASSIGN_OR_RETURN(
        const models::ModelDef def,
        ModelDefinition(config.model, config.loss, t->test_data_));
    MT_RETURN_IF_ERROR(CheckTokenIds(def, config.data, t->test_data_));
    MT_RETURN_IF_ERROR(t->BuildState(def));
    t->startup_.model = Clock::now() - model_began;
    if (need_train_data) {
      MT_ASSIGN_OR_RETURN(t->train_data_, train_split.get());
      MT_RETURN_IF_ERROR(t->PrepareTrainingInput(def));
      // Restore before writing anything, so a bad checkpoint leaves the run
      // directory as it was.
      MT_RETURN_IF_ERROR(t->RestoreForTraining());
    }
    return absl::OkStatus();
  }();
  // A GPU the build has no kernels for fails the build's (or else the first
  // step's) first kernel with the runtime's "no kernel image": said as what
  // it is, ahead of what it broke. Cheap: the contexts exist by now.
  absl::Status ready = built;
  if (plan.devices[0].is_cuda()) {
    std::vector<int> gpus;
    for (const Device& d : plan.devices) gpus.push_back(d.index);
    if (absl::Status images = cuda::CheckKernelImages(gpus); !images.ok()) {
      ready = images;
    }
  }
  MT_RETURN_IF_ERROR(processes->AgreedStatus(ready));
  if (need_train_data && processes->size() > 1) {
    MT_RETURN_IF_ERROR(t->SyncFromChief());
  }
  MT_RETURN_IF_ERROR(t->WaitForLoopThreadWork());
  if (!t->run_dir_.empty()) {
    if (need_train_data) MT_RETURN_IF_ERROR(t->CheckCheckpointsWritable());
    MT_RETURN_IF_ERROR(
        WriteFileAtomically(run_dir + "/config.yaml", config.resolved_yaml));
    // The run has written: from here its files stay, whatever fails.
    t->run_dir_lock_->KeepFiles();
    MT_ASSIGN_OR_RETURN(
        t->logger_,
        MetricsLogger::Create(run_dir, t->restored_from_.empty()
                                           ? std::nullopt
                                           : std::optional(t->global_step())));
  }
  return t;
}

absl::Status Trainer::BuildState(const models::ModelDef& def) {
  const bool mirrored = placement() == distribute::VariablePlacement::kMirrored;
  for (const Device& device : strategy_->devices()) {
    MT_ASSIGN_OR_RETURN(Replica r, BuildReplica(def, device, mirrored));
    replicas_.push_back(std::move(r));
  }
  // A device list never mixes CPUs and GPUs (ResolveDevices).
  const absl::Status recordable = strategy_->CanCaptureRuns();
  cuda_graph_ = DecideCudaGraph(
      config_, {.replicas_on_gpus = strategy_->devices()[0].is_cuda(),
                .mirrored_variables = mirrored,
                .strategy_reason = std::string(recordable.message())});
  if (mirrored) {
    std::vector<std::vector<Variable*>> states;
    for (int r = 0; r < num_replicas(); ++r) {
      states.push_back(ReplicaState(r));
    }
    MT_ASSIGN_OR_RETURN(mirrored_, distribute::MirrorReplicaStates(states));
  } else {
    MT_ASSIGN_OR_RETURN(Replica state,
                        BuildReplica(def, strategy_->variables_device(), true));
    state_ = std::make_unique<Replica>(std::move(state));
  }
  if (placement() == distribute::VariablePlacement::kParameterServers) {
    const auto& ps =
        static_cast<const distribute::ParameterServerStrategy&>(*strategy_)
            .options();
    const std::vector<Variable*> vars = state_->model->variables();
    std::vector<Shape> shapes;
    for (const Variable* v : vars) shapes.push_back(v->shape());
    std::optional<ParameterServerShards::EmaOptions> ema;
    if (config_.ema.decay) {
      ema = {{*config_.ema.decay, config_.ema.use_num_updates}};
    }
    auto partitions = distribute::PartitionVariables(
        shapes, sizeof(float), static_cast<int>(ps.ps_devices.size()),
        ps.min_shard_bytes);
    auto make_optimizer = [optimizer = config_.optimizer] {
      return MakeConfiguredOptimizer(optimizer);
    };
    MT_ASSIGN_OR_RETURN(
        ps_, ParameterServerShards::Create(vars, state_->model->forward_state(),
                                           std::move(partitions), ps.ps_devices,
                                           make_optimizer, ema));
    async_window_ = std::make_unique<AsyncWindow>();
    async_window_->pushes.assign(num_replicas(), 0);
    async_window_->start.assign(num_replicas(), 0);
  }
  return absl::OkStatus();
}

absl::Status Trainer::PrepareTrainingInput(const models::ModelDef& def) {
  MT_RETURN_IF_ERROR(CheckTokenIds(def, config_.data, train_data_));
  // Said with the keys that cause it (BatchIterator would name itself).
  if (config_.data.drop_remainder &&
      train_data_.size() < config_.data.global_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.global_batch_size: ", config_.data.global_batch_size,
        " is more than the ", train_data_.size(), " examples of ",
        train_data_.name, ", and data.drop_remainder: true leaves no batch"));
  }
  BatchIteratorOptions opt;
  opt.batch_size = config_.data.global_batch_size;
  opt.shuffle = config_.data.shuffle;
  opt.drop_remainder = config_.data.drop_remainder;
  opt.seed = static_cast<uint64_t>(config_.seed);
  opt.prefetch = config_.data.prefetch;
  opt.augment = config_.data.augment;
  MT_RETURN_IF_ERROR(CheckAugmentable(opt.augment, train_data_.images.shape()));
  const bool async =
      placement() == distribute::VariablePlacement::kParameterServers;
  // Asynchronous workers take whole batches, copied in their own step.
  if (strategy_->devices()[0].is_cuda() && !async) {
    MT_ASSIGN_OR_RETURN(
        stager_,
        DeviceStager::Create(strategy_->devices(), strategy_->first_replica(),
                             strategy_->num_replicas_in_sync()));
    opt.stage = [stager = stager_.get()](Batch& batch) {
      return stager->Stage(batch);
    };
    opt.host_allocator = stager_->host_allocator();
  }
  absl::StatusOr<std::unique_ptr<BatchIterator>> it =
      BatchIterator::Create(&train_data_, opt);
  if (!it.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: ", it.status().message()));
  }
  train_iterator_ = *std::move(it);
  // parameter_server: every worker its own shuffle of the data (TF's
  // per-worker datasets); worker 0's is the one a single device reads.
  for (int w = 1; async && w < num_replicas(); ++w) {
    BatchIteratorOptions worker = opt;
    worker.seed = StepSeed(opt.seed, -1 - w);
    MT_ASSIGN_OR_RETURN(std::unique_ptr<BatchIterator> input,
                        BatchIterator::Create(&train_data_, worker));
    worker_iterators_.push_back(std::move(input));
  }
  MT_RETURN_IF_ERROR(TotalSteps().status());
  return absl::OkStatus();
}

absl::StatusOr<Trainer::Replica> Trainer::BuildReplica(
    const models::ModelDef& def, Device device, bool with_state) const {
  Replica r;
  MT_ASSIGN_OR_RETURN(r.model, models::Model::Build(def, config_.seed, device));
  MT_ASSIGN_OR_RETURN(const MatMulPrecision precision,
                      ParseMatMulPrecision(config_.precision));
  r.model->SetMixedBFloat16(precision == MatMulPrecision::kBf16);
  MT_RETURN_IF_ERROR(CheckClassifier(*r.model, *loss_, test_data_));
  if (data_needs_ == DataNeeds::kTrainAndTest) {
    MT_RETURN_IF_ERROR(CheckSomethingTrains(*r.model));
  }
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

}  // namespace mirrortrain::trainer
