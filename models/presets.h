// Model presets: `model.name: mlp | cnn` with a few keys, expanded to a
// layer list (the README shows each expansion; `mirrortrain train
// --dry_run` prints the built model). A preset is registered next to its
// expansion like a layer type.
#ifndef MIRRORTRAIN_MODELS_PRESETS_H_
#define MIRRORTRAIN_MODELS_PRESETS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/layer_registry.h"
#include "models/model.h"
#include "tensor/params.h"
#include "tensor/registry.h"

namespace mirrortrain::models {

struct ModelPreset {
  std::string name;
  std::string doc;
  ParamSchema params;
  // The layers for `params`, ending in `num_classes` logits (as many as
  // the loss reads: one per class, or one per binary label).
  std::function<absl::StatusOr<std::vector<LayerSpec>>(const Params& params,
                                                       int64_t num_classes)>
      expand;
};

using PresetRegistry = Registry<ModelPreset>;

// The model preset `name` builds with `values` set (the rest at their
// defaults) for examples of `input_shape` and `num_classes` classes.
absl::StatusOr<ModelDef> ExpandPreset(
    const std::string& name,
    std::vector<std::pair<std::string, ParamValue>> values,
    const Shape& input_shape, int64_t num_classes);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_PRESETS_H_
