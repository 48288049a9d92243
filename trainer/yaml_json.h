// A YAML node as JSON, for `mirrortrain config --json` (tools that read a
// resolved config without a YAML library, e.g. the benchmarks' PyTorch
// twins on a GPU host). Plain scalars take YAML 1.2's core-schema types
// (null, bool, int, float); quoted scalars stay strings.
#ifndef MIRRORTRAIN_TRAINER_YAML_JSON_H_
#define MIRRORTRAIN_TRAINER_YAML_JSON_H_

#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer {

nlohmann::json YamlToJson(const YAML::Node& node);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_YAML_JSON_H_
