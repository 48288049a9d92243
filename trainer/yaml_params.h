// Config values (ParamValue) read from and written to YAML nodes, typed as
// YAML 1.2's core schema types plain scalars (yaml_json.h): a quoted scalar
// is a string, never a number or a boolean.
#ifndef MIRRORTRAIN_TRAINER_YAML_PARAMS_H_
#define MIRRORTRAIN_TRAINER_YAML_PARAMS_H_

#include <optional>
#include <string>

#include "tensor/params.h"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer::config_internal {

// `node` as an error message shows it: flow style, "null", a quoted
// string said to be one.
std::string Show(const YAML::Node& node);

// `node` as a value of `param`'s type, or nullopt when it is not one.
std::optional<ParamValue> FromYaml(const YAML::Node& node, const Param& param);

// " (beyond the 64-bit integers, [...])" for an integer key given an
// integer literal that no int64 holds, whose "expected an integer >= 0"
// alone would read as a contradiction; else "".
std::string BeyondInt64(const YAML::Node& node, const Param& param);

// A string as a scalar node, marked quoted (tag "!", EmitYaml writes it in
// double quotes) when plain it would read as a number, boolean or null: a
// layer named 'true' stays a string in the resolved config.
YAML::Node StringNode(const std::string& s);

YAML::Node ToYaml(const ParamValue& value);

// `node` as yaml-cpp's emitter writes it, but scalars marked quoted (tag
// "!") in double quotes, which yaml-cpp's node emission cannot do.
void EmitYaml(YAML::Emitter& out, const YAML::Node& node);

// The values `params` holds for `schema`'s keys, in the schema's order,
// as keys of the mapping `out`.
void EmitParams(const ParamSchema& schema, const Params& params,
                YAML::Node* out);

}  // namespace mirrortrain::trainer::config_internal

#endif  // MIRRORTRAIN_TRAINER_YAML_PARAMS_H_
