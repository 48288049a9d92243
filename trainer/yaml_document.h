// Loading one YAML document strictly, for configs and --set values.
// yaml-cpp accepts, silently, a second document (only the first is read)
// and a key given twice in one mapping (lookups see one of them); both are
// errors here, as is a document whose aliases expand past a node budget
// (a "billion laughs" document is small as text).
#ifndef MIRRORTRAIN_TRAINER_YAML_DOCUMENT_H_
#define MIRRORTRAIN_TRAINER_YAML_DOCUMENT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer {

// Builds the caller's error from where the problem is: `line` 1-based (0:
// unknown), `path` the dotted key under the document's `base` path ("" for
// the document itself) and the problem.
using YamlErrorFn = std::function<absl::Status(
    int line, const std::string& path, const std::string& problem)>;

// Nodes visited, aliases once per use; far more than any real config.
inline constexpr int64_t kMaxYamlNodes = 1 << 20;

// The single document of `text` (a null node for an empty text).
absl::StatusOr<YAML::Node> LoadOneDocument(const std::string& text,
                                           const std::string& base,
                                           const YamlErrorFn& error);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_YAML_DOCUMENT_H_
