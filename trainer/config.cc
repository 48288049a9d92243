#include "trainer/config.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/device_set.h"
#include "distribute/strategy_factory.h"
#include "models/presets.h"
#include "tensor/status_macros.h"
#include "trainer/data/data_source.h"
#include "trainer/one_line.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"
#include "trainer/regular_file.h"
#include "trainer/yaml_document.h"
#include "trainer/yaml_json.h"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer {
namespace {

// ------------------------------------------------- the trainer's own keys
// Components (data sources, presets, layers, optimizers, schedules) declare
// theirs next to their code; these are the keys of the sections the
// trainer itself owns, and the `name` keys that pick a component.

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

// data.normalize: a mapping, so the per-channel lists stay together.
const ParamSchema& NormalizeSchema() {
  static const auto* s = new ParamSchema{
      {Param::FloatList("mean").Nullable().MinLength(1).Doc(
           "per channel, subtracted after scaling to [0, 1]; null: no "
           "normalisation"),
       Param::FloatList("std").Nullable().MinLength(1).Min(0, false).Doc(
           "per channel, divides after the mean is subtracted")},
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
                             absl::StrJoin(range, ", "), "]"));
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
           .Min(1)
           .Max(kMaxDimension)
           .Doc("one example's shape; null: the data source's")}};
  return *s;
}

const ParamSchema& OptimizerSchema() {
  static const auto* s = new ParamSchema{
      {Param::String("name")
           .Default("momentum")
           .OneOf(OptimizerRegistry::Global().Names())
           .Doc("the optimizer (its keys follow)"),
       Param::Float("learning_rate")
           .Default(0.05)
           .Min(0, false)
           .InFloat32()
           .Doc("peak rate of the schedule"),
       Param::Float("l2_regularization")
           .Default(0.0)
           .Min(0)
           .InFloat32()
           .Doc("adds l2 * w to the gradient of every weight of rank >= 2 "
                "but biases (kernels, embeddings; not biases, attention's "
                "included, or normalization parameters) after the "
                "all-reduce: PyTorch SGD's weight_decay, a Keras l2(l2 / 2) "
                "kernel regularizer"),
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
      {Param::Float("decay").Default(0.999).Nullable().Min(0).Max(1).Doc(
           "null turns EMA off"),
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
           .Doc("none skips the all-reduce (replicas drift apart: only for "
                "measuring what communication costs)"),
       Param::Int("bucket_bytes")
           .Default(26214400)
           .Min(1)
           .Doc("gradient bucket size (the first bucket is 1 MiB)"),
       Param::String("communication_priority")
           .Default("high")
           .OneOf(distribute::StreamPriorityNames())
           .Doc("GPUs: the priority of the replicas' communication streams; "
                "high schedules a reduction's blocks ahead of backward "
                "kernels queued before it"),
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
           .Doc("evaluate on the test split every N epochs (0: only at the "
                "end)"),
       Param::Int("accumulation_steps")
           .Default(1)
           .Min(1)
           .Doc("micro-batches of data.global_batch_size whose gradients "
                "are summed into one all-reduce and one optimizer step"),
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
           "latest, none, or a checkpoint path"),
       Param::Bool("allow_non_finite")
           .Default(false)
           .Doc("save and restore a checkpoint whose tensors hold NaN or "
                "infinity (otherwise an error, and nothing saved)")}};
  return *s;
}

// Keys of a layer entry that are not the layer's own.
const ParamSchema& LayerEntrySchema() {
  static const auto* s = new ParamSchema{
      {Param::String("type")
           .OneOf(models::LayerRegistry::Global().Names())
           .Doc("a registered layer type"),
       Param::String("name").Nullable().Doc(
           "overrides the Keras auto-name (checkpoint names use it)"),
       Param::Int("repeat").Default(1).Min(1).Max(10000).Doc(
           "build this entry N times (names keep counting)")}};
  return *s;
}

// ------------------------------------------------------ YAML <-> values

std::string Show(const YAML::Node& node) {
  if (node.IsNull()) return "null";  // Not the emitter's "~".
  // The emitter drops the quotes that made it a string.
  if (IsStringScalar(node)) {
    return absl::StrCat("'", node.Scalar(), "' (quoted: a string)");
  }
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// A scalar as T, typed as YAML 1.2's core schema types it
// (ReadPlainScalar), not as yaml-cpp's conversions would: a quoted scalar
// ('1', "true") or one tagged !!str is a string, never a number or a
// boolean; a plain one that reads as a number, a boolean or null is not a
// string (`name: true` is no layer name: quote it); `010` is ten.
template <typename T>
bool Decode(const YAML::Node& node, T* out) {
  if (!node.IsScalar()) return false;
  const bool string = IsStringScalar(node);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!string &&
        ReadPlainScalar(node.Scalar()).type != CoreScalar::Type::kString) {
      return false;
    }
    *out = node.Scalar();
    return true;
  } else {
    if (string) return false;
    const CoreScalar v = ReadPlainScalar(node.Scalar());
    if constexpr (std::is_same_v<T, bool>) {
      if (v.type != CoreScalar::Type::kBool) return false;
      *out = v.boolean;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (v.type != CoreScalar::Type::kInt || v.too_large) return false;
      *out = v.integer;
    } else {
      static_assert(std::is_same_v<T, double>);
      if (v.type != CoreScalar::Type::kInt &&
          v.type != CoreScalar::Type::kFloat) {
        return false;
      }
      *out = v.number;
    }
    return true;
  }
}

// " (beyond the 64-bit integers)" for an integer key given an integer
// literal that no int64 holds, whose "expected an integer >= 0" alone
// would read as a contradiction; else "".
std::string BeyondInt64(const YAML::Node& node, const Param& param) {
  if (param.type() != ParamType::kInt || !node.IsScalar() ||
      IsStringScalar(node) || !ReadPlainScalar(node.Scalar()).too_large) {
    return "";
  }
  return absl::StrCat(" (beyond the 64-bit integers, [",
                      std::numeric_limits<int64_t>::min(), ", ",
                      std::numeric_limits<int64_t>::max(), "])");
}

// `node` as a value of `param`'s type, or nullopt when it is not one.
std::optional<ParamValue> FromYaml(const YAML::Node& node, const Param& param) {
  if (node.IsNull()) {
    if (param.nullable()) return ParamValue();
    return std::nullopt;
  }
  auto list = [&](auto element) -> std::optional<ParamValue> {
    using T = decltype(element);
    if (!node.IsSequence()) return std::nullopt;
    std::vector<T> out;
    for (const YAML::Node& item : node) {
      T v{};
      if (!Decode(item, &v)) return std::nullopt;
      out.push_back(std::move(v));
    }
    return ParamValue(std::move(out));
  };
  auto scalar = [&](auto element) -> std::optional<ParamValue> {
    using T = decltype(element);
    T v{};
    if (!Decode(node, &v)) return std::nullopt;
    return ParamValue(std::move(v));
  };
  switch (param.type()) {
    case ParamType::kInt:
      return scalar(int64_t{});
    case ParamType::kFloat:
      return scalar(double{});
    case ParamType::kBool:
      return scalar(bool{});
    case ParamType::kString:
      return scalar(std::string());
    case ParamType::kIntList:
      return list(int64_t{});
    case ParamType::kFloatList:
      return list(double{});
    case ParamType::kStringList:
      // One string stands for a list of one ("path: a.txt").
      if (node.IsScalar()) {
        std::optional<ParamValue> one = scalar(std::string());
        if (!one) return std::nullopt;
        return ParamValue(
            std::vector<std::string>{std::get<std::string>(*std::move(one))});
      }
      return list(std::string());
  }
  return std::nullopt;
}

// A string as a scalar node, marked quoted (tag "!", EmitYaml writes it in
// double quotes) when plain it would read as a number, boolean or null: a
// layer named 'true' stays a string in the resolved config.
YAML::Node StringNode(const std::string& s) {
  YAML::Node node(s);
  if (ReadPlainScalar(s).type != CoreScalar::Type::kString) node.SetTag("!");
  return node;
}

YAML::Node ToYaml(const ParamValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return StringNode(*s);
  if (const auto* l = std::get_if<std::vector<std::string>>(&value)) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const std::string& s : *l) seq.push_back(StringNode(s));
    seq.SetStyle(YAML::EmitterStyle::Flow);
    return seq;
  }
  YAML::Node node = YAML::Load(ParamValueToString(value));
  if (node.IsSequence()) node.SetStyle(YAML::EmitterStyle::Flow);
  return node;
}

// `node` as yaml-cpp's emitter writes it, but scalars marked quoted (tag
// "!") in double quotes, which yaml-cpp's node emission cannot do.
void EmitYaml(YAML::Emitter& out, const YAML::Node& node) {
  const bool flow = node.Style() == YAML::EmitterStyle::Flow;
  switch (node.Type()) {
    case YAML::NodeType::Map:
      if (flow) out << YAML::Flow;
      out << YAML::BeginMap;
      for (const auto& kv : node) {
        out << YAML::Key;
        EmitYaml(out, kv.first);
        out << YAML::Value;
        EmitYaml(out, kv.second);
      }
      out << YAML::EndMap;
      return;
    case YAML::NodeType::Sequence:
      if (flow) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& item : node) EmitYaml(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!") out << YAML::DoubleQuoted;
      out << node.Scalar();
      return;
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out << YAML::Null;
      return;
  }
}

void EmitParams(const ParamSchema& schema, const Params& params,
                YAML::Node* out) {
  for (const Param& p : schema.params) {
    if (const ParamValue* v = params.Get(p.name())) {
      (*out)[p.name()] = ToYaml(*v);
    }
  }
}

// ------------------------------------------------------------- reading

// node[key] when `node` is a mapping that has it, else an undefined node
// (yaml-cpp's const operator[] gives an invalid node that throws on use).
YAML::Node Child(const YAML::Node& node, const std::string& key) {
  if (node.IsDefined() && node.IsMap() && node[key]) return node[key];
  return YAML::Node(YAML::NodeType::Undefined);
}

struct Override {
  std::string path;  // Normalised: "a.b", "model.layers[2].units".
  std::string arg;   // As given.
};

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

class Reader {
 public:
  Reader(std::string file, std::vector<Override> overrides)
      : file_(std::move(file)), overrides_(std::move(overrides)) {}

  // "file.yaml:12" for a node from the file, "--set a.b=c" for one that an
  // override set, is inside, or made; both for a node of the file that an
  // override changed a part of (an element of its list:
  // `--set model.hidden_units[0]=0`), either of which may be at fault.
  std::string Where(const std::string& path, const YAML::Node& node) const {
    if (std::string s = Covering(path); !s.empty()) return s;
    const std::string inside = Inside(path);
    if (inside.empty()) return InFile(node);
    if (node.IsDefined() && node.Mark().line >= 0) {
      return absl::StrCat(InFile(node), " and ", inside);
    }
    return inside;
  }

  // "--set ..." of the latest override at `path` or above it, or "".
  std::string Covering(const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (path == it->path || absl::StartsWith(path, it->path + ".") ||
          absl::StartsWith(path, it->path + "[")) {
        return absl::StrCat("--set ", it->arg);
      }
    }
    return "";
  }

  // "--set ... and --set ..." of the overrides below `path`, or "".
  std::string Inside(const std::string& path) const {
    std::vector<std::string> inside;
    for (const Override& o : overrides_) {
      if (absl::StartsWith(o.path, path + ".") ||
          absl::StartsWith(o.path, path + "[")) {
        inside.push_back(absl::StrCat("--set ", o.arg));
      }
    }
    return absl::StrJoin(inside, " and ");
  }

  // "file.yaml:12" for a node of the file, else the file.
  std::string InFile(const YAML::Node& node) const {
    if (node.IsDefined() && node.Mark().line >= 0) {
      return absl::StrCat(file_, ":", node.Mark().line + 1);
    }
    return file_;
  }

  // Where a check across the keys of section `path` looks: the section in
  // the file and every --set inside it, since any of them may be at fault.
  std::string WhereSection(const std::string& path,
                           const YAML::Node& node) const {
    std::vector<std::string> places;
    std::string own = Covering(path);
    if (own.empty() && node.IsDefined() && node.Mark().line >= 0) {
      own = InFile(node);
      places.push_back(own);
    }
    if (own.empty()) own = Where(path, node);
    for (const Override& o : overrides_) {
      if (absl::StartsWith(o.path, path + ".") ||
          absl::StartsWith(o.path, path + "[") || o.path == path) {
        places.push_back(absl::StrCat("--set ", o.arg));
      }
    }
    return places.empty() ? own : absl::StrJoin(places, " and ");
  }

  // " (chosen by --set ...)" when an override picked the component of
  // section `path` (its name, or a layer's type), so a key of the file that
  // no longer fits is not blamed on the file alone.
  std::string ChosenBy(const std::string& path) const {
    const std::string name = Join(path, "name"), type = Join(path, "type");
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (it->path == name || it->path == type) {
        return absl::StrCat(" (chosen by --set ", it->arg, ")");
      }
    }
    return "";
  }

  absl::Status Error(const std::string& path, const YAML::Node& node,
                     const std::string& problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(path, node), ": ", path, ": ", problem));
  }

  // `node` must be a mapping (or absent: all defaults). An explicit null
  // is an error, not the defaults: `--set data=null` must not be ignored.
  absl::Status CheckMap(const YAML::Node& node, const std::string& path) const {
    if (!node.IsDefined() || node.IsMap()) return absl::OkStatus();
    return Error(path, node,
                 absl::StrCat("expected a mapping of keys, got ", Show(node),
                              node.IsNull() ? " (leave the section out for "
                                              "its defaults)"
                                            : ""));
  }

  // Reads the keys of mapping `node` at `path` that `schemas` declare into
  // `out` (defaults for absent ones). Keys in `handled` are the caller's;
  // any other key is an error naming `owner` when given.
  absl::Status Read(const YAML::Node& node, const std::string& path,
                    const std::vector<const ParamSchema*>& schemas,
                    const std::vector<std::string>& handled,
                    const std::string& owner, Params* out) const {
    MT_RETURN_IF_ERROR(CheckMap(node, path));
    if (node.IsMap()) {
      for (const auto& item : node) {
        const std::string key = item.first.as<std::string>("");
        const std::string key_path = Join(path, key);
        const Param* param = nullptr;
        for (const ParamSchema* s : schemas) {
          if (param == nullptr) param = s->Find(key);
        }
        if (param == nullptr) {
          if (absl::c_linear_search(handled, key)) continue;
          return Error(key_path, item.first,
                       owner.empty() ? "unknown key"
                                     : absl::StrCat("unknown key for ", owner,
                                                    ChosenBy(path)));
        }
        std::optional<ParamValue> value = FromYaml(item.second, *param);
        if (!value.has_value()) {
          return Error(key_path, item.second,
                       absl::StrCat("expected ", param->Describe(), ", got ",
                                    Show(item.second),
                                    BeyondInt64(item.second, *param)));
        }
        const std::string problem = param->CheckRange(*value);
        if (!problem.empty()) return Error(key_path, item.second, problem);
        out->Set(key, *std::move(value));
      }
    }
    for (const ParamSchema* s : schemas) {
      for (const Param& p : s->params) {
        if (out->Has(p.name())) continue;
        std::optional<ParamValue> d = p.default_value();
        if (!d.has_value()) {
          return Error(Join(path, p.name()), node,
                       absl::StrCat("required (expected ", p.Describe(), ")"));
        }
        out->Set(p.name(), *std::move(d));
      }
      if (s->validate) {
        absl::Status status = s->validate(*out);
        if (!status.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(WhereSection(path, node), ": ",
                           Join(path, std::string(status.message()))));
        }
      }
    }
    return absl::OkStatus();
  }

  // The component name of section `node` (its `name` key, else the schema's
  // default), checked against `schema`'s `name` key.
  absl::StatusOr<std::string> ReadName(const YAML::Node& node,
                                       const std::string& path,
                                       const ParamSchema& schema) const {
    MT_RETURN_IF_ERROR(CheckMap(node, path));
    Params params;
    YAML::Node only_name(YAML::NodeType::Map);
    if (YAML::Node name = Child(node, "name")) only_name["name"] = name;
    MT_RETURN_IF_ERROR(Read(only_name, path, {&schema}, {}, "", &params));
    return params.String("name");
  }

  absl::StatusOr<std::vector<models::LayerSpec>> ReadLayers(
      const YAML::Node& node, const std::string& path) const {
    if (!node.IsSequence() || node.size() == 0) {
      return Error(path, node,
                   absl::StrCat("expected a non-empty list of layers, got ",
                                Show(node)));
    }
    std::vector<models::LayerSpec> out;
    for (size_t i = 0; i < node.size(); ++i) {
      MT_ASSIGN_OR_RETURN(models::LayerSpec spec,
                          ReadLayer(node[i], absl::StrCat(path, "[", i, "]")));
      out.push_back(std::move(spec));
    }
    return out;
  }

  absl::StatusOr<models::LayerSpec> ReadLayer(const YAML::Node& node,
                                              const std::string& path) const {
    if (!node.IsMap()) {
      return Error(
          path, node,
          absl::StrCat("expected a layer {type: ..., ...}, got ", Show(node)));
    }
    if (!Child(node, "type")) return Error(path + ".type", node, "required");
    Params entry;
    YAML::Node only_entry(YAML::NodeType::Map);
    for (const Param& p : LayerEntrySchema().params) {
      if (YAML::Node v = Child(node, p.name())) only_entry[p.name()] = v;
    }
    MT_RETURN_IF_ERROR(
        Read(only_entry, path, {&LayerEntrySchema()}, {}, "", &entry));
    models::LayerSpec spec;
    spec.path = path;
    spec.type = entry.String("type");
    spec.name = entry.IsNull("name") ? "" : entry.String("name");
    spec.repeat = entry.Int("repeat");
    if (!spec.name.empty() && spec.repeat > 1) {
      return Error(path + ".name", Child(node, "name"),
                   "a repeated entry cannot have a fixed name");
    }
    const models::LayerType* type =
        models::LayerRegistry::Global().Find(spec.type);
    std::vector<std::string> handled = {"type", "name", "repeat"};
    if (type->container) handled.push_back("layers");
    if (type->shortcut) handled.push_back("shortcut");
    MT_RETURN_IF_ERROR(Read(node, path, {&type->params}, handled,
                            absl::StrCat("layer type ", spec.type),
                            &spec.params));
    if (type->container) {
      if (!Child(node, "layers")) {
        return Error(path + ".layers", node,
                     absl::StrCat("required: layer type ", spec.type,
                                  " holds a list of layers"));
      }
      MT_ASSIGN_OR_RETURN(spec.layers,
                          ReadLayers(Child(node, "layers"), path + ".layers"));
    }
    const YAML::Node shortcut = Child(node, "shortcut");
    if (type->shortcut && shortcut && !shortcut.IsNull()) {
      MT_ASSIGN_OR_RETURN(spec.shortcut,
                          ReadLayers(shortcut, path + ".shortcut"));
    }
    return spec;
  }

 private:
  std::string file_;
  std::vector<Override> overrides_;
};

YAML::Node EmitLayers(const std::vector<models::LayerSpec>& specs) {
  YAML::Node seq(YAML::NodeType::Sequence);
  for (const models::LayerSpec& spec : specs) {
    YAML::Node layer(YAML::NodeType::Map);
    layer["type"] = spec.type;
    if (!spec.name.empty()) layer["name"] = StringNode(spec.name);
    if (spec.repeat != 1) layer["repeat"] = spec.repeat;
    const models::LayerType* type =
        models::LayerRegistry::Global().Find(spec.type);
    EmitParams(type->params, spec.params, &layer);
    if (type->container) {
      layer["layers"] = EmitLayers(spec.layers);
      if (spec.shortcut.has_value()) {
        layer["shortcut"] = EmitLayers(*spec.shortcut);
      }
    } else {
      layer.SetStyle(YAML::EmitterStyle::Flow);
    }
    seq.push_back(layer);
  }
  return seq;
}

// ---------------------------------------------------------- overrides

// "a.b[2].c" -> segments; index segments are "[2]".
absl::StatusOr<std::vector<std::string>> SplitPath(const std::string& path) {
  std::vector<std::string> out;
  std::string current;
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '.' || c == '[') {
      if (current.empty() && (c == '.' || out.empty())) {
        return absl::InvalidArgumentError("empty key");
      }
      if (!current.empty()) out.push_back(current);
      current.clear();
      if (c == '[') {
        size_t close = path.find(']', i);
        int index = 0;
        if (close == std::string::npos ||
            !absl::SimpleAtoi(path.substr(i + 1, close - i - 1), &index) ||
            index < 0) {
          return absl::InvalidArgumentError("bad list index");
        }
        out.push_back(absl::StrCat("[", index, "]"));
        i = close;
        if (i + 1 < path.size() && path[i + 1] == '.') ++i;
      }
      continue;
    }
    current += c;
  }
  if (!current.empty()) out.push_back(current);
  // "a." (and "a[1].") name nothing after the dot.
  if (out.empty() || path.back() == '.') {
    return absl::InvalidArgumentError("empty key");
  }
  return out;
}

absl::Status ApplyOverride(YAML::Node root, const std::string& arg,
                           Override* recorded) {
  const std::string source = absl::StrCat("--set ", arg);
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected KEY=VALUE"));
  }
  const std::string key = arg.substr(0, eq);
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(key);
  if (!parts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", key, ": ", parts.status().message()));
  }
  MT_ASSIGN_OR_RETURN(
      YAML::Node value,
      LoadOneDocument(
          arg.substr(eq + 1), key,
          [&](int, const std::string& path, const std::string& problem) {
            return absl::InvalidArgumentError(
                absl::StrCat(source, ": ", path, ": ", problem));
          }));
  std::string path;
  YAML::Node current = root;
  for (size_t i = 0; i < parts->size(); ++i) {
    const std::string& part = (*parts)[i];
    const bool last = i + 1 == parts->size();
    if (part[0] == '[') {
      const size_t index = std::stoul(part.substr(1));
      path += part;
      if (!current.IsSequence() || index >= current.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": ", path, ": no such list entry (the list has ",
            current.IsSequence() ? current.size() : 0, ")"));
      }
      if (last) {
        current[index] = value;
      } else {
        YAML::Node next = current[index];
        current.reset(next);
      }
      continue;
    }
    path = Join(path, part);
    if (current.IsDefined() && !current.IsNull() && !current.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", path, ": its parent is not a mapping"));
    }
    if (last) {
      current[part] = value;
    } else {
      if (!current[part] || current[part].IsNull()) {
        current[part] = YAML::Node(YAML::NodeType::Map);
      }
      YAML::Node next = current[part];
      current.reset(next);
    }
  }
  *recorded = {path, arg};
  return absl::OkStatus();
}

uint64_t Fnv1a(absl::string_view text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// --------------------------------------------------------- the sections

absl::Status ReadModel(const Reader& r, const YAML::Node& node, Config* c,
                       YAML::Node* resolved) {
  const std::string path = "model";
  MT_RETURN_IF_ERROR(r.CheckMap(node, path));
  const bool has_layers = static_cast<bool>(Child(node, "layers"));
  MT_ASSIGN_OR_RETURN(std::string name, r.ReadName(node, path, ModelSchema()));
  // A null name with no layers means the default preset.
  if (name.empty() && !has_layers) name = "mlp";
  Params common;
  ModelConfig& m = c->model;
  if (has_layers) {
    if (!name.empty()) {
      return r.Error("model.name", Child(node, "name"),
                     "give either a preset name or layers, not both");
    }
    MT_RETURN_IF_ERROR(
        r.Read(node, path, {&ModelSchema()}, {"layers"}, "", &common));
    MT_ASSIGN_OR_RETURN(m.layers,
                        r.ReadLayers(Child(node, "layers"), "model.layers"));
    // The loss takes logits (Keras's from_logits=True): a softmax on the
    // last layer would be applied twice and train slowly.
    const models::LayerSpec& last = m.layers.back();
    if (last.params.Has("activation") &&
        last.params.String("activation") == "softmax") {
      const YAML::Node list = Child(node, "layers");
      return r.Error(
          absl::StrCat(last.path, ".activation"), list[list.size() - 1],
          "softmax on the last layer: the loss takes the logits (Keras's "
          "from_logits=True) and applies the softmax itself; leave it out");
    }
    if (const int64_t n = models::ExpandedLayerCount(m.layers);
        n > models::kMaxLayers) {
      return r.Error("model.layers", Child(node, "layers"),
                     absl::StrCat("expands to more than ", models::kMaxLayers,
                                  " layers (repeat multiplies)"));
    }
  } else {
    const models::ModelPreset* preset =
        models::PresetRegistry::Global().Find(name);
    MT_RETURN_IF_ERROR(r.Read(node, path, {&ModelSchema(), &preset->params}, {},
                              absl::StrCat("preset ", name), &m.preset_params));
    common = m.preset_params;
    m.preset = name;
    common.Set("name", name);
  }
  m.input_shape = common.IntList("input_shape");
  YAML::Node out(YAML::NodeType::Map);
  if (has_layers) {
    out["name"] = YAML::Node(YAML::NodeType::Null);
    out["input_shape"] = ToYaml(*common.Get("input_shape"));
    out["layers"] = EmitLayers(m.layers);
  } else {
    EmitParams(ModelSchema(), common, &out);
    EmitParams(models::PresetRegistry::Global().Find(name)->params,
               m.preset_params, &out);
  }
  (*resolved)["model"] = out;
  return absl::OkStatus();
}

absl::Status ReadOptimizer(const Reader& r, const YAML::Node& node, Config* c,
                           YAML::Node* resolved) {
  const std::string path = "optimizer";
  MT_ASSIGN_OR_RETURN(std::string name,
                      r.ReadName(node, path, OptimizerSchema()));
  const OptimizerType* type = OptimizerRegistry::Global().Find(name);
  OptimizerConfig& o = c->optimizer;
  MT_RETURN_IF_ERROR(r.Read(node, path, {&OptimizerSchema(), &type->params},
                            {"schedule"}, absl::StrCat("optimizer ", name),
                            &o.params));
  o.name = name;
  o.learning_rate = o.params.Float("learning_rate");
  o.l2_regularization = o.params.Float("l2_regularization");
  o.clip_global_norm = o.params.OptionalFloat("clip_global_norm");
  o.clip_norm = o.params.OptionalFloat("clip_norm");
  o.clip_value = o.params.OptionalFloat("clip_value");

  const YAML::Node schedule = Child(node, "schedule");
  const std::string spath = "optimizer.schedule";
  MT_ASSIGN_OR_RETURN(o.schedule,
                      r.ReadName(schedule, spath, ScheduleSchema()));
  const ScheduleType* stype = ScheduleRegistry::Global().Find(o.schedule);
  MT_RETURN_IF_ERROR(
      r.Read(schedule, spath,
             {&ScheduleSchema(), &ScheduleCommonParams(), &stype->params}, {},
             absl::StrCat("schedule ", o.schedule), &o.schedule_params));

  YAML::Node out(YAML::NodeType::Map);
  EmitParams(OptimizerSchema(), o.params, &out);
  EmitParams(type->params, o.params, &out);
  YAML::Node sched(YAML::NodeType::Map);
  EmitParams(ScheduleSchema(), o.schedule_params, &sched);
  EmitParams(ScheduleCommonParams(), o.schedule_params, &sched);
  EmitParams(stype->params, o.schedule_params, &sched);
  out["schedule"] = sched;
  (*resolved)["optimizer"] = out;
  return absl::OkStatus();
}

absl::Status ReadData(const Reader& r, const YAML::Node& node, Config* c,
                      YAML::Node* resolved) {
  const std::string path = "data";
  MT_ASSIGN_OR_RETURN(std::string name, r.ReadName(node, path, DataSchema()));
  const DataSource* source = DataSourceRegistry::Global().Find(name);
  DataConfig& d = c->data;
  MT_RETURN_IF_ERROR(r.Read(node, path, {&DataSchema(), &source->params},
                            {"normalize", "augment"},
                            absl::StrCat("data source ", name), &d.source));
  Params normalize, augment;
  MT_RETURN_IF_ERROR(r.Read(Child(node, "normalize"), "data.normalize",
                            {&NormalizeSchema()}, {}, "", &normalize));
  MT_RETURN_IF_ERROR(r.Read(Child(node, "augment"), "data.augment",
                            {&AugmentSchema()}, {}, "", &augment));
  if (!normalize.IsNull("mean")) {
    d.normalize = {normalize.FloatList("mean"), normalize.FloatList("std")};
  }
  const std::vector<double> scale = augment.FloatList("erasing_scale"),
                            ratio = augment.FloatList("erasing_ratio");
  d.augment = {.random_crop_padding = augment.Int("random_crop_padding"),
               .horizontal_flip = augment.Bool("horizontal_flip"),
               .random_erasing = augment.Float("random_erasing"),
               .erasing_scale = {scale[0], scale[1]},
               .erasing_ratio = {ratio[0], ratio[1]}};
  const Params& common = d.source;
  d.name = name;
  d.global_batch_size = common.Int("global_batch_size");
  d.shuffle = common.Bool("shuffle");
  d.drop_remainder = common.Bool("drop_remainder");
  d.train_examples = common.Int("train_examples");
  d.test_examples = common.Int("test_examples");
  d.prefetch = static_cast<int>(common.Int("prefetch"));
  YAML::Node out(YAML::NodeType::Map);
  EmitParams(DataSchema(), common, &out);
  EmitParams(source->params, d.source, &out);
  YAML::Node normalize_out(YAML::NodeType::Map),
      augment_out(YAML::NodeType::Map);
  EmitParams(NormalizeSchema(), normalize, &normalize_out);
  EmitParams(AugmentSchema(), augment, &augment_out);
  out["normalize"] = normalize_out;
  out["augment"] = augment_out;
  (*resolved)["data"] = out;
  return absl::OkStatus();
}

// A section with a fixed schema: reads it and writes it to `resolved`.
absl::StatusOr<Params> ReadFixed(const Reader& r, const YAML::Node& root,
                                 const std::string& section,
                                 const ParamSchema& schema,
                                 YAML::Node* resolved) {
  const YAML::Node node = Child(root, section);
  Params params;
  MT_RETURN_IF_ERROR(r.Read(node, section, {&schema}, {}, "", &params));
  YAML::Node out(YAML::NodeType::Map);
  EmitParams(schema, params, &out);
  (*resolved)[section] = out;
  return params;
}

absl::Status Validate(const Reader& r, const YAML::Node& root,
                      const Config& c) {
  auto node = [&](const char* section, const char* key) {
    return Child(Child(root, section), key);
  };
  if (!c.train.epochs && !c.train.steps) {
    return r.Error("train.epochs", node("train", "epochs"),
                   "set train.epochs or train.steps");
  }
  if (!c.ema.decay && !c.ema.evaluate_raw) {
    return r.Error("ema.evaluate_raw", node("ema", "evaluate_raw"),
                   "false leaves nothing to evaluate without an EMA "
                   "(ema.decay is null)");
  }
  absl::StatusOr<std::vector<Device>> devices =
      distribute::ResolveDevices(c.distribute.devices);
  if (!devices.ok()) {
    return r.Error("distribute.devices", node("distribute", "devices"),
                   std::string(devices.status().message()));
  }
  if (c.distribute.strategy == "one_device" && devices->size() != 1) {
    return r.Error("distribute.devices", node("distribute", "devices"),
                   absl::StrCat("one_device takes exactly one device, got ",
                                devices->size()));
  }
  if (absl::StatusOr<Device> central =
          ParseDevice(c.distribute.variables_device);
      !central.ok()) {
    return r.Error("distribute.variables_device",
                   node("distribute", "variables_device"),
                   std::string(central.status().message()));
  }
  absl::StatusOr<std::vector<Device>> ps =
      distribute::ResolveDevices(c.distribute.ps_devices);
  if (ps.ok() && !(*ps)[0].is_cpu()) {
    ps = absl::InvalidArgumentError(
        "parameter servers hold their shards in host memory: list cpu:K "
        "devices");
  }
  if (!ps.ok()) {
    return r.Error("distribute.ps_devices", node("distribute", "ps_devices"),
                   std::string(ps.status().message()));
  }
  // An asynchronous worker pushes each batch's gradient by itself; summing
  // several first is a larger batch (data.global_batch_size) there.
  if (c.distribute.strategy == "parameter_server" &&
      c.train.accumulation_steps > 1) {
    return r.Error("train.accumulation_steps",
                   node("train", "accumulation_steps"),
                   "parameter_server workers take no accumulation (use a "
                   "larger data.global_batch_size)");
  }
  // Only mirrored replicas each hold a copy of the variables to compare.
  if (c.distribute.check_replicas_every_steps > 0 &&
      (c.distribute.strategy == "central_storage" ||
       c.distribute.strategy == "parameter_server")) {
    return r.Error("distribute.check_replicas_every_steps",
                   node("distribute", "check_replicas_every_steps"),
                   absl::StrCat(c.distribute.strategy,
                                " keeps one copy of the variables: there are "
                                "no replicas' copies to compare"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> Parse(const std::string& yaml_text,
                             const std::string& source,
                             const std::vector<std::string>& overrides) {
  MT_ASSIGN_OR_RETURN(
      YAML::Node root,
      LoadOneDocument(
          yaml_text, "",
          [&](int line, const std::string& path, const std::string& problem) {
            return absl::InvalidArgumentError(absl::StrCat(
                source, line > 0 ? absl::StrCat(":", line) : "", ": ",
                path.empty() ? "" : absl::StrCat(path, ": "), problem));
          }));
  if (root.IsNull() || !root.IsDefined())
    root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": config: expected a mapping of keys, got ", Show(root)));
  }
  std::vector<Override> applied;
  for (const std::string& o : overrides) {
    Override recorded;
    MT_RETURN_IF_ERROR(ApplyOverride(root, o, &recorded));
    applied.push_back(recorded);
  }
  // `ema: null` turns EMA off, as `ema.decay: null` does (other sections
  // set to null are errors: CheckMap).
  if (const YAML::Node ema = Child(root, "ema"); ema && ema.IsNull()) {
    YAML::Node off(YAML::NodeType::Map);
    off["decay"] = YAML::Node(YAML::NodeType::Null);
    root["ema"] = off;
  }
  const Reader r(source, applied);

  // Top-level keys: the root's own and the sections.
  const std::vector<std::string> sections = {
      "data", "model", "optimizer", "ema", "distribute", "train", "checkpoint"};
  Config c;
  YAML::Node resolved(YAML::NodeType::Map);
  Params top;
  MT_RETURN_IF_ERROR(r.Read(root, "", {&RootSchema()}, sections, "", &top));
  c.seed = top.Int("seed");
  c.precision = top.String("precision");
  EmitParams(RootSchema(), top, &resolved);

  MT_RETURN_IF_ERROR(ReadData(r, Child(root, "data"), &c, &resolved));
  MT_RETURN_IF_ERROR(ReadModel(r, Child(root, "model"), &c, &resolved));
  MT_RETURN_IF_ERROR(ReadOptimizer(r, Child(root, "optimizer"), &c, &resolved));
  MT_ASSIGN_OR_RETURN(Params ema,
                      ReadFixed(r, root, "ema", EmaSchema(), &resolved));
  c.ema = {ema.OptionalFloat("decay"), ema.Bool("use_num_updates"),
           ema.Bool("evaluate_raw")};
  MT_ASSIGN_OR_RETURN(Params dist, ReadFixed(r, root, "distribute",
                                             DistributeSchema(), &resolved));
  c.distribute = {dist.String("strategy"),
                  dist.StringList("devices"),
                  dist.String("cross_device_ops"),
                  dist.Int("bucket_bytes"),
                  dist.String("communication_priority"),
                  dist.Int("check_replicas_every_steps"),
                  dist.Float("watchdog_seconds"),
                  dist.String("variables_device"),
                  dist.StringList("ps_devices"),
                  dist.Int("ps_min_shard_bytes"),
                  dist.OptionalInt("max_staleness")};
  MT_ASSIGN_OR_RETURN(Params train,
                      ReadFixed(r, root, "train", TrainSchema(), &resolved));
  c.train = {train.OptionalInt("epochs"),     train.OptionalInt("steps"),
             train.Int("log_every_steps"),    train.Int("eval_every_epochs"),
             train.Int("accumulation_steps"), train.String("cuda_graph")};
  MT_ASSIGN_OR_RETURN(Params ckpt, ReadFixed(r, root, "checkpoint",
                                             CheckpointSchema(), &resolved));
  c.checkpoint = {ckpt.Int("every_steps"), ckpt.Int("max_to_keep"),
                  ckpt.String("restore"), ckpt.Bool("allow_non_finite")};
  MT_RETURN_IF_ERROR(Validate(r, root, c));

  YAML::Emitter out;
  EmitYaml(out, resolved);
  c.resolved_yaml = std::string(out.c_str()) + "\n";
  c.hash = Fnv1a(c.resolved_yaml);
  std::string base = source.substr(source.find_last_of('/') + 1);
  c.name = base.substr(0, base.find_last_of('.'));
  return c;
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text,
                                   const std::string& source,
                                   const std::vector<std::string>& overrides) {
  absl::StatusOr<Config> config = Parse(yaml_text, source, overrides);
  if (!config.ok()) return OneLine(config.status());
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxConfigBytes);
  if (!text.ok()) {
    // Whatever the reason, the config named is bad input.
    return absl::InvalidArgumentError(OneLine(text.status().message()));
  }
  return ParseConfig(*text, path, overrides);
}

// ------------------------------------------------------------ the schema

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
  AppendTable("Every entry of `model.layers`",
              "Containers (`sequential`, `residual`) also take `layers` "
              "(and `residual` a `shortcut` list).",
              "", {&LayerEntrySchema()}, &out);
  for (const models::LayerType* t : models::LayerRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`type: ", t->name, "`"), t->doc, "", {&t->params},
                &out);
  }
  AppendTable("`optimizer`", "`optimizer.name` picks the optimizer.",
              "optimizer.", {&OptimizerSchema()}, &out);
  for (const OptimizerType* o : OptimizerRegistry::Global().Entries()) {
    AppendTable(absl::StrCat("`optimizer.name: ", o->name, "`"), o->doc,
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
