// YAML 1.2's core-schema typing of plain (unquoted) scalars, which yaml-cpp's
// own conversions do not follow (they read `010` as 8, `yes` as true, and
// any scalar as a string), shared by the config reader and
// `mirrortrain config --json`; and a YAML node as JSON for the latter (tools
// that read a resolved config without a YAML library, e.g. the benchmarks'
// PyTorch twins on a GPU host). Quoted scalars, and scalars tagged !!str,
// are strings whatever they spell.
#ifndef MIRRORTRAIN_TRAINER_YAML_JSON_H_
#define MIRRORTRAIN_TRAINER_YAML_JSON_H_

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer {

// A plain scalar as the core schema types it: null (~, null, Null, NULL or
// nothing), a boolean (true/True/TRUE, false/...), an integer (decimal, 0o
// octal, 0x hexadecimal), a float (decimal with a dot or exponent, .inf,
// -.inf, .nan in their three spellings), else a string.
struct CoreScalar {
  enum class Type { kNull, kBool, kInt, kFloat, kString };
  Type type = Type::kString;
  bool boolean = false;
  int64_t integer = 0;     // kInt, unless too_large.
  double number = 0;       // kInt (as a double) and kFloat.
  bool too_large = false;  // kInt beyond the 64-bit integers.
};
CoreScalar ReadPlainScalar(const std::string& s);

// Whether `node` is a scalar written quoted or tagged !!str: a string.
bool IsStringScalar(const YAML::Node& node);

nlohmann::json YamlToJson(const YAML::Node& node);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_YAML_JSON_H_
