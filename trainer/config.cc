#include "trainer/config.h"

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "distribute/device_set.h"
#include "tensor/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer {
namespace {

enum class Kind {
  kInt,
  kFloat,
  kBool,
  kString,
  kIntList,
  kFloatList,
  kStringList,
  kOptionalInt,
  kOptionalFloat,
};

struct KeySpec {
  const char* key;
  Kind kind;
  const char* default_yaml;
};

// The schema: every key a config may hold, its type and its default. The
// order is the order of the resolved config file.
constexpr KeySpec kSchema[] = {
    {"seed", Kind::kInt, "1"},
    {"precision", Kind::kString, "fp32"},
    {"data.name", Kind::kString, "fashion_mnist"},
    {"data.dir", Kind::kString, "/usr/share/datasets/fashion-mnist"},
    {"data.global_batch_size", Kind::kInt, "128"},
    {"data.shuffle", Kind::kBool, "true"},
    {"data.drop_remainder", Kind::kBool, "false"},
    {"data.train_examples", Kind::kInt, "0"},
    {"data.test_examples", Kind::kInt, "0"},
    {"data.prefetch", Kind::kInt, "2"},
    {"model.name", Kind::kString, "mlp"},
    {"model.hidden_units", Kind::kIntList, "[256, 128]"},
    {"model.activation", Kind::kString, "relu"},
    {"model.dropout", Kind::kFloat, "0.0"},
    {"model.conv_filters", Kind::kIntList, "[32, 64]"},
    {"model.kernel_size", Kind::kInt, "5"},
    {"model.dense_units", Kind::kInt, "1024"},
    {"optimizer.name", Kind::kString, "momentum"},
    {"optimizer.learning_rate", Kind::kFloat, "0.05"},
    {"optimizer.momentum", Kind::kOptionalFloat, "null"},
    {"optimizer.nesterov", Kind::kBool, "false"},
    {"optimizer.beta1", Kind::kFloat, "0.9"},
    {"optimizer.beta2", Kind::kFloat, "0.999"},
    {"optimizer.epsilon", Kind::kFloat, "1e-7"},
    {"optimizer.rho", Kind::kFloat, "0.9"},
    {"optimizer.initial_accumulator_value", Kind::kFloat, "0.1"},
    {"optimizer.schedule.name", Kind::kString, "constant"},
    {"optimizer.schedule.decay_steps", Kind::kInt, "1000"},
    {"optimizer.schedule.decay_rate", Kind::kFloat, "0.96"},
    {"optimizer.schedule.staircase", Kind::kBool, "false"},
    {"optimizer.schedule.boundaries", Kind::kIntList, "[]"},
    {"optimizer.schedule.values", Kind::kFloatList, "[]"},
    {"optimizer.schedule.alpha", Kind::kFloat, "0.0"},
    {"optimizer.schedule.warmup_steps", Kind::kInt, "0"},
    {"optimizer.clip_global_norm", Kind::kOptionalFloat, "null"},
    {"optimizer.clip_norm", Kind::kOptionalFloat, "null"},
    {"optimizer.clip_value", Kind::kOptionalFloat, "null"},
    {"ema.decay", Kind::kOptionalFloat, "0.999"},
    {"ema.use_num_updates", Kind::kBool, "true"},
    {"distribute.strategy", Kind::kString, "mirrored"},
    {"distribute.devices", Kind::kStringList, "[cpu:0]"},
    {"distribute.cross_device_ops", Kind::kString, "auto"},
    {"distribute.bucket_bytes", Kind::kInt, "26214400"},
    {"distribute.check_replicas_every_steps", Kind::kInt, "0"},
    {"distribute.watchdog_seconds", Kind::kFloat, "300"},
    {"train.epochs", Kind::kOptionalInt, "10"},
    {"train.steps", Kind::kOptionalInt, "null"},
    {"train.log_every_steps", Kind::kInt, "100"},
    {"train.eval_every_epochs", Kind::kInt, "1"},
    {"checkpoint.every_steps", Kind::kInt, "1000"},
    {"checkpoint.max_to_keep", Kind::kInt, "5"},
    {"checkpoint.restore", Kind::kString, "latest"},
};

const KeySpec* FindKey(absl::string_view key) {
  for (const KeySpec& spec : kSchema) {
    if (key == spec.key) return &spec;
  }
  return nullptr;
}

bool IsSection(absl::string_view prefix) {
  for (const KeySpec& spec : kSchema) {
    if (absl::StartsWith(spec.key, absl::StrCat(prefix, "."))) return true;
  }
  return false;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kBool:
      return "true or false";
    case Kind::kString:
      return "a string";
    case Kind::kIntList:
      return "a list of integers";
    case Kind::kFloatList:
      return "a list of numbers";
    case Kind::kStringList:
      return "a list of strings";
    case Kind::kOptionalInt:
      return "an integer or null";
    case Kind::kOptionalFloat:
      return "a number or null";
  }
  return "?";
}

template <typename T>
bool Decode(const YAML::Node& node, T* out) {
  return node.IsScalar() && YAML::convert<T>::decode(node, *out);
}

bool ScalarMatches(const YAML::Node& node, Kind kind) {
  int64_t i;
  double d;
  bool b;
  switch (kind) {
    case Kind::kInt:
    case Kind::kIntList:
    case Kind::kOptionalInt:
      return Decode(node, &i);
    case Kind::kFloat:
    case Kind::kFloatList:
    case Kind::kOptionalFloat:
      return Decode(node, &d);
    case Kind::kBool:
      return Decode(node, &b);
    case Kind::kString:
    case Kind::kStringList:
      return node.IsScalar();
  }
  return false;
}

bool Matches(const YAML::Node& node, Kind kind) {
  switch (kind) {
    case Kind::kIntList:
    case Kind::kFloatList:
    case Kind::kStringList:
      if (!node.IsSequence()) return false;
      for (const YAML::Node& item : node) {
        if (!ScalarMatches(item, kind)) return false;
      }
      return true;
    case Kind::kOptionalInt:
    case Kind::kOptionalFloat:
      return node.IsNull() || ScalarMatches(node, kind);
    default:
      return ScalarMatches(node, kind);
  }
}

std::string Show(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// Where an error is: "file.yaml:12" or "--set a.b=c".
std::string Where(const std::string& source, const YAML::Node& node) {
  if (node.Mark().line >= 0 && !absl::StartsWith(source, "--set")) {
    return absl::StrCat(source, ":", node.Mark().line + 1);
  }
  return source;
}

class ConfigBuilder {
 public:
  ConfigBuilder() {
    for (const KeySpec& spec : kSchema) {
      values_[spec.key] = YAML::Load(spec.default_yaml);
    }
  }

  // Merges a user tree rooted at `prefix` ("" for the whole file).
  absl::Status Merge(const YAML::Node& node, const std::string& prefix,
                     const std::string& source) {
    if (!prefix.empty()) {
      if (const KeySpec* spec = FindKey(prefix)) {
        if (!Matches(node, spec->kind)) {
          return absl::InvalidArgumentError(
              absl::StrCat(Where(source, node), ": ", prefix, ": expected ",
                           KindName(spec->kind), ", got ", Show(node)));
        }
        values_[prefix] = YAML::Clone(node);
        return absl::OkStatus();
      }
      if (!IsSection(prefix)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(source, node), ": ", prefix, ": unknown key"));
      }
    }
    if (node.IsNull()) return absl::OkStatus();  // Empty file or section.
    if (!node.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(source, node), ": ", prefix.empty() ? "config" : prefix,
          ": expected a mapping of keys, got ", Show(node)));
    }
    for (const auto& item : node) {
      std::string key = item.first.as<std::string>("");
      std::string path = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      MT_RETURN_IF_ERROR(Merge(item.second, path, source));
    }
    return absl::OkStatus();
  }

  absl::Status Override(const std::string& arg) {
    const std::string source = absl::StrCat("--set ", arg);
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": expected KEY=VALUE"));
    }
    std::string key = arg.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(arg.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", key, ": value is not YAML: ", e.msg));
    }
    return Merge(value, key, source);
  }

  const YAML::Node& Get(const char* key) const { return values_.at(key); }

  // The resolved config as nested YAML, in schema order.
  std::string Emit() const {
    YAML::Emitter out;
    out << YAML::BeginMap;
    std::vector<std::string> open;  // Currently open sections.
    for (const KeySpec& spec : kSchema) {
      std::vector<std::string> parts = absl::StrSplit(spec.key, '.');
      size_t common = 0;
      while (common < open.size() && common + 1 < parts.size() &&
             open[common] == parts[common]) {
        ++common;
      }
      while (open.size() > common) {
        out << YAML::EndMap;
        open.pop_back();
      }
      for (size_t i = open.size(); i + 1 < parts.size(); ++i) {
        out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
        open.push_back(parts[i]);
      }
      const YAML::Node& v = values_.at(spec.key);
      out << YAML::Key << parts.back() << YAML::Value;
      if (v.IsSequence()) {
        out << YAML::Flow << v;
      } else {
        out << v;
      }
    }
    while (!open.empty()) {
      out << YAML::EndMap;
      open.pop_back();
    }
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
  }

 private:
  std::map<std::string, YAML::Node> values_;
};

// Typed reads; the schema check already guaranteed the types.
template <typename T>
T As(const ConfigBuilder& b, const char* key) {
  T out{};
  YAML::convert<T>::decode(b.Get(key), out);
  return out;
}

template <typename T>
std::vector<T> AsList(const ConfigBuilder& b, const char* key) {
  std::vector<T> out;
  for (const YAML::Node& item : b.Get(key)) {
    T v{};
    YAML::convert<T>::decode(item, v);
    out.push_back(v);
  }
  return out;
}

template <typename T>
std::optional<T> AsOptional(const ConfigBuilder& b, const char* key) {
  if (b.Get(key).IsNull()) return std::nullopt;
  return As<T>(b, key);
}

class Validator {
 public:
  explicit Validator(std::string source) : source_(std::move(source)) {}

  void Check(bool ok, const char* key, const std::string& problem) {
    if (!ok && status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat(source_, ": ", key, ": ", problem));
    }
  }
  void OneOf(const std::string& value, const char* key,
             std::initializer_list<const char*> allowed) {
    for (const char* a : allowed) {
      if (value == a) return;
    }
    Check(false, key,
          absl::StrCat("unknown value '", value, "' (expected one of ",
                       absl::StrJoin(allowed, ", "), ")"));
  }
  void AtLeast(double v, double lo, const char* key) {
    Check(v >= lo, key, absl::StrCat("must be >= ", lo, ", got ", v));
  }
  void Positive(double v, const char* key) {
    Check(v > 0 && std::isfinite(v), key, absl::StrCat("must be > 0, got ", v));
  }
  void UnitInterval(double v, const char* key, bool include_one) {
    Check(
        v >= 0 && (include_one ? v <= 1 : v < 1), key,
        absl::StrCat("must be in [0, 1", include_one ? "]" : ")", ", got ", v));
  }
  absl::Status status() const { return status_; }

 private:
  std::string source_;
  absl::Status status_;
};

uint64_t Fnv1a(absl::string_view text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

absl::Status Validate(const Config& c, const std::string& source) {
  Validator v(source);
  v.AtLeast(c.seed, 0, "seed");
  v.OneOf(c.precision, "precision", {"fp32", "tf32"});
  v.OneOf(c.data.name, "data.name", {"fashion_mnist", "synthetic"});
  v.AtLeast(c.data.global_batch_size, 1, "data.global_batch_size");
  v.AtLeast(c.data.train_examples, 0, "data.train_examples");
  v.AtLeast(c.data.test_examples, 0, "data.test_examples");
  v.AtLeast(c.data.prefetch, 0, "data.prefetch");
  v.OneOf(c.model.name, "model.name", {"mlp", "cnn"});
  for (int64_t u : c.model.hidden_units) v.AtLeast(u, 1, "model.hidden_units");
  v.OneOf(c.model.activation, "model.activation", {"relu", "tanh", "sigmoid"});
  v.UnitInterval(c.model.dropout, "model.dropout", false);
  for (int64_t f : c.model.conv_filters) v.AtLeast(f, 1, "model.conv_filters");
  if (c.model.name == "cnn") {
    v.Check(!c.model.conv_filters.empty(), "model.conv_filters",
            "a cnn needs at least one conv layer");
  }
  v.AtLeast(c.model.kernel_size, 1, "model.kernel_size");
  v.AtLeast(c.model.dense_units, 1, "model.dense_units");
  v.OneOf(c.optimizer.name, "optimizer.name",
          {"sgd", "momentum", "adagrad", "adam", "rmsprop"});
  v.Positive(c.optimizer.learning_rate, "optimizer.learning_rate");
  v.UnitInterval(c.optimizer.momentum, "optimizer.momentum", false);
  v.UnitInterval(c.optimizer.beta1, "optimizer.beta1", false);
  v.UnitInterval(c.optimizer.beta2, "optimizer.beta2", false);
  v.Positive(c.optimizer.epsilon, "optimizer.epsilon");
  v.UnitInterval(c.optimizer.rho, "optimizer.rho", false);
  v.AtLeast(c.optimizer.initial_accumulator_value, 0,
            "optimizer.initial_accumulator_value");
  v.OneOf(
      c.optimizer.schedule.name, "optimizer.schedule.name",
      {"constant", "exponential_decay", "piecewise_constant", "cosine_decay"});
  v.AtLeast(c.optimizer.schedule.warmup_steps, 0,
            "optimizer.schedule.warmup_steps");
  if (c.optimizer.clip_global_norm) {
    v.Positive(*c.optimizer.clip_global_norm, "optimizer.clip_global_norm");
  }
  if (c.optimizer.clip_norm) {
    v.Positive(*c.optimizer.clip_norm, "optimizer.clip_norm");
  }
  if (c.optimizer.clip_value) {
    v.Positive(*c.optimizer.clip_value, "optimizer.clip_value");
  }
  if (c.ema.decay) v.UnitInterval(*c.ema.decay, "ema.decay", true);
  v.OneOf(c.distribute.strategy, "distribute.strategy",
          {"one_device", "mirrored"});
  v.OneOf(c.distribute.cross_device_ops, "distribute.cross_device_ops",
          {"auto", "nccl", "local", "none"});
  v.AtLeast(c.distribute.bucket_bytes, 1, "distribute.bucket_bytes");
  v.AtLeast(c.distribute.check_replicas_every_steps, 0,
            "distribute.check_replicas_every_steps");
  v.Positive(c.distribute.watchdog_seconds, "distribute.watchdog_seconds");
  if (c.train.epochs) v.AtLeast(*c.train.epochs, 1, "train.epochs");
  if (c.train.steps) v.AtLeast(*c.train.steps, 1, "train.steps");
  v.Check(c.train.epochs || c.train.steps, "train.epochs",
          "set train.epochs or train.steps");
  v.AtLeast(c.train.log_every_steps, 1, "train.log_every_steps");
  v.AtLeast(c.train.eval_every_epochs, 0, "train.eval_every_epochs");
  v.AtLeast(c.checkpoint.every_steps, 0, "checkpoint.every_steps");
  v.AtLeast(c.checkpoint.max_to_keep, 1, "checkpoint.max_to_keep");
  MT_RETURN_IF_ERROR(v.status());

  absl::StatusOr<std::vector<Device>> devices =
      distribute::ResolveDevices(c.distribute.devices);
  v.Check(devices.ok(), "distribute.devices",
          std::string(devices.status().message()));
  if (devices.ok()) {
    v.Check(c.distribute.strategy != "one_device" || devices->size() == 1,
            "distribute.devices",
            absl::StrCat("one_device takes exactly one device, got ",
                         devices->size()));
  }
  return v.status();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text,
                                   const std::string& source,
                                   const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ": malformed YAML: ", e.msg));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": malformed YAML: ", e.msg));
  }
  ConfigBuilder b;
  MT_RETURN_IF_ERROR(b.Merge(root, "", source));
  for (const std::string& o : overrides) MT_RETURN_IF_ERROR(b.Override(o));

  Config c;
  c.seed = As<int64_t>(b, "seed");
  c.precision = As<std::string>(b, "precision");
  c.data = {As<std::string>(b, "data.name"),
            As<std::string>(b, "data.dir"),
            As<int64_t>(b, "data.global_batch_size"),
            As<bool>(b, "data.shuffle"),
            As<bool>(b, "data.drop_remainder"),
            As<int64_t>(b, "data.train_examples"),
            As<int64_t>(b, "data.test_examples"),
            As<int>(b, "data.prefetch")};
  c.model = {As<std::string>(b, "model.name"),
             AsList<int64_t>(b, "model.hidden_units"),
             As<std::string>(b, "model.activation"),
             As<double>(b, "model.dropout"),
             AsList<int64_t>(b, "model.conv_filters"),
             As<int64_t>(b, "model.kernel_size"),
             As<int64_t>(b, "model.dense_units")};
  OptimizerConfig& o = c.optimizer;
  o.name = As<std::string>(b, "optimizer.name");
  o.learning_rate = As<double>(b, "optimizer.learning_rate");
  // Unset momentum means each optimizer's TensorFlow default: 0.9 for
  // momentum, 0 for rmsprop.
  o.momentum = AsOptional<double>(b, "optimizer.momentum")
                   .value_or(o.name == "rmsprop" ? 0.0 : 0.9);
  o.nesterov = As<bool>(b, "optimizer.nesterov");
  o.beta1 = As<double>(b, "optimizer.beta1");
  o.beta2 = As<double>(b, "optimizer.beta2");
  o.epsilon = As<double>(b, "optimizer.epsilon");
  o.rho = As<double>(b, "optimizer.rho");
  o.initial_accumulator_value =
      As<double>(b, "optimizer.initial_accumulator_value");
  o.schedule = {As<std::string>(b, "optimizer.schedule.name"),
                As<int64_t>(b, "optimizer.schedule.decay_steps"),
                As<double>(b, "optimizer.schedule.decay_rate"),
                As<bool>(b, "optimizer.schedule.staircase"),
                AsList<int64_t>(b, "optimizer.schedule.boundaries"),
                AsList<double>(b, "optimizer.schedule.values"),
                As<double>(b, "optimizer.schedule.alpha"),
                As<int64_t>(b, "optimizer.schedule.warmup_steps")};
  o.clip_global_norm = AsOptional<double>(b, "optimizer.clip_global_norm");
  o.clip_norm = AsOptional<double>(b, "optimizer.clip_norm");
  o.clip_value = AsOptional<double>(b, "optimizer.clip_value");
  c.ema = {AsOptional<double>(b, "ema.decay"),
           As<bool>(b, "ema.use_num_updates")};
  c.distribute = {As<std::string>(b, "distribute.strategy"),
                  AsList<std::string>(b, "distribute.devices"),
                  As<std::string>(b, "distribute.cross_device_ops"),
                  As<int64_t>(b, "distribute.bucket_bytes"),
                  As<int64_t>(b, "distribute.check_replicas_every_steps"),
                  As<double>(b, "distribute.watchdog_seconds")};
  c.train = {AsOptional<int64_t>(b, "train.epochs"),
             AsOptional<int64_t>(b, "train.steps"),
             As<int64_t>(b, "train.log_every_steps"),
             As<int64_t>(b, "train.eval_every_epochs")};
  c.checkpoint = {As<int64_t>(b, "checkpoint.every_steps"),
                  As<int64_t>(b, "checkpoint.max_to_keep"),
                  As<std::string>(b, "checkpoint.restore")};
  // Range errors cite the file, or the overrides when there are some.
  MT_RETURN_IF_ERROR(Validate(c, source));
  c.resolved_yaml = b.Emit();
  c.hash = Fnv1a(c.resolved_yaml);
  std::string base = source.substr(source.find_last_of('/') + 1);
  c.name = base.substr(0, base.find_last_of('.'));
  return c;
}

absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read config file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path, overrides);
}

}  // namespace mirrortrain::trainer
