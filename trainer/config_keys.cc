#include "trainer/config_keys.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/strategy_factory.h"
#include "models/layer_registry.h"
#include "models/losses.h"
#include "models/metrics.h"
#include "models/presets.h"
#include "trainer/config.h"
#include "trainer/data/data_source.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"

namespace mirrortrain::trainer::config_internal {

const ParamSchema& RootSchema() {
  static const auto* s = new ParamSchema{
      {Param::Int("seed").Default(1).Min(0).Doc(
           "initialisers, shuffling and dropout derive from it"),
       Param::String("precision")
           .Default("fp32")
           .OneOf({"fp32", "tf32", "bf16"})
           .Doc("fp32; tf32 (GPU matrix products on TensorFloat-32 tensor "
                "cores, CPUs stay fp32); bf16 (mixed_bfloat16: bf16 "
                "activations and matrix-product operands, f32 variables, "
                "sums and statistics; emulated on CPUs)")}};
  return *s;
}

const ParamSchema& DataSchema() {
  static const auto* s = new ParamSchema{
      {Param::String("name")
           .Default("fashion_mnist")
           .OneOf(DataSourceRegistry::Global().Names())
           .Doc("the data source (its keys follow)"),
       Param::Int("global_batch_size")
           .Default(128)
           .Min(1)
           .Doc("examples per step, split over the replicas (per "
                "micro-batch with train.accumulation_steps)"),
       Param::Bool("shuffle").Default(true).Doc(
           "reshuffle the training split every epoch"),
       Param::Bool("drop_remainder")
           .Default(false)
           .Doc("drop the last, smaller batch of an epoch"),
       Param::Int("train_examples")
           .Default(0)
           .Min(0)
           .Doc("use only the first N training examples (0: all)"),
       Param::Int("test_examples")
           .Default(0)
           .Min(0)
           .Doc("use only the first N test examples (0: all)"),
       Param::Int("prefetch")
           .Default(2)
           .Min(0)
           .Max(1 << 20)
           .Doc("batches gathered ahead on a background thread")}};
  return *s;
}

const ParamSchema& NormalizeSchema() {
  static const auto* s = new ParamSchema{
      {Param::FloatList("mean").Nullable().MinLength(1).InFloat32().Doc(
           "per channel, subtracted after scaling to [0, 1]; null: no "
           "normalisation"),
       Param::FloatList("std")
           .Nullable()
           .MinLength(1)
           .Min(0, false)
           .InFloat32()
           .Doc("per channel, divides after the mean is subtracted")},
      [](const Params& p) -> absl::Status {
        if (p.IsNull("mean") != p.IsNull("std")) {
          return absl::InvalidArgumentError(p.IsNull("mean")
                                                ? "mean: required with std"
                                                : "std: required with mean");
        }
        if (!p.IsNull("mean") &&
            p.FloatList("mean").size() != p.FloatList("std").size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("std: has ", p.FloatList("std").size(),
                           " values, mean has ", p.FloatList("mean").size()));
        }
        return absl::OkStatus();
      }};
  return *s;
}

const ParamSchema& AugmentSchema() {
  static const auto* s = new ParamSchema{
      {Param::Int("random_crop_padding")
           .Default(0)
           .Min(0)
           .Max(1024)
           .Doc("pad each side with N zeros (after data.normalize), crop back "
                "at a random offset (0: no crop)"),
       Param::Bool("horizontal_flip")
           .Default(false)
           .Doc("mirror left-right with probability 1/2"),
       Param::Float("random_erasing")
           .Default(0.0)
           .Min(0)
           .Max(1)
           .Doc("probability of setting a random rectangle to 0 after the "
                "crop and flip (torchvision's RandomErasing)"),
       Param::FloatList("erasing_scale")
           .Default(std::vector<double>{0.02, 0.33})
           .Min(0, false)
           .Max(1)
           .Doc("[lo, hi]: the erased area, a uniform fraction of the "
                "image's"),
       Param::FloatList("erasing_ratio")
           .Default(std::vector<double>{0.3, 3.3})
           .Min(0, false)
           .Doc("[lo, hi]: the erased height / width, log-uniform")},
      [](const Params& p) -> absl::Status {
        for (const char* key : {"erasing_scale", "erasing_ratio"}) {
          const std::vector<double> range = p.FloatList(key);
          if (range.size() != 2 || range[0] > range[1]) {
            return absl::InvalidArgumentError(
                absl::StrCat(key, ": must be [lo, hi] with lo <= hi, got [",
                             absl::StrJoin(range, ", "), "]",
                             range.size() != 2 ? " (two values needed)" : ""));
          }
        }
        return absl::OkStatus();
      }};
  return *s;
}

const ParamSchema& ModelSchema() {
  static const auto* s = new ParamSchema{
      {Param::String("name")
           .Nullable()
           .OneOf(models::PresetRegistry::Global().Names())
           .Doc("a preset (its keys follow); null with `layers`, mlp when "
                "both are absent"),
       Param::IntList("input_shape")
           .Nullable()
           .MinLength(1)
           .Min(1)
           .Max(kMaxDimension)
           .Doc("one example's shape; null: the data source's")}};
  return *s;
}

const ParamSchema& LossSchema() {
  static const auto* s =
      new ParamSchema{{Param::String("name")
                           .Default(models::kDefaultLoss)
                           .OneOf(models::LossRegistry::Global().Names())
                           .Doc("the loss; its keys follow")}};
  return *s;
}

const ParamSchema& MetricSchema() {
  static const auto* s =
      new ParamSchema{{Param::String("name")
                           .OneOf(models::MetricRegistry::Global().Names())
                           .Doc("the metric; its keys follow")}};
  return *s;
}

const ParamSchema& OptimizerSchema() {
  static const auto* s = new ParamSchema{
      {Param::String("name")
           .Default("momentum")
           .OneOf(OptimizerRegistry::Global().Names())
           .Doc("the optimizer (its keys follow)"),
       Param::Float("learning_rate")
           .Nullable()
           .Min(0, false)
           .InFloat32()
           .Doc("peak rate of the schedule; null: the optimizer's Keras "
                "default (its table says which); null with "
                "piecewise_constant, whose values are the rates"),
       Param::Float("l2_regularization")
           .Default(0.0)
           .Min(0)
           .InFloat32()
           .Doc("adds l2 * w to the gradient of every weight of rank >= 2 "
                "but biases (kernels, embeddings; not biases, attention's "
                "included, or normalization parameters) after the "
                "all-reduce: PyTorch SGD's weight_decay, a Keras l2(l2 / 2) "
                "kernel regularizer (the logged loss leaves the penalty "
                "out; Keras's adds it)"),
       Param::Float("clip_global_norm")
           .Nullable()
           .Min(0, false)
           .InFloat32()
           .Doc("clip all gradients by their global norm (after the "
                "all-reduce)"),
       Param::Float("clip_norm")
           .Nullable()
           .Min(0, false)
           .InFloat32()
           .Doc("clip each gradient by its norm"),
       Param::Float("clip_value")
           .Nullable()
           .Min(0, false)
           .InFloat32()
           .Doc("clip each gradient element to [-v, v]")}};
  return *s;
}

const ParamSchema& ScheduleSchema() {
  static const auto* s = new ParamSchema{
      {Param::String("name")
           .Default("constant")
           .OneOf(ScheduleRegistry::Global().Names())
           .Doc("the learning-rate schedule (its keys follow)")}};
  return *s;
}

const ParamSchema& EmaSchema() {
  static const auto* s = new ParamSchema{
      {Param::Float("decay").Nullable().Min(0).Max(1).Doc(
           "absent or null: no EMA (DESIGN.md; as Keras's use_ema=False)"),
       Param::Bool("use_num_updates")
           .Default(true)
           .Doc("decay = min(decay, (1+n)/(10+n)) with n the step"),
       Param::Bool("evaluate_raw")
           .Default(true)
           .Doc("evaluations also run on the raw weights (false: the EMA "
                "weights only, one test pass instead of two)")}};
  return *s;
}

const ParamSchema& DistributeSchema() {
  static const auto* s = new ParamSchema{
      {Param::String("strategy")
           .Default("mirrored")
           .OneOf(distribute::StrategyNames())
           .Doc("how the devices share the job"),
       Param::StringList("devices")
           .Default(std::vector<std::string>{"cpu:0"})
           .MinLength(1)
           .Doc("cpu:K (logical CPU devices), gpu:K (twice: two logical "
                "replicas on one GPU), or all_gpus"),
       Param::String("cross_device_ops")
           .Default("auto")
           .OneOf(distribute::CrossDeviceOpsNames())
           .Doc("mirrored, central_storage: how gradients are summed; none "
                "skips the all-reduce (replicas drift apart: only for "
                "measuring what communication costs)"),
       Param::Int("bucket_bytes")
           .Default(26214400)
           .Min(1)
           .Doc("mirrored, central_storage: gradient bucket size (the first "
                "bucket is 1 MiB)"),
       Param::String("communication_priority")
           .Default("high")
           .OneOf(distribute::StreamPriorityNames())
           .Doc("mirrored, central_storage on GPUs: the priority of the "
                "replicas' communication streams; "
                "high schedules a reduction's blocks ahead of backward "
                "kernels queued before it"),
       Param::Bool("sum_in_update")
           .Default(true)
           .Doc("mirrored: two or three logical replicas of one device "
                "(cpu:K, or a GPU listed more than once) sum each other's "
                "gradients in the optimizer update instead of all-reducing "
                "them (the same bits, without the reduction's pass over "
                "every copy); not with gradient clipping or "
                "l2_regularization, which read the sum"),
       Param::Int("check_replicas_every_steps")
           .Default(0)
           .Min(0)
           .Doc("check every N steps that all replicas are bitwise "
                "identical (0: never; one_device and mirrored)"),
       Param::Float("watchdog_seconds")
           .Default(300.0)
           .Min(0.001)
           .Max(1e6)
           .Doc("a replica that does not reach a collective in time stops "
                "the run"),
       Param::String("variables_device")
           .Default("cpu:0")
           .Doc("central_storage: the device holding the one copy of "
                "variables, slots and EMA"),
       Param::StringList("ps_devices")
           .Default(std::vector<std::string>{"cpu:0"})
           .MinLength(1)
           .Doc("parameter_server: the host devices (cpu:K) the variables "
                "are partitioned over, round-robin"),
       Param::Int("ps_min_shard_bytes")
           .Default(262144)
           .Min(1)
           .Doc("parameter_server: a variable is cut along its first axis "
                "into at most one partition per ps device, none smaller "
                "than this (TF's MinSizePartitioner)"),
       Param::Int("max_staleness")
           .Nullable()
           .Min(0)
           .Doc("parameter_server: no update is applied more than N "
                "updates stale; workers wait instead (null: unbounded)")}};
  return *s;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>&
StrategyKeys() {
  static const auto* keys = [] {
    const std::vector<std::string> reducing = {"mirrored", "central_storage"};
    const std::vector<std::string> servers = {"parameter_server"};
    return new std::vector<std::pair<std::string, std::vector<std::string>>>{
        {"cross_device_ops", reducing},
        {"bucket_bytes", reducing},
        {"communication_priority", reducing},
        {"sum_in_update", {"mirrored"}},
        {"variables_device", {"central_storage"}},
        {"ps_devices", servers},
        {"ps_min_shard_bytes", servers},
        {"max_staleness", servers}};
  }();
  return *keys;
}

const ParamSchema& TrainSchema() {
  static const auto* s = new ParamSchema{
      {Param::Int("epochs").Default(10).Nullable().Min(1).Doc(
           "passes over the training split"),
       Param::Int("steps").Nullable().Min(1).Doc(
           "optimizer steps; wins over epochs when set"),
       Param::Int("log_every_steps")
           .Default(100)
           .Min(1)
           .Doc("train metrics every N steps"),
       Param::Int("eval_every_epochs")
           .Default(1)
           .Min(0)
           .Doc("evaluate on the test split every N epochs (0: not by "
                "epochs; the last step is always evaluated)"),
       Param::Int("eval_every_steps")
           .Default(0)
           .Min(0)
           .Doc("also evaluate every N optimizer steps (0: never by steps; "
                "TF Estimator's eval every N steps, for runs of few long "
                "epochs)"),
       Param::Int("early_stopping_patience")
           .Nullable()
           .Min(0)
           .Doc("stop training after an evaluation that did not improve "
                "the monitored test metric once N evaluations passed "
                "since its best (Keras's EarlyStopping; null: never)"),
       Param::String("early_stopping_monitor")
           .Default("loss")
           .Doc("the test metric early stopping watches (of the EMA "
                "weights when there is an EMA): the loss, the loss's "
                "metric (accuracy for classification, "
                "mean_absolute_error for regression), or a `metrics` "
                "entry's name as evaluation reports it; accuracies rise, "
                "the others fall"),
       Param::Float("early_stopping_min_delta")
           .Default(0.0)
           .Min(0)
           .Doc("an improvement must beat the best by more than this"),
       Param::Int("accumulation_steps")
           .Default(1)
           .Min(1)
           .Doc("micro-batches of data.global_batch_size whose gradients "
                "are summed locally, then across the replicas once, for one "
                "optimizer step"),
       Param::String("cuda_graph")
           .Default("auto")
           .OneOf({"auto", "off"})
           .Doc("auto: on GPUs, replay each step as one captured CUDA graph "
                "where the step allows it (README); off: launch every "
                "kernel")}};
  return *s;
}

const ParamSchema& CheckpointSchema() {
  static const auto* s = new ParamSchema{
      {Param::Int("every_steps")
           .Default(1000)
           .Min(0)
           .Doc("save every N steps (0: only at the end and on signals)"),
       Param::Int("max_to_keep")
           .Default(5)
           .Min(1)
           .Doc("older checkpoints are deleted"),
       Param::String("restore").Default("latest").Doc(
           "latest, none, or a checkpoint file, checkpoints folder or run "
           "directory (its latest)"),
       Param::String("warm_start_from")
           .Nullable()
           .Doc("a checkpoint file, checkpoints folder or run directory whose "
                "model weights (not its optimizer slots, EMA or step) start a "
                "run that restores no checkpoint of its own, as TF "
                "Estimator's warm_start_from, or any safetensors file of "
                "weights (numpy's, Keras's, PyTorch's) (null: none)"),
       Param::String("warm_start_vars")
           .Default(".*")
           .Doc("the model variables warm_start_from starts: those whose "
                "whole name this regular expression (ECMAScript) matches; "
                "the others keep their initializers (TF's "
                "vars_to_warm_start)"),
       Param::String("warm_start_weights")
           .Default("raw")
           .OneOf({"raw", "ema"})
           .Doc("raw: the source's weights; ema: its EMA averages where it "
                "kept them (the variables it trained; as eval --weights "
                "ema)"),
       Param::StringMap("warm_start_names")
           .Default(ParamValue(StringMap{}))
           .Doc("name in the source -> model variable, for the variables "
                "saved there under another name (tf.train.Saver({'name in "
                "file': v}), TF's var_name_to_prev_var_name reversed); the "
                "others are found under their own names"),
       Param::Bool("allow_non_finite")
           .Default(false)
           .Doc("save and restore a checkpoint whose tensors hold NaN or "
                "infinity (otherwise an error, and nothing saved)")}};
  return *s;
}

const ParamSchema& LayerEntrySchema() {
  static const auto* s = new ParamSchema{
      {Param::String("type")
           .OneOf(models::LayerRegistry::Global().Names())
           .Doc("a registered layer type"),
       Param::String("name").Nullable().Doc(
           "overrides the Keras auto-name (checkpoint names use it; no '/' or "
           "control characters)"),
       Param::Int("repeat").Default(1).Min(1).Max(10000).Doc(
           "build this entry N times (names keep counting)"),
       Param::Bool("trainable")
           .Default(true)
           .Doc("false: frozen, with every layer inside (Keras's "
                "trainable=False): its variables are not trained and a "
                "batch normalization uses its moving statistics")}};
  return *s;
}

}  // namespace mirrortrain::trainer::config_internal

namespace mirrortrain::trainer {
namespace {

void AppendTable(const std::string& title, const std::string& doc,
                 const std::string& prefix,
                 const std::vector<const ParamSchema*>& schemas,
                 std::string* out) {
  absl::StrAppend(out, "#### ", title, "\n\n");
  if (!doc.empty()) absl::StrAppend(out, doc, "\n\n");
  bool any = false;
  for (const ParamSchema* s : schemas) any = any || !s->params.empty();
  if (!any) {
    absl::StrAppend(out, "No keys.\n\n");
    return;
  }
  absl::StrAppend(out,
                  "| key | type | default | meaning |\n|---|---|---|---|\n");
  for (const ParamSchema* s : schemas) {
    for (const Param& p : s->params) {
      std::optional<ParamValue> d = p.default_value();
      absl::StrAppend(
          out, "| `", prefix, p.name(), "` | ", p.Describe(), " | ",
          d ? absl::StrCat("`", ParamValueToString(*d), "`") : "required",
          " | ", p.doc(), " |\n");
    }
  }
  absl::StrAppend(out, "\n");
}

}  // namespace

std::string SchemaMarkdown() {
  using config_internal::AugmentSchema, config_internal::CheckpointSchema,
      config_internal::DataSchema, config_internal::DistributeSchema,
      config_internal::EmaSchema, config_internal::LayerEntrySchema,
      config_internal::LossSchema, config_internal::ModelSchema,
      config_internal::NormalizeSchema, config_internal::OptimizerSchema,
      config_internal::RootSchema, config_internal::ScheduleSchema,
      config_internal::TrainSchema;
  std::string out;
  AppendTable("Top level", "", "", {&RootSchema()}, &out);
  AppendTable("`data`", "The input pipeline; `data.name` picks a source.",
              "data.", {&DataSchema()}, &out);
  AppendTable("`data.normalize`",
              "Optional: `(x - mean) / std` per channel (the last dimension), "
              "for every source, both splits.",
              "data.normalize.", {&NormalizeSchema()}, &out);
  AppendTable("`data.augment`",
              "Training batches only; drawn from (seed, epoch, example "
              "index), so the same for any replica count and after a resume. "
              "Needs images [N, H, W, C].",
              "data.augment.", {&AugmentSchema()}, &out);
  for (const DataSource* s : DataSourceRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`data.name: ", s->name, "`"), s->doc, "data.",
                {&s->params}, &out);
  }
  AppendTable("`model`",
              "A preset (`model.name`) or a list of layers (`model.layers`).",
              "model.", {&ModelSchema()}, &out);
  for (const models::ModelPreset* p :
       models::PresetRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`model.name: ", p->name, "`"), p->doc, "model.",
                {&p->params}, &out);
  }
  // The containers, from the registry: those that take `layers`, and of
  // them those that take a `shortcut` list too.
  std::vector<std::string> containers, with_shortcut;
  for (const models::LayerType* t : models::LayerRegistry::Global().Entries()) {
    if (t->container) containers.push_back(absl::StrCat("`", t->name, "`"));
    if (t->shortcut) with_shortcut.push_back(absl::StrCat("`", t->name, "`"));
  }
  // "a, b and c".
  std::string shortcut_list = with_shortcut.empty() ? "" : with_shortcut.back();
  if (with_shortcut.size() > 1) {
    with_shortcut.pop_back();
    shortcut_list = absl::StrCat(absl::StrJoin(with_shortcut, ", "), " and ",
                                 shortcut_list);
  }
  AppendTable("Every entry of `model.layers`",
              absl::StrCat("Containers (", absl::StrJoin(containers, ", "),
                           ") also take `layers` (and ", shortcut_list,
                           " a `shortcut` list)."),
              "", {&LayerEntrySchema()}, &out);
  for (const models::LayerType* t : models::LayerRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`type: ", t->name, "`"), t->doc, "", {&t->params},
                &out);
  }
  AppendTable("`loss`",
              "The loss of the logits, summed over the labels (an "
              "example's, a sequence's tokens') and divided by the global "
              "batch's count of them. `loss.name` picks it.",
              "loss.", {&LossSchema()}, &out);
  for (const models::LossType* l : models::LossRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`loss.name: ", l->name, "`"),
                absl::StrCat(l->doc, "."), "loss.", {&l->params}, &out);
  }
  AppendTable("`metrics`",
              "A list of metrics evaluation reports beside the loss and its "
              "metric (Keras's compile(metrics=...)): each a name, or a map "
              "of its `name` and keys (`{name: "
              "sparse_top_k_categorical_accuracy, k: 3}`).",
              "metrics[i].", {&config_internal::MetricSchema()}, &out);
  for (const models::MetricType* m :
       models::MetricRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`metrics[i].name: ", m->name, "`"),
                absl::StrCat(m->doc, "."), "metrics[i].", {&m->params}, &out);
  }
  AppendTable("`optimizer`", "`optimizer.name` picks the optimizer.",
              "optimizer.", {&OptimizerSchema()}, &out);
  for (const OptimizerType* o : OptimizerRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`optimizer.name: ", o->name, "`"),
                absl::StrCat(o->doc, ". Default `learning_rate`: ",
                             ParamValueToString(ParamValue(o->learning_rate)),
                             " (Keras's)."),
                "optimizer.", {&o->params}, &out);
  }
  AppendTable("`optimizer.schedule`", "", "optimizer.schedule.",
              {&ScheduleSchema(), &ScheduleCommonParams()}, &out);
  for (const ScheduleType* s : ScheduleRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`optimizer.schedule.name: ", s->name, "`"),
                s->doc, "optimizer.schedule.", {&s->params}, &out);
  }
  AppendTable("`ema`", "", "ema.", {&EmaSchema()}, &out);
  AppendTable("`distribute`", "", "distribute.", {&DistributeSchema()}, &out);
  AppendTable("`train`", "", "train.", {&TrainSchema()}, &out);
  AppendTable("`checkpoint`", "", "checkpoint.", {&CheckpointSchema()}, &out);
  return out;
}

}  // namespace mirrortrain::trainer
