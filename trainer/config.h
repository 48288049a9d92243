// The job configuration: a YAML file validated against a fixed schema, with
// `--set key.path=value` overrides (DESIGN.md, "Config").
//
// Every key has a type and a default; unknown keys, wrong types and
// out-of-range values are InvalidArgument errors of one line naming the file
// (or the --set argument), the dotted key and the problem.
#ifndef MIRRORTRAIN_TRAINER_CONFIG_H_
#define MIRRORTRAIN_TRAINER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/layer_registry.h"
#include "models/losses.h"
#include "tensor/params.h"
#include "trainer/data/augment.h"
#include "trainer/data/normalize.h"

namespace mirrortrain::trainer {

// The sections of components chosen by name (a data source, a model preset
// or layer list, an optimizer, a schedule) keep their own keys as Params,
// checked against the schema the component registered next to its code.

struct DataConfig {
  std::string name;  // A registered data source (trainer/data/data_source.h).
  Params source;     // Its own keys (data.dir, ...).
  int64_t global_batch_size = 0;
  bool shuffle = false;
  bool drop_remainder = false;
  // Use only the first N examples of a split (0: all); for quick runs.
  int64_t train_examples = 0;
  int64_t test_examples = 0;
  int prefetch = 0;
  NormalizeOptions normalize;  // data.normalize: both splits, at load.
  AugmentOptions augment;      // data.augment: training batches only.
};

struct ModelConfig {
  // A registered preset (models/presets.h) and its keys, or "" when the
  // config lists `layers` itself.
  std::string preset;
  Params preset_params;
  std::vector<models::LayerSpec> layers;
  // One example's shape; empty: the data source's.
  std::vector<int64_t> input_shape;
};

struct OptimizerConfig {
  std::string name;  // A registered optimizer (trainer/optim/optimizers.h).
  Params params;     // Its own keys (momentum, beta1, ...).
  double learning_rate = 0;
  std::string schedule;    // A registered schedule (lr_schedule.h).
  Params schedule_params;  // Its keys plus warmup_steps.
  // Coupled weight decay on weights of rank >= 2 (grad += l2 * w).
  double l2_regularization = 0;
  std::optional<double> clip_global_norm;
  std::optional<double> clip_norm;   // Per tensor.
  std::optional<double> clip_value;  // Elementwise to [-v, v].
};

struct LossConfig {
  std::string name = models::kDefaultLoss;  // A registered models::LossType.
  // The loss's own keys (its LossType::params; `name` too once parsed),
  // checked, defaults filled: label_smoothing for the classification
  // losses, Huber's delta.
  Params params = models::DefaultLossParams(models::kDefaultLoss);
};

// One of `metrics` (models::MetricType): its name and keys.
struct MetricConfig {
  std::string name;
  // What evaluation reports it as: its name, or a repeat's name_1, name_2,
  // ... (Keras's).
  std::string reported;
  Params params;  // Checked, defaults filled.
};

struct EmaConfig {
  std::optional<double> decay;  // Absent: no EMA.
  bool use_num_updates = false;
  bool evaluate_raw = true;  // Evaluations also on the raw weights.
};

struct DistributeConfig {
  std::string strategy;  // distribute::StrategyNames()
  std::vector<std::string> devices;
  std::string cross_device_ops;  // auto | nccl | local
  int64_t bucket_bytes = 0;
  std::string communication_priority;  // high | normal
  bool sum_in_update = true;  // mirrored: logical replicas share gradients
  int64_t check_replicas_every_steps = 0;  // 0: never.
  double watchdog_seconds = 0;
  std::string variables_device;         // central_storage
  std::vector<std::string> ps_devices;  // parameter_server
  int64_t ps_min_shard_bytes = 0;
  std::optional<int64_t> max_staleness;  // Unset: unbounded.
};

struct TrainConfig {
  std::optional<int64_t> epochs;
  std::optional<int64_t> steps;  // Wins over epochs when set.
  int64_t log_every_steps = 0;
  int64_t eval_every_epochs = 0;
  int64_t eval_every_steps = 0;  // 0: by epochs (and at the end) only.
  // Early stopping (trainer/early_stopping.h): null patience is off.
  std::optional<int64_t> early_stopping_patience;
  // loss, or the loss's metric (accuracy | mean_absolute_error).
  std::string early_stopping_monitor = "loss";
  double early_stopping_min_delta = 0;
  // Micro-batches (of data.global_batch_size) per optimizer step: their
  // gradients are summed locally and all-reduced once.
  int64_t accumulation_steps = 1;
  // auto | off: GPU steps replayed as a captured CUDA graph where the step
  // allows it (trainer/cuda_graph_policy.h); CPU steps are always eager.
  std::string cuda_graph = "auto";
};

struct CheckpointConfig {
  int64_t every_steps = 0;  // 0: only at the end and on signals.
  int64_t max_to_keep = 0;
  std::string restore;  // latest | none | a checkpoint path
  // A checkpoint (file or directory) whose model weights start a run that
  // restores nothing of its own; empty: none (TF Estimator's
  // warm_start_from).
  std::string warm_start_from;
  // Which model variables it starts: those whose whole name this
  // ECMAScript regular expression matches (TF's vars_to_warm_start); the
  // others keep their initializers.
  std::string warm_start_vars = ".*";
  // raw: the source's weights; ema: its EMA shadow where it holds one (the
  // variables its run trained), its weights for the others.
  std::string warm_start_weights = "raw";
  // (entry name in the source, model variable) for the variables saved
  // there under another name; the others are found under their own.
  StringMap warm_start_names;
  // Restore checkpoints holding NaN or infinity instead of rejecting them.
  bool allow_non_finite = false;
};

struct Config {
  std::string name;  // From the file name; names the default run dir.
  int64_t seed = 0;
  // fp32 | tf32 (GPU matrix products) | bf16 (TensorFlow's mixed_bfloat16:
  // tensor/matmul_precision.h, Model::SetMixedBFloat16).
  std::string precision;
  DataConfig data;
  ModelConfig model;
  LossConfig loss;
  // Evaluation's metrics beside the loss's own (Keras's compile(metrics=)).
  std::vector<MetricConfig> metrics;
  OptimizerConfig optimizer;
  EmaConfig ema;
  DistributeConfig distribute;
  TrainConfig train;
  CheckpointConfig checkpoint;

  // The fully resolved YAML (defaults and overrides applied) and its hash.
  std::string resolved_yaml;
  uint64_t hash = 0;
};

// A config file larger than this is refused: real ones are a few KiB.
inline constexpr uint64_t kMaxConfigBytes = 4 << 20;

// Loads `path` (a regular file), applies `overrides` ("dotted.key=yaml value"),
// validates.
absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides);
// The same from YAML text (tests; `source` names it in errors).
absl::StatusOr<Config> ParseConfig(const std::string& yaml_text,
                                   const std::string& source,
                                   const std::vector<std::string>& overrides);

// Every key a config may hold, with its type, default and doc, generated
// from the registrations (`mirrortrain config --schema`): Markdown tables,
// one per section and per registered component.
std::string SchemaMarkdown();

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CONFIG_H_
