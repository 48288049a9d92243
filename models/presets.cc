#include "models/presets.h"

#include "absl/strings/str_cat.h"
#include "models/activation.h"
#include "models/layer_registry.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

using Specs = std::vector<LayerSpec>;

// Appends a spec of `type` with `values`. Its path, for errors, names the
// preset keys that gave the layer its values (`keys`), else its position.
absl::Status Push(Specs* specs, const std::string& keys,
                  const std::string& type,
                  std::vector<std::pair<std::string, ParamValue>> values) {
  MT_ASSIGN_OR_RETURN(LayerSpec spec, MakeLayerSpec(type, std::move(values)));
  spec.path = keys.empty()
                  ? absl::StrCat("model (preset layer ", specs->size(), ")")
                  : keys;
  specs->push_back(std::move(spec));
  return absl::OkStatus();
}

// mlp: flatten, [dense(units, activation), dropout?]..., dense(outputs): the
// last layer has as many units as the loss reads (num_classes here).
absl::StatusOr<Specs> ExpandMlp(const Params& p, int64_t num_classes) {
  Specs specs;
  MT_RETURN_IF_ERROR(Push(&specs, "", "flatten", {}));
  const double rate = p.Float("dropout");
  const std::vector<int64_t> hidden = p.IntList("hidden_units");
  for (size_t i = 0; i < hidden.size(); ++i) {
    MT_RETURN_IF_ERROR(
        Push(&specs, absl::StrCat("model.hidden_units[", i, "]"), "dense",
             {{"units", hidden[i]}, {"activation", p.String("activation")}}));
    if (rate > 0) {
      MT_RETURN_IF_ERROR(Push(&specs, "", "dropout", {{"rate", rate}}));
    }
  }
  MT_RETURN_IF_ERROR(Push(&specs, "", "dense", {{"units", num_classes}}));
  return specs;
}

// cnn: [conv2d(filters, k, same, activation), max_pooling2d(2)]...,
// flatten, dense(dense_units, activation), dropout?, dense(classes): the
// TensorFlow tutorial CNN with the defaults (its dropout 0.4 included).
absl::StatusOr<Specs> ExpandCnn(const Params& p, int64_t num_classes) {
  Specs specs;
  const std::vector<int64_t> filters = p.IntList("conv_filters");
  for (size_t i = 0; i < filters.size(); ++i) {
    MT_RETURN_IF_ERROR(
        Push(&specs,
             absl::StrCat("model.conv_filters[", i, "] and model.kernel_size"),
             "conv2d",
             {{"filters", filters[i]},
              {"kernel_size", p.Int("kernel_size")},
              {"padding", std::string("same")},
              {"activation", p.String("activation")}}));
    MT_RETURN_IF_ERROR(Push(&specs, "", "max_pooling2d", {{"pool_size", 2}}));
  }
  MT_RETURN_IF_ERROR(Push(&specs, "", "flatten", {}));
  MT_RETURN_IF_ERROR(Push(&specs, "model.dense_units", "dense",
                          {{"units", p.Int("dense_units")},
                           {"activation", p.String("activation")}}));
  const double rate = p.Float("dropout");
  if (rate > 0) {
    MT_RETURN_IF_ERROR(Push(&specs, "", "dropout", {{"rate", rate}}));
  }
  MT_RETURN_IF_ERROR(Push(&specs, "", "dense", {{"units", num_classes}}));
  return specs;
}

Param DropoutParam(double rate) {
  return Param::Float("dropout").Default(rate).Min(0).Max(1, false).Doc(
      "rate of a dropout layer after each hidden dense layer (0: none)");
}

}  // namespace

absl::StatusOr<ModelDef> ExpandPreset(
    const std::string& name,
    std::vector<std::pair<std::string, ParamValue>> values,
    const Shape& input_shape, int64_t num_classes) {
  const ModelPreset* preset = PresetRegistry::Global().Find(name);
  if (preset == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.name: unknown preset '", name, "'"));
  }
  MT_ASSIGN_OR_RETURN(Params params,
                      MakeParams(preset->params, std::move(values)));
  ModelDef def;
  def.input_shape = input_shape;
  MT_ASSIGN_OR_RETURN(def.layers, preset->expand(params, num_classes));
  return def;
}

MT_REGISTER(ModelPreset,
            {.name = "mlp",
             .doc = "flatten, [dense(units, activation), dropout]..., "
                    "dense(classes: the units the loss reads)",
             .params = {{Param::IntList("hidden_units")
                             .Max(kMaxDimension)
                             // Each a dense layer and its dropout, plus
                             // flatten and the output layer.
                             .MaxLength((kMaxLayers - 2) / 2)
                             .Default(std::vector<int64_t>{256, 128})
                             .Min(1)
                             .Doc("width of each hidden layer"),
                         ActivationParam("relu", "of the hidden layers"),
                         DropoutParam(0.0)}},
             .expand = ExpandMlp});

MT_REGISTER(
    ModelPreset,
    {.name = "cnn",
     .doc = "[conv2d(filters, kernel_size, same, activation), "
            "max_pooling2d(2)]..., flatten, dense(dense_units, activation), "
            "dropout, dense(classes: the units the loss reads)",
     .params = {{Param::IntList("conv_filters")
                     .Max(kMaxDimension)
                     // Each a conv layer and its pooling, plus flatten,
                     // dense, dropout and the output layer.
                     .MaxLength((kMaxLayers - 4) / 2)
                     .Default(std::vector<int64_t>{32, 64})
                     .Min(1)
                     .MinLength(1)
                     .Doc("filters of each conv layer"),
                 Param::Int("kernel_size")
                     .Max(kMaxDimension)
                     .Default(5)
                     .Min(1)
                     .Doc("side of every conv kernel"),
                 Param::Int("dense_units")
                     .Max(kMaxDimension)
                     .Default(1024)
                     .Min(1)
                     .Doc("width of the hidden dense layer"),
                 ActivationParam("relu", "of the hidden layers"),
                 // The tutorial's 0.4 (DESIGN.md's cnn line).
                 DropoutParam(0.4)}},
     .expand = ExpandCnn});

}  // namespace mirrortrain::models
