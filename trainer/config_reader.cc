#include "trainer/config_reader.h"

#include <optional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "trainer/config_keys.h"
#include "trainer/yaml_document.h"
#include "trainer/yaml_params.h"

namespace mirrortrain::trainer::config_internal {
namespace {

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

// The first layer of `specs` (or inside them) given a name.
const models::LayerSpec* NamedLayerIn(
    const std::vector<models::LayerSpec>& specs) {
  for (const models::LayerSpec& spec : specs) {
    if (!spec.name.empty()) return &spec;
    const models::LayerSpec* inner = NamedLayerIn(spec.layers);
    if (inner == nullptr && spec.shortcut.has_value()) {
      inner = NamedLayerIn(*spec.shortcut);
    }
    if (inner != nullptr) return inner;
  }
  return nullptr;
}

}  // namespace

YAML::Node Child(const YAML::Node& node, const std::string& key) {
  if (node.IsDefined() && node.IsMap() && node[key]) return node[key];
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

namespace {

// Where below `node` (at `path`) `target` is used, appended to `uses`; the
// document was checked (CheckKeys), so the walk is bounded.
void UsesOf(const YAML::Node& node, const YAML::Node& target,
            const std::string& path, std::vector<std::string>& uses) {
  if (node.is(target)) {
    uses.push_back(path);
    return;  // What is below it is the same wherever it is used.
  }
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      UsesOf(node[i], target, absl::StrCat(path, "[", i, "]"), uses);
    }
  } else if (node.IsMap()) {
    for (const auto& item : node) {
      if (item.first.IsScalar()) {
        UsesOf(item.second, target, Join(path, item.first.Scalar()), uses);
      }
    }
  }
}

}  // namespace

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
  // A node an alias shares (`&n 100` ... `*n`) is one node in every place
  // that uses it: setting it, or a key inside it, would change them all.
  auto refuse_shared = [&](const YAML::Node& node,
                           const std::string& at) -> absl::Status {
    if (!node.IsDefined()) return absl::OkStatus();
    std::vector<std::string> uses;
    UsesOf(root, node, "", uses);
    if (uses.size() < 2) return absl::OkStatus();
    const std::string& other = uses[0] == at ? uses[1] : uses[0];
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", at, " is shared through a YAML alias with ", other,
        ", which setting it would change too (write the value out in the "
        "file instead of the alias)"));
  };
  // `ema: null` means something (EMA off), and so does a null list entry
  // (an error naming it): a key set inside either would quietly make a
  // mapping of it that means something else.
  auto refuse_null = [&](const YAML::Node& node,
                         const std::string& at) -> absl::Status {
    if (!node.IsDefined() || !node.IsNull()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", at, " is null; set it whole (--set ", at,
                     "={...}) to give it keys"));
  };
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
      YAML::Node next = current[index];
      MT_RETURN_IF_ERROR(refuse_shared(next, path));
      if (last) {
        current[index] = value;
        continue;
      }
      MT_RETURN_IF_ERROR(refuse_null(next, path));
      current.reset(next);
      continue;
    }
    path = Join(path, part);
    if (current.IsDefined() && !current.IsNull() && !current.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", path, ": its parent is not a mapping"));
    }
    YAML::Node next = Child(current, part);
    MT_RETURN_IF_ERROR(refuse_shared(next, path));
    if (last) {
      current[part] = value;
      continue;
    }
    MT_RETURN_IF_ERROR(refuse_null(next, path));
    if (!next.IsDefined()) current[part] = YAML::Node(YAML::NodeType::Map);
    next = current[part];
    current.reset(next);
  }
  *recorded = {path, arg};
  return absl::OkStatus();
}

std::string Reader::Where(const std::string& path,
                          const YAML::Node& node) const {
  if (std::string s = Covering(path); !s.empty()) return s;
  const std::string inside = Inside(path);
  if (inside.empty()) return InFile(node);
  if (node.IsDefined() && node.Mark().line >= 0) {
    return absl::StrCat(InFile(node), " and ", inside);
  }
  return inside;
}

std::string Reader::Covering(const std::string& path) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (path == it->path || absl::StartsWith(path, it->path + ".") ||
        absl::StartsWith(path, it->path + "[")) {
      return absl::StrCat("--set ", it->arg);
    }
  }
  return "";
}

std::string Reader::Inside(const std::string& path) const {
  std::vector<std::string> inside;
  for (const Override& o : overrides_) {
    if (absl::StartsWith(o.path, path + ".") ||
        absl::StartsWith(o.path, path + "[")) {
      inside.push_back(absl::StrCat("--set ", o.arg));
    }
  }
  return absl::StrJoin(inside, " and ");
}

std::string Reader::InFile(const YAML::Node& node) const {
  if (node.IsDefined() && node.Mark().line >= 0) {
    return absl::StrCat(file_, ":", node.Mark().line + 1);
  }
  return file_;
}

std::string Reader::WhereSection(const std::string& path,
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

std::string Reader::ChosenBy(const std::string& path,
                             const std::string& selector,
                             const std::string& blamed) const {
  const std::string key = Join(path, selector);
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    // The key itself, or a section (or list) above it set whole.
    if (key == it->path || absl::StartsWith(key, it->path + ".") ||
        absl::StartsWith(key, it->path + "[")) {
      const std::string by = absl::StrCat("--set ", it->arg);
      // Where the error starts names it already.
      if (!blamed.empty() && Covering(blamed) == by) return "";
      return absl::StrCat(" (chosen by ", by, ")");
    }
  }
  return "";
}

absl::Status Reader::Error(const std::string& path, const YAML::Node& node,
                           const std::string& problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat(Where(path, node), ": ", path, ": ", problem));
}

absl::Status Reader::CheckMap(const YAML::Node& node,
                              const std::string& path) const {
  if (!node.IsDefined() || node.IsMap()) return absl::OkStatus();
  return Error(path, node,
               absl::StrCat("expected a mapping of keys, got ", Show(node),
                            node.IsNull() ? " (leave the section out for "
                                            "its defaults)"
                                          : ""));
}

absl::Status Reader::Read(const YAML::Node& node, const std::string& path,
                          const std::vector<const ParamSchema*>& schemas,
                          const std::vector<std::string>& handled,
                          const std::string& owner, Params* out) const {
  MT_RETURN_IF_ERROR(CheckMap(node, path));
  if (node.IsMap()) {
    // The key that picked `owner`: a layer's type (ReadLayer handles it),
    // else the section's name.
    const std::string selector =
        absl::c_linear_search(handled, "type") ? "type" : "name";
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
                     owner.empty()
                         ? "unknown key"
                         : absl::StrCat("unknown key for ", owner,
                                        ChosenBy(path, selector, key_path)));
      }
      std::optional<ParamValue> value = FromYaml(item.second, *param);
      if (!value.has_value()) {
        return Error(
            key_path, item.second,
            absl::StrCat("expected ", param->Describe(), ", got ",
                         Show(item.second), BeyondInt64(item.second, *param)));
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

absl::StatusOr<std::string> Reader::ReadName(const YAML::Node& node,
                                             const std::string& path,
                                             const ParamSchema& schema) const {
  MT_RETURN_IF_ERROR(CheckMap(node, path));
  Params params;
  YAML::Node only_name(YAML::NodeType::Map);
  if (YAML::Node name = Child(node, "name")) only_name["name"] = name;
  MT_RETURN_IF_ERROR(Read(only_name, path, {&schema}, {}, "", &params));
  return params.String("name");
}

absl::StatusOr<std::vector<models::LayerSpec>> Reader::ReadLayers(
    const YAML::Node& node, const std::string& path) const {
  if (!node.IsSequence() || node.size() == 0) {
    return Error(
        path, node,
        absl::StrCat("expected a non-empty list of layers, got ", Show(node)));
  }
  std::vector<models::LayerSpec> out;
  for (size_t i = 0; i < node.size(); ++i) {
    MT_ASSIGN_OR_RETURN(models::LayerSpec spec,
                        ReadLayer(node[i], absl::StrCat(path, "[", i, "]")));
    out.push_back(std::move(spec));
  }
  return out;
}

absl::StatusOr<models::LayerSpec> Reader::ReadLayer(
    const YAML::Node& node, const std::string& path) const {
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
  spec.location = WhereSection(path, node);
  spec.type = entry.String("type");
  spec.name = entry.IsNull("name") ? "" : entry.String("name");
  if (!entry.IsNull("name") && spec.name.empty()) {
    return Error(path + ".name", Child(node, "name"),
                 "empty (leave it out, or null, for the Keras auto-name)");
  }
  // Variable names join layer names with '/' (Keras 3 refuses it in a
  // name, as here); control characters would garble logs and TensorBoard
  // tags.
  const auto bad = absl::c_find_if(spec.name, [](unsigned char c) {
    return c == '/' || c < 0x20 || c == 0x7f;
  });
  if (bad != spec.name.end()) {
    return Error(
        path + ".name", Child(node, "name"),
        absl::StrCat("'", absl::CHexEscape(spec.name), "' has the character '",
                     absl::CHexEscape(std::string(1, *bad)),
                     "' (a layer name may not contain '/' or "
                     "control characters)"));
  }
  spec.repeat = entry.Int("repeat");
  spec.trainable = entry.Bool("trainable");
  if (!spec.name.empty() && spec.repeat > 1) {
    return Error(path + ".name", Child(node, "name"),
                 "a repeated entry cannot have a fixed name");
  }
  const models::LayerType* type =
      models::LayerRegistry::Global().Find(spec.type);
  std::vector<std::string> handled = {"type", "name", "repeat", "trainable"};
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
    // Each entry of a parallel is one branch: said at the entry's repeat.
    for (size_t i = 0; type->parallel && i < spec.layers.size(); ++i) {
      if (spec.layers[i].repeat == 1) continue;
      return Error(absl::StrCat(path, ".layers[", i, "].repeat"),
                   Child(Child(node, "layers")[i], "repeat"),
                   absl::StrCat("an entry of ", spec.type,
                                " is one branch (repeat layers inside a "
                                "sequential entry)"));
    }
  }
  const YAML::Node shortcut = Child(node, "shortcut");
  if (type->shortcut && shortcut && !shortcut.IsNull()) {
    MT_ASSIGN_OR_RETURN(spec.shortcut,
                        ReadLayers(shortcut, path + ".shortcut"));
  }
  // Each copy of a repeated container would give its layers' names again.
  if (spec.repeat > 1) {
    const models::LayerSpec* named = NamedLayerIn(spec.layers);
    if (named == nullptr && spec.shortcut.has_value()) {
      named = NamedLayerIn(*spec.shortcut);
    }
    if (named != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(named->Where(),
                       ".name: a layer inside a repeated entry cannot "
                       "have a fixed name (",
                       path, " has repeat: ", spec.repeat, ")"));
    }
  }
  return spec;
}

YAML::Node EmitLayers(const std::vector<models::LayerSpec>& specs) {
  YAML::Node seq(YAML::NodeType::Sequence);
  for (const models::LayerSpec& spec : specs) {
    YAML::Node layer(YAML::NodeType::Map);
    layer["type"] = spec.type;
    if (!spec.name.empty()) layer["name"] = StringNode(spec.name);
    if (spec.repeat != 1) layer["repeat"] = spec.repeat;
    if (!spec.trainable) layer["trainable"] = false;
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

}  // namespace mirrortrain::trainer::config_internal
