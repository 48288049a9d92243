#include "trainer/yaml_json.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"

namespace mirrortrain::trainer {

CoreScalar ReadPlainScalar(const std::string& s) {
  static const std::regex kNull("~|null|Null|NULL|");
  static const std::regex kTrue("true|True|TRUE");
  static const std::regex kFalse("false|False|FALSE");
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kOctal("0o[0-7]+");
  static const std::regex kHex("0x[0-9a-fA-F]+");
  static const std::regex kFloat(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex kInf("[-+]?\\.(inf|Inf|INF)");
  static const std::regex kNan("\\.(nan|NaN|NAN)");
  using Type = CoreScalar::Type;
  CoreScalar v;
  if (std::regex_match(s, kNull)) {
    v.type = Type::kNull;
  } else if (std::regex_match(s, kTrue) || std::regex_match(s, kFalse)) {
    v.type = Type::kBool;
    v.boolean = std::regex_match(s, kTrue);
  } else if (std::regex_match(s, kInt) || std::regex_match(s, kOctal) ||
             std::regex_match(s, kHex)) {
    v.type = Type::kInt;
    const bool hex = s.size() > 1 && s[1] == 'x';
    const bool octal = s.size() > 1 && s[1] == 'o';
    bool ok = false;
    if (hex) {
      ok = absl::SimpleHexAtoi(s.substr(2), &v.integer);
    } else if (octal) {
      // 0o plus at most 21 digits below 0o1000000000000000000000 fit.
      const std::string digits = s.substr(2);
      ok = digits.size() < 22 || (digits.size() == 22 && digits[0] == '0');
      if (ok) v.integer = static_cast<int64_t>(std::stoull(digits, nullptr, 8));
      ok = ok && v.integer >= 0;
    } else {
      ok = absl::SimpleAtoi(s, &v.integer);  // Base 10: 010 is ten.
    }
    v.too_large = !ok;
    if (ok) {
      v.number = static_cast<double>(v.integer);
    } else if (!hex && !octal) {
      v.number = std::strtod(s.c_str(), nullptr);
    } else {
      v.number = std::numeric_limits<double>::infinity();
    }
  } else if (std::regex_match(s, kFloat)) {
    v.type = Type::kFloat;
    v.number = std::strtod(s.c_str(), nullptr);  // Beyond double: inf.
  } else if (std::regex_match(s, kInf)) {
    v.type = Type::kFloat;
    v.number = s[0] == '-' ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity();
  } else if (std::regex_match(s, kNan)) {
    v.type = Type::kFloat;
    v.number = std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

bool IsStringScalar(const YAML::Node& node) {
  return node.IsScalar() &&
         (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str");
}

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
    case YAML::NodeType::Scalar: {
      if (IsStringScalar(node)) return node.Scalar();
      const CoreScalar v = ReadPlainScalar(node.Scalar());
      using Type = CoreScalar::Type;
      switch (v.type) {
        case Type::kNull:
          return nullptr;
        case Type::kBool:
          return v.boolean;
        case Type::kInt:
          if (!v.too_large) return v.integer;
          return v.number;
        case Type::kFloat:
          // JSON has no inf or nan: as YAML spells them.
          if (std::isfinite(v.number)) return v.number;
          return node.Scalar();
        case Type::kString:
          return node.Scalar();
      }
      return node.Scalar();
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
  }
  return nullptr;
}

}  // namespace mirrortrain::trainer
