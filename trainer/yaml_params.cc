#include "trainer/yaml_params.h"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "trainer/one_line.h"
#include "trainer/yaml_json.h"

namespace mirrortrain::trainer::config_internal {
namespace {

// The core-schema tag of `node` other than !!str ("int", "float", "bool",
// "null"), or "" when it has none ("?", "!").
absl::string_view CoreTag(const YAML::Node& node) {
  constexpr absl::string_view kCore = "tag:yaml.org,2002:";
  absl::string_view tag = node.Tag();
  return absl::ConsumePrefix(&tag, kCore) ? tag : absl::string_view();
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
    // No path or name holds a NUL ("a\0b" would open "a").
    if (node.Scalar().find('\0') != std::string::npos) return false;
    *out = node.Scalar();
    return true;
  } else {
    if (string) return false;
    const CoreScalar v = ReadPlainScalar(node.Scalar());
    // A core tag states the scalar's type, which must be the key's
    // (`epochs: !!float 5` is a float): a float key takes `!!float`, and
    // `!!int` on an integer as it takes a plain 5 (`!!int 0.5` is none).
    if (const absl::string_view tag = CoreTag(node); !tag.empty()) {
      bool fits = false;
      if constexpr (std::is_same_v<T, bool>) {
        fits = tag == "bool";
      } else if constexpr (std::is_same_v<T, int64_t>) {
        fits = tag == "int";
      } else {
        fits = tag == "float" ||
               (tag == "int" && v.type == CoreScalar::Type::kInt);
      }
      if (!fits) return false;
    }
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

}  // namespace

std::string Show(const YAML::Node& node) {
  if (node.IsNull()) return "null";  // Not the emitter's "~".
  // The emitter drops the quotes that made it a string.
  if (IsStringScalar(node)) {
    // A control character (a NUL) escaped, so it cannot cut the message.
    return absl::StrCat("'", OneLine(node.Scalar()), "' (quoted: a string)");
  }
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

std::string BeyondInt64(const YAML::Node& node, const Param& param) {
  if ((param.type() != ParamType::kInt && param.type() != ParamType::kIntPair &&
       param.type() != ParamType::kIntBox) ||
      !node.IsScalar() || IsStringScalar(node) ||
      !ReadPlainScalar(node.Scalar()).too_large) {
    return "";
  }
  return absl::StrCat(" (beyond the 64-bit integers, [",
                      std::numeric_limits<int64_t>::min(), ", ",
                      std::numeric_limits<int64_t>::max(), "])");
}

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
      if (param.one_integer_is_a_list() && node.IsScalar()) {
        std::optional<ParamValue> one = scalar(int64_t{});
        if (!one) return std::nullopt;
        return ParamValue(std::vector<int64_t>{std::get<int64_t>(*one)});
      }
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
    case ParamType::kIntPair: {
      if (!node.IsSequence()) return scalar(int64_t{});
      std::optional<ParamValue> pair = list(int64_t{});
      if (!pair || std::get<std::vector<int64_t>>(*pair).size() != 2) {
        return std::nullopt;
      }
      return pair;
    }
    case ParamType::kIntBox: {
      if (!node.IsSequence()) return scalar(int64_t{});
      // [[top, bottom], [left, right]], flattened, either pair also an
      // integer for both its sides (Keras's standardize_tuple); or as
      // written.
      if (node.size() == 2 && (node[0].IsSequence() || node[1].IsSequence())) {
        std::vector<int64_t> sides;
        for (const YAML::Node& pair : node) {
          int64_t v = 0;
          if (!pair.IsSequence()) {
            if (!Decode(pair, &v)) return std::nullopt;
            sides.insert(sides.end(), {v, v});
            continue;
          }
          if (pair.size() != 2) return std::nullopt;
          for (const YAML::Node& side : pair) {
            if (!Decode(side, &v)) return std::nullopt;
            sides.push_back(v);
          }
        }
        return ParamValue(std::move(sides));
      }
      std::optional<ParamValue> flat = list(int64_t{});
      if (!flat) return std::nullopt;
      const size_t n = std::get<std::vector<int64_t>>(*flat).size();
      if (n != 2 && n != 4) return std::nullopt;
      return flat;
    }
    case ParamType::kStringMap: {
      if (!node.IsMap()) return std::nullopt;
      StringMap out;
      for (const auto& item : node) {
        std::string key, value;
        if (!Decode(item.first, &key) || !Decode(item.second, &value)) {
          return std::nullopt;
        }
        out.emplace_back(std::move(key), std::move(value));
      }
      return ParamValue(std::move(out));
    }
  }
  return std::nullopt;
}

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
  if (const auto* m = std::get_if<StringMap>(&value)) {
    YAML::Node map(YAML::NodeType::Map);
    for (const auto& [key, v] : *m) map[StringNode(key)] = StringNode(v);
    map.SetStyle(YAML::EmitterStyle::Flow);
    return map;
  }
  YAML::Node node = YAML::Load(ParamValueToString(value));
  if (node.IsSequence()) node.SetStyle(YAML::EmitterStyle::Flow);
  return node;
}

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

}  // namespace mirrortrain::trainer::config_internal
