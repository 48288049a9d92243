// Reading a config's YAML tree into typed keys, with errors that say where
// the fault is ("file.yaml:12: path: problem", or the `--set` that put the
// value there), and the `--set KEY=VALUE` overrides applied to the tree
// before it is read.
//
// Thread contract: a Reader is immutable after construction; its methods
// may run on any thread. Nothing here keeps a node past the call.
#ifndef MIRRORTRAIN_TRAINER_CONFIG_READER_H_
#define MIRRORTRAIN_TRAINER_CONFIG_READER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/layer_registry.h"
#include "tensor/params.h"
#include "yaml-cpp/yaml.h"

namespace mirrortrain::trainer::config_internal {

// node[key] when `node` is a mapping that has it, else an undefined node
// (yaml-cpp's const operator[] gives an invalid node that throws on use).
YAML::Node Child(const YAML::Node& node, const std::string& key);

// "prefix.key", or "key" at the top level.
std::string Join(const std::string& prefix, const std::string& key);

// An override as it was applied.
struct Override {
  std::string path;  // Normalised: "a.b", "model.layers[2].units".
  std::string arg;   // As given.
};

// Applies `--set arg` (KEY=VALUE, the value a YAML document) to the tree
// `root`, making the mappings on its path that are missing; `recorded`
// gets the path it set. Errors name the `--set`.
absl::Status ApplyOverride(YAML::Node root, const std::string& arg,
                           Override* recorded);

class Reader {
 public:
  Reader(std::string file, std::vector<Override> overrides)
      : file_(std::move(file)), overrides_(std::move(overrides)) {}

  // InvalidArgument "<where>: <path>: <problem>", where is Where's.
  absl::Status Error(const std::string& path, const YAML::Node& node,
                     const std::string& problem) const;

  // `node` must be a mapping (or absent: all defaults). An explicit null
  // is an error, not the defaults: `--set data=null` must not be ignored.
  absl::Status CheckMap(const YAML::Node& node, const std::string& path) const;

  // Reads the keys of mapping `node` at `path` that `schemas` declare into
  // `out` (defaults for absent ones). Keys in `handled` are the caller's;
  // any other key is an error naming `owner` when given.
  absl::Status Read(const YAML::Node& node, const std::string& path,
                    const std::vector<const ParamSchema*>& schemas,
                    const std::vector<std::string>& handled,
                    const std::string& owner, Params* out) const;

  // The component name of section `node` (its `name` key, else the schema's
  // default), checked against `schema`'s `name` key.
  absl::StatusOr<std::string> ReadName(const YAML::Node& node,
                                       const std::string& path,
                                       const ParamSchema& schema) const;

  absl::StatusOr<std::vector<models::LayerSpec>> ReadLayers(
      const YAML::Node& node, const std::string& path) const;

  // " (chosen by --set ...)" when an override set the key `selector` of
  // section `path` (or a section or list above it whole), the one that
  // picks its component (a section's name, a layer's type, the strategy),
  // so a key of the file that no longer fits is not blamed on the file
  // alone; "" when that override is where the error about `blamed` (a key
  // path) already starts.
  std::string ChosenBy(const std::string& path, const std::string& selector,
                       const std::string& blamed = "") const;

 private:
  // "file.yaml:12" for a node from the file, "--set a.b=c" for one that an
  // override set, is inside, or made; both for a node of the file that an
  // override changed a part of (an element of its list:
  // `--set model.hidden_units[0]=0`), either of which may be at fault.
  std::string Where(const std::string& path, const YAML::Node& node) const;

  // "--set ..." of the latest override at `path` or above it, or "".
  std::string Covering(const std::string& path) const;

  // "--set ... and --set ..." of the overrides below `path`, or "".
  std::string Inside(const std::string& path) const;

  // "file.yaml:12" for a node of the file, else the file.
  std::string InFile(const YAML::Node& node) const;

  // Where a check across the keys of section `path` looks: the section in
  // the file and every --set inside it, since any of them may be at fault.
  std::string WhereSection(const std::string& path,
                           const YAML::Node& node) const;

  absl::StatusOr<models::LayerSpec> ReadLayer(const YAML::Node& node,
                                              const std::string& path) const;

  std::string file_;
  std::vector<Override> overrides_;
};

// The layer list as the resolved config writes it (each entry's own keys,
// containers' lists nested).
YAML::Node EmitLayers(const std::vector<models::LayerSpec>& specs);

}  // namespace mirrortrain::trainer::config_internal

#endif  // MIRRORTRAIN_TRAINER_CONFIG_READER_H_
