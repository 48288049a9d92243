#include "trainer/config.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/device_set.h"
#include "models/layer_registry.h"
#include "models/losses.h"
#include "models/metrics.h"
#include "models/presets.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/warm_start.h"
#include "trainer/config_keys.h"
#include "trainer/config_reader.h"
#include "trainer/data/data_source.h"
#include "trainer/one_line.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"
#include "trainer/regular_file.h"
#include "trainer/yaml_document.h"
#include "trainer/yaml_params.h"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer {
namespace config_internal {
namespace {

uint64_t Fnv1a(absl::string_view text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// --------------------------------------------------------- the sections

// The YAML entry `target` was read from, found by walking the entries
// beside the specs they made (a nested layer's own line, for errors).
YAML::Node EntryNode(const YAML::Node& list,
                     const std::vector<models::LayerSpec>& specs,
                     const models::LayerSpec* target) {
  for (size_t i = 0; i < specs.size() && i < list.size(); ++i) {
    if (&specs[i] == target) return list[i];
    YAML::Node found =
        EntryNode(Child(list[i], "layers"), specs[i].layers, target);
    if (!found && specs[i].shortcut.has_value()) {
      found = EntryNode(Child(list[i], "shortcut"), *specs[i].shortcut, target);
    }
    if (found) return found;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// The loss's activation on the output layer is Keras's from_logits=False:
// the loss takes the logits before it (models::Model), so nothing may
// follow it, and another loss's is refused; said here with the line.
absl::Status CheckOutputActivation(const Reader& r, const YAML::Node& node,
                                   const Config& c) {
  const std::vector<models::LayerSpec>& layers = c.model.layers;
  MT_ASSIGN_OR_RETURN(const models::LossType* loss,
                      models::FindLoss(c.loss.name));
  if (absl::Status merged = models::CheckMergedOutput(layers, *loss);
      !merged.ok()) {
    const models::LayerSpec* out = models::OutputLayer(layers);
    return r.Error(out->path, EntryNode(Child(node, "layers"), layers, out),
                   std::string(merged.message()));
  }
  absl::Status s = models::CheckOutputActivation(layers, *loss);
  if (s.ok()) return s;
  const models::LayerSpec* last = models::OutputLayer(layers);
  return r.Error(
      absl::StrCat(last->path, ".activation"),
      Child(EntryNode(Child(node, "layers"), layers, last), "activation"),
      std::string(s.message()));
}

// Early stopping watches what evaluation reports: the loss, the loss's own
// metric, or a `metrics` entry (by its reported name).
absl::Status CheckMonitor(const Reader& r, const YAML::Node& root,
                          const Config& c) {
  MT_ASSIGN_OR_RETURN(const models::LossType* loss,
                      models::FindLoss(c.loss.name));
  const std::string& monitor = c.train.early_stopping_monitor;
  std::vector<std::string> reported = {"loss", loss->metric};
  for (const MetricConfig& m : c.metrics) reported.push_back(m.reported);
  // Inert without early stopping (a patience given as null: a config's
  // monitor may stay when --set turns early stopping off).
  if (c.train.early_stopping_patience &&
      !absl::c_linear_search(reported, monitor)) {
    return r.Error("train.early_stopping_monitor",
                   Child(Child(root, "train"), "early_stopping_monitor"),
                   absl::StrCat(monitor, " is not reported under loss.name ",
                                loss->name, " (evaluation reports ",
                                absl::StrJoin(reported, ", "), ")"));
  }
  return absl::OkStatus();
}

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

// `loss.name` picks the loss, whose own keys sit beside it (as an
// optimizer's).
absl::Status ReadLoss(const Reader& r, const YAML::Node& node, Config* c,
                      YAML::Node* resolved) {
  const std::string path = "loss";
  MT_ASSIGN_OR_RETURN(c->loss.name, r.ReadName(node, path, LossSchema()));
  const models::LossType* type =
      models::LossRegistry::Global().Find(c->loss.name);
  Params params;
  MT_RETURN_IF_ERROR(r.Read(node, path, {&LossSchema(), &type->params}, {},
                            absl::StrCat("loss ", c->loss.name), &params));
  YAML::Node out(YAML::NodeType::Map);
  EmitParams(LossSchema(), params, &out);
  EmitParams(type->params, params, &out);
  (*resolved)["loss"] = out;
  c->loss.params = std::move(params);
  return absl::OkStatus();
}

// `metrics`: a list of metric names, or of maps of a name and its keys;
// each must read what the loss trains. Absent, null or empty: none (and
// not written to the resolved config, whose hash stays as without it). A
// name taken (by an earlier entry, the loss, its metric or another field
// evaluation reports) is reported with Keras's suffix: name_1, name_2, ...
absl::Status ReadMetrics(const Reader& r, const YAML::Node& node, Config* c,
                         YAML::Node* resolved) {
  if (!node || node.IsNull() || (node.IsSequence() && node.size() == 0)) {
    return absl::OkStatus();
  }
  if (!node.IsSequence()) {
    return r.Error("metrics", node,
                   "expected a list of metrics (names, or maps of a name "
                   "and its keys)");
  }
  MT_ASSIGN_OR_RETURN(const models::LossType* loss,
                      models::FindLoss(c->loss.name));
  absl::flat_hash_set<std::string> taken = {
      "loss", loss->metric, "bits_per_byte", "tokens", "examples"};
  YAML::Node out(YAML::NodeType::Sequence);
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string path = absl::StrCat("metrics[", i, "]");
    YAML::Node entry = node[i];
    if (entry.IsScalar()) {
      YAML::Node named(YAML::NodeType::Map);
      named["name"] = YAML::Clone(entry);
      entry.reset(named);  // Rebinds `entry` only: the document stays.
    }
    MT_RETURN_IF_ERROR(r.CheckMap(entry, path));
    if (!Child(entry, "name")) {
      return r.Error(
          path, entry,
          absl::StrCat("names no metric (expected one of ",
                       models::MetricRegistry::Global().NameList(), ")"));
    }
    MT_ASSIGN_OR_RETURN(const std::string name,
                        r.ReadName(entry, path, MetricSchema()));
    const models::MetricType* type =
        models::MetricRegistry::Global().Find(name);
    if (absl::Status fits = type->check(*loss); !fits.ok()) {
      return r.Error(absl::StrCat(path, ".name"), Child(entry, "name"),
                     absl::StrCat(name, " ", fits.message()));
    }
    Params params;
    MT_RETURN_IF_ERROR(r.Read(entry, path, {&MetricSchema(), &type->params}, {},
                              absl::StrCat("metric ", name), &params));
    YAML::Node emitted(YAML::NodeType::Map);
    EmitParams(MetricSchema(), params, &emitted);
    EmitParams(type->params, params, &emitted);
    out.push_back(emitted);
    std::string reported = name;
    for (int n = 1; taken.contains(reported); ++n) {
      reported = absl::StrCat(name, "_", n);
    }
    taken.insert(reported);
    c->metrics.push_back({name, reported, std::move(params)});
  }
  (*resolved)["metrics"] = out;
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
  const bool rate_given = !o.params.IsNull("learning_rate");
  // Left out (or null): Keras's default for this optimizer, written into
  // the resolved config.
  if (!rate_given) {
    o.params.Set("learning_rate", type->learning_rate);
  }
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

  if (!stype->uses_learning_rate && rate_given) {
    return r.Error(
        "optimizer.learning_rate", Child(node, "learning_rate"),
        absl::StrCat("unused by schedule ", o.schedule,
                     ", whose values are the rates (leave it out, or null)",
                     r.ChosenBy(spath, "name", "optimizer.learning_rate")));
  }

  YAML::Node out(YAML::NodeType::Map);
  EmitParams(OptimizerSchema(), o.params, &out);
  EmitParams(type->params, o.params, &out);
  // The schedule's values are the rates: the resolved config says so.
  if (!stype->uses_learning_rate) {
    out["learning_rate"] = YAML::Node(YAML::NodeType::Null);
  }
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
  if (c.checkpoint.restore.empty()) {
    return r.Error("checkpoint.restore", node("checkpoint", "restore"),
                   "expected latest, none, or a checkpoint path, got ''");
  }
  const YAML::Node warm = node("checkpoint", "warm_start_from");
  if (c.checkpoint.warm_start_from.empty() && warm.IsDefined() &&
      !warm.IsNull()) {
    return r.Error("checkpoint.warm_start_from", warm,
                   "expected a checkpoint path or null, got ''");
  }
  if (!c.checkpoint.warm_start_from.empty() &&
      c.checkpoint.restore != "latest" && c.checkpoint.restore != "none") {
    return r.Error(
        "checkpoint.warm_start_from", warm,
        absl::StrCat("set beside checkpoint.restore: ", c.checkpoint.restore,
                     ", which restores the whole run; set one"));
  }
  // A key given as null, not left out, turns off what it would have
  // started, its qualifiers then inert: `--set train.early_stopping_patience=
  // null` turns a config's early stopping off whatever else it sets there.
  // Left out, a qualifier without it is a mistake said (a typo's guard).
  auto given_null = [&](const char* section, const char* key) {
    const YAML::Node n = node(section, key);
    return n.IsDefined() && n.IsNull();
  };
  const bool warm_start_off = given_null("checkpoint", "warm_start_from");
  // Off its default without a warm start (the defaults stay allowed: a
  // resolved config.yaml holds them).
  auto qualifies = [&](const char* key, const std::string& value,
                       const char* fallback) -> absl::Status {
    if (!c.checkpoint.warm_start_from.empty() || value == fallback ||
        warm_start_off) {
      return absl::OkStatus();
    }
    return r.Error(absl::StrCat("checkpoint.", key), node("checkpoint", key),
                   "set without checkpoint.warm_start_from, which it "
                   "qualifies");
  };
  MT_RETURN_IF_ERROR(
      qualifies("warm_start_vars", c.checkpoint.warm_start_vars, ".*"));
  MT_RETURN_IF_ERROR(
      qualifies("warm_start_weights", c.checkpoint.warm_start_weights, "raw"));
  if (!c.checkpoint.warm_start_names.empty()) {
    const YAML::Node names = node("checkpoint", "warm_start_names");
    if (c.checkpoint.warm_start_from.empty() && !warm_start_off) {
      return r.Error("checkpoint.warm_start_names", names,
                     "set without checkpoint.warm_start_from, which it "
                     "qualifies");
    }
    if (absl::Status s = CheckWarmStartNames(c.checkpoint.warm_start_names);
        !s.ok()) {
      return r.Error("checkpoint.warm_start_names", names,
                     std::string(s.message()));
    }
  }
  if (absl::Status s = CheckWarmStartPattern(c.checkpoint.warm_start_vars);
      !s.ok()) {
    return r.Error("checkpoint.warm_start_vars",
                   node("checkpoint", "warm_start_vars"),
                   std::string(s.message()));
  }
  if (!c.train.epochs && !c.train.steps) {
    return r.Error("train.epochs", node("train", "epochs"),
                   "set train.epochs or train.steps");
  }
  if (c.train.early_stopping_patience) {
    if (c.train.eval_every_epochs == 0 && c.train.eval_every_steps == 0) {
      return r.Error("train.early_stopping_patience",
                     node("train", "early_stopping_patience"),
                     "set, but no evaluation is scheduled to watch (set "
                     "train.eval_every_epochs or train.eval_every_steps)");
    }
  } else if (!given_null("train", "early_stopping_patience") &&
             (c.train.early_stopping_monitor != "loss" ||
              c.train.early_stopping_min_delta != 0)) {
    // A qualifier off its default without the patience it qualifies.
    const char* key = c.train.early_stopping_monitor != "loss"
                          ? "early_stopping_monitor"
                          : "early_stopping_min_delta";
    return r.Error(absl::StrCat("train.", key), node("train", key),
                   "set without train.early_stopping_patience, which it "
                   "qualifies");
  }
  if (!c.ema.decay && !c.ema.evaluate_raw) {
    return r.Error("ema.evaluate_raw", node("ema", "evaluate_raw"),
                   "false leaves nothing to evaluate without an EMA "
                   "(ema.decay is null)");
  }
  // Written under another strategy they would do nothing: an error, as an
  // optimizer's key under another optimizer. A null is "not set".
  for (const auto& [key, users] : StrategyKeys()) {
    const YAML::Node written = node("distribute", key.c_str());
    if (!written.IsDefined() || written.IsNull() ||
        absl::c_linear_search(users, c.distribute.strategy)) {
      continue;
    }
    return r.Error(absl::StrCat("distribute.", key), written,
                   absl::StrCat("a key of ", absl::StrJoin(users, " and "),
                                ", unused by strategy ", c.distribute.strategy,
                                r.ChosenBy("distribute", "strategy",
                                           absl::StrCat("distribute.", key))));
  }
  absl::StatusOr<std::vector<Device>> devices =
      distribute::ResolveDevices(c.distribute.devices);
  if (!devices.ok()) {
    return r.Error("distribute.devices", node("distribute", "devices"),
                   std::string(devices.status().message()));
  }
  if (c.distribute.cross_device_ops == "nccl" &&
      !distribute::DistinctGpus(*devices)) {
    return r.Error("distribute.cross_device_ops",
                   node("distribute", "cross_device_ops"),
                   distribute::kNcclNeedsDistinctGpus);
  }
  if (c.distribute.strategy == "one_device" && devices->size() != 1) {
    return r.Error("distribute.devices", node("distribute", "devices"),
                   absl::StrCat("one_device takes exactly one device, got ",
                                devices->size(),
                                " (for several: distribute.strategy: "
                                "mirrored)"));
  }
  // Central storage's device must exist as its replicas' devices must. A
  // GPU must be the first replica's: the update runs on that replica's
  // thread and stream (another GPU's kernels cannot go there).
  if (c.distribute.strategy == "central_storage") {
    // One device (ParseDevice, as the strategy reads it: not all_gpus).
    const absl::Status one =
        ParseDevice(c.distribute.variables_device).status();
    absl::StatusOr<std::vector<Device>> central =
        one.ok() ? distribute::ResolveDevices({c.distribute.variables_device})
                 : absl::StatusOr<std::vector<Device>>(one);
    if (central.ok() && (*central)[0].is_cuda() &&
        (*central)[0] != (*devices)[0]) {
      central = absl::InvalidArgumentError(absl::StrCat(
          "a GPU holding the variables must be the first replica's (",
          (*devices)[0].ToString(), "), which applies the update; got ",
          (*central)[0].ToString()));
    }
    if (!central.ok()) {
      return r.Error("distribute.variables_device",
                     node("distribute", "variables_device"),
                     std::string(central.status().message()));
    }
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
      "data", "model",      "loss",  "metrics",   "optimizer",
      "ema",  "distribute", "train", "checkpoint"};
  Config c;
  YAML::Node resolved(YAML::NodeType::Map);
  Params top;
  MT_RETURN_IF_ERROR(r.Read(root, "", {&RootSchema()}, sections, "", &top));
  c.seed = top.Int("seed");
  c.precision = top.String("precision");
  EmitParams(RootSchema(), top, &resolved);

  MT_RETURN_IF_ERROR(ReadData(r, Child(root, "data"), &c, &resolved));
  MT_RETURN_IF_ERROR(ReadModel(r, Child(root, "model"), &c, &resolved));
  MT_RETURN_IF_ERROR(ReadLoss(r, Child(root, "loss"), &c, &resolved));
  MT_RETURN_IF_ERROR(CheckOutputActivation(r, Child(root, "model"), c));
  MT_RETURN_IF_ERROR(ReadMetrics(r, Child(root, "metrics"), &c, &resolved));
  MT_RETURN_IF_ERROR(ReadOptimizer(r, Child(root, "optimizer"), &c, &resolved));
  MT_ASSIGN_OR_RETURN(Params ema,
                      ReadFixed(r, root, "ema", EmaSchema(), &resolved));
  c.ema = {ema.OptionalFloat("decay"), ema.Bool("use_num_updates"),
           ema.Bool("evaluate_raw")};
  MT_ASSIGN_OR_RETURN(Params dist, ReadFixed(r, root, "distribute",
                                             DistributeSchema(), &resolved));
  for (const auto& [key, users] : StrategyKeys()) {
    if (!absl::c_linear_search(users, dist.String("strategy"))) {
      resolved["distribute"].remove(key);
    }
  }
  c.distribute = {dist.String("strategy"),
                  dist.StringList("devices"),
                  dist.String("cross_device_ops"),
                  dist.Int("bucket_bytes"),
                  dist.String("communication_priority"),
                  dist.Bool("sum_in_update"),
                  dist.Int("check_replicas_every_steps"),
                  dist.Float("watchdog_seconds"),
                  dist.String("variables_device"),
                  dist.StringList("ps_devices"),
                  dist.Int("ps_min_shard_bytes"),
                  dist.OptionalInt("max_staleness")};
  MT_ASSIGN_OR_RETURN(Params train,
                      ReadFixed(r, root, "train", TrainSchema(), &resolved));
  c.train = {train.OptionalInt("epochs"),
             train.OptionalInt("steps"),
             train.Int("log_every_steps"),
             train.Int("eval_every_epochs"),
             train.Int("eval_every_steps"),
             train.OptionalInt("early_stopping_patience"),
             train.String("early_stopping_monitor"),
             train.Float("early_stopping_min_delta"),
             train.Int("accumulation_steps"),
             train.String("cuda_graph")};
  MT_ASSIGN_OR_RETURN(Params ckpt, ReadFixed(r, root, "checkpoint",
                                             CheckpointSchema(), &resolved));
  c.checkpoint = {
      ckpt.Int("every_steps"),
      ckpt.Int("max_to_keep"),
      ckpt.String("restore"),
      ckpt.IsNull("warm_start_from") ? "" : ckpt.String("warm_start_from"),
      ckpt.String("warm_start_vars"),
      ckpt.String("warm_start_weights"),
      ckpt.StringMap("warm_start_names"),
      ckpt.Bool("allow_non_finite")};
  MT_RETURN_IF_ERROR(Validate(r, root, c));
  MT_RETURN_IF_ERROR(CheckMonitor(r, root, c));

  YAML::Emitter out;
  EmitYaml(out, resolved);
  c.resolved_yaml = std::string(out.c_str()) + "\n";
  c.hash = Fnv1a(c.resolved_yaml);
  std::string base = source.substr(source.find_last_of('/') + 1);
  c.name = base.substr(0, base.find_last_of('.'));
  return c;
}

}  // namespace
}  // namespace config_internal

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text,
                                   const std::string& source,
                                   const std::vector<std::string>& overrides) {
  absl::StatusOr<Config> config =
      config_internal::Parse(yaml_text, source, overrides);
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

}  // namespace mirrortrain::trainer
