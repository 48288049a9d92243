#include "models/model.h"

#include "absl/strings/str_cat.h"
#include "models/conv2d_layer.h"
#include "models/dense_layer.h"
#include "models/simple_layers.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// Keras names the n-th layer of a kind "kind", "kind_1", "kind_2", ...
std::string KerasName(const std::string& kind, int* counter) {
  int n = (*counter)++;
  return n == 0 ? kind : absl::StrCat(kind, "_", n);
}

// Per-variable initialiser seeds from the model seed, so they do not depend
// on the device or replica.
uint64_t LayerSeed(uint64_t seed, int layer) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(layer + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

absl::Status Model::Add(std::unique_ptr<Layer> layer, Shape* shape) {
  MT_ASSIGN_OR_RETURN(*shape, layer->OutputShape(*shape));
  for (Variable* v : layer->variables()) variables_.push_back(v);
  layers_.push_back(std::move(layer));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Model::Build(const ModelSpec& spec,
                                                    uint64_t seed,
                                                    Device device) {
  std::unique_ptr<Model> m(new Model());
  m->input_shape_ = spec.input_shape;
  MT_ASSIGN_OR_RETURN(Activation act, ParseActivation(spec.activation));
  Shape shape = {1};
  shape.insert(shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  int dense_n = 0, conv_n = 0, flat_n = 0, drop_n = 0;
  int layer_index = 0;
  auto dense = [&](int64_t units, Activation a) -> absl::Status {
    MT_ASSIGN_OR_RETURN(
        auto layer,
        DenseLayer::Create(KerasName("dense", &dense_n), shape[1], units, a,
                           LayerSeed(seed, layer_index++), device));
    return m->Add(std::move(layer), &shape);
  };
  auto dropout = [&]() -> absl::Status {
    if (spec.dropout <= 0) return absl::OkStatus();
    const int index = drop_n;
    return m->Add(std::make_unique<DropoutLayer>(KerasName("dropout", &drop_n),
                                                 spec.dropout, index),
                  &shape);
  };
  auto flatten = [&]() {
    return m->Add(std::make_unique<FlattenLayer>(KerasName("flatten", &flat_n)),
                  &shape);
  };

  if (spec.name == "mlp") {
    MT_RETURN_IF_ERROR(flatten());
    for (int64_t units : spec.hidden_units) {
      MT_RETURN_IF_ERROR(dense(units, act));
      MT_RETURN_IF_ERROR(dropout());
    }
  } else if (spec.name == "cnn") {
    // Each conv2d is followed by max_pooling2d (2x2), which the conv layer
    // runs itself: see Conv2DLayer.
    const ops::Pool2DOptions pool{2, 2, 2, 2, ops::Padding::kValid};
    for (int64_t filters : spec.conv_filters) {
      MT_ASSIGN_OR_RETURN(
          auto conv,
          Conv2DLayer::Create(KerasName("conv2d", &conv_n), shape[3], filters,
                              spec.kernel_size, ops::Padding::kSame, act,
                              LayerSeed(seed, layer_index++), device, pool));
      MT_RETURN_IF_ERROR(m->Add(std::move(conv), &shape));
    }
    MT_RETURN_IF_ERROR(flatten());
    MT_RETURN_IF_ERROR(dense(spec.dense_units, act));
    MT_RETURN_IF_ERROR(dropout());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model '", spec.name, "' (expected mlp or cnn)"));
  }
  MT_RETURN_IF_ERROR(dense(spec.num_classes, Activation::kLinear));
  return m;
}

absl::StatusOr<Tensor> Model::Call(const Tensor& images,
                                   const ForwardContext& ctx) {
  if (images.rank() != static_cast<int>(input_shape_.size()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model input must be [batch, ", ShapeToString(input_shape_), "], got ",
        images.DebugString()));
  }
  Tensor x = images;
  for (auto& layer : layers_) {
    MT_ASSIGN_OR_RETURN(x, layer->Call(x, ctx));
  }
  return x;
}

std::vector<Variable*> Model::trainable_variables() const {
  std::vector<Variable*> out;
  for (Variable* v : variables_) {
    if (v->trainable()) out.push_back(v);
  }
  return out;
}

}  // namespace mirrortrain::models
