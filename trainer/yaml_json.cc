#include "trainer/yaml_json.h"

#include <regex>
#include <string>

#include "absl/strings/numbers.h"

namespace mirrortrain::trainer {
namespace {

// YAML 1.2 core schema (plain scalars only).
nlohmann::json PlainScalar(const std::string& s) {
  static const std::regex kNull("~|null|Null|NULL|");
  static const std::regex kTrue("true|True|TRUE");
  static const std::regex kFalse("false|False|FALSE");
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (std::regex_match(s, kNull)) return nullptr;
  if (std::regex_match(s, kTrue)) return true;
  if (std::regex_match(s, kFalse)) return false;
  int64_t i = 0;
  if (std::regex_match(s, kInt) && absl::SimpleAtoi(s, &i)) return i;
  double d = 0;
  if (std::regex_match(s, kFloat) && absl::SimpleAtod(s, &d)) return d;
  // Strings, and .inf and .nan (JSON has neither) as YAML spells them.
  return s;
}

}  // namespace

nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& kv : node) {
        out[kv.first.Scalar()] = YamlToJson(kv.second);
      }
      return out;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar:
      // "!" is the tag of a quoted scalar: a string whatever it spells.
      if (node.Tag() == "!") return node.Scalar();
      return PlainScalar(node.Scalar());
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
  }
  return nullptr;
}

}  // namespace mirrortrain::trainer
