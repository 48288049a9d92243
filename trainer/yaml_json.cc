#include "trainer/yaml_json.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"

namespace mirrortrain::trainer {

namespace {

// Linear scans, not std::regex, whose matcher recurses once per character
// (a 30 000-digit scalar overflowed the stack).
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Where the digits of `s` from `i` on end, counted in *count.
size_t SkipDigits(std::string_view s, size_t i, size_t* count) {
  const size_t begin = i;
  while (i < s.size() && IsDigit(s[i])) ++i;
  *count = i - begin;
  return i;
}

size_t SkipSign(std::string_view s) {
  return !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
}

// [-+]?[0-9]+
bool IsDecimalInt(std::string_view s) {
  size_t digits = 0;
  return SkipDigits(s, SkipSign(s), &digits) == s.size() && digits > 0;
}

// 0o[0-7]+ (octal) or 0x[0-9a-fA-F]+ (hexadecimal).
bool IsPrefixedInt(std::string_view s, char prefix) {
  if (s.size() < 3 || s[0] != '0' || s[1] != prefix) return false;
  for (char c : s.substr(2)) {
    const bool ok = prefix == 'o' ? (c >= '0' && c <= '7')
                                  : (IsDigit(c) || (c >= 'a' && c <= 'f') ||
                                     (c >= 'A' && c <= 'F'));
    if (!ok) return false;
  }
  return true;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsDecimalFloat(std::string_view s) {
  size_t whole = 0, fraction = 0;
  size_t i = SkipDigits(s, SkipSign(s), &whole);
  if (i < s.size() && s[i] == '.') i = SkipDigits(s, i + 1, &fraction);
  if (whole == 0 && fraction == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exponent = 0;
    i = SkipDigits(s, i, &exponent);
    if (exponent == 0) return false;
  }
  return i == s.size();
}

bool OneOf(std::string_view s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    if (s == w) return true;
  }
  return false;
}

}  // namespace

CoreScalar ReadPlainScalar(const std::string& s) {
  using Type = CoreScalar::Type;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  CoreScalar v;
  // An integer (v.integer set when `fits`), also as a double: `beyond`
  // when no int64 holds it (--json then writes that).
  auto integer = [&v](bool fits, double beyond) {
    v.type = Type::kInt;
    v.too_large = !fits;
    v.number = fits ? static_cast<double>(v.integer) : beyond;
  };
  if (OneOf(s, {"", "~", "null", "Null", "NULL"})) {
    v.type = Type::kNull;
  } else if (OneOf(s, {"true", "True", "TRUE", "false", "False", "FALSE"})) {
    v.type = Type::kBool;
    v.boolean = s[0] == 't' || s[0] == 'T';
  } else if (IsPrefixedInt(s, 'o')) {
    // Below 8^21 = 2^63 after its leading zeros.
    const std::string_view digits = std::string_view(s).substr(
        std::min(s.find_first_not_of('0', 2), s.size()));
    uint64_t value = 0;
    for (char c : digits.substr(0, 21)) value = value * 8 + (c - '0');
    v.integer = static_cast<int64_t>(value);
    integer(digits.size() <= 21, kInf);
  } else if (IsPrefixedInt(s, 'x')) {
    integer(absl::SimpleHexAtoi(s.substr(2), &v.integer), kInf);
  } else if (IsDecimalInt(s)) {
    // Base 10: 010 is ten.
    integer(absl::SimpleAtoi(s, &v.integer), std::strtod(s.c_str(), nullptr));
  } else if (IsDecimalFloat(s)) {
    v.type = Type::kFloat;
    v.number = std::strtod(s.c_str(), nullptr);  // Beyond double: inf.
  } else if (OneOf(s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
                       "-.inf", "-.Inf", "-.INF"})) {
    v.type = Type::kFloat;
    v.number = s[0] == '-' ? -kInf : kInf;
  } else if (OneOf(s, {".nan", ".NaN", ".NAN"})) {
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
