// A model of one layer entry, for the layer tests: built on cpu:0 from
// `seed`, its path model.layers[0]; nullptr (with a test failure) when it
// does not build.
#ifndef MIRRORTRAIN_TESTS_MODELS_ONE_LAYER_MODEL_H_
#define MIRRORTRAIN_TESTS_MODELS_ONE_LAYER_MODEL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "models/layer_registry.h"
#include "models/model.h"

namespace mirrortrain::testing {

inline std::unique_ptr<models::Model> OneLayerModel(
    const std::string& type,
    std::vector<std::pair<std::string, ParamValue>> values, const Shape& input,
    uint64_t seed = 3) {
  absl::StatusOr<models::LayerSpec> spec =
      models::MakeLayerSpec(type, std::move(values));
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<models::Model>> model = models::Model::Build(
      models::ModelDef{input, {*spec}}, seed, Device::Cpu());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_MODELS_ONE_LAYER_MODEL_H_
