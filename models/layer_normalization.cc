// LayerNormalization (config type `layer_normalization`), Keras semantics
// with axis -1: each example position is normalised over its last axis with
// its own mean and variance, then scaled by gamma and shifted by beta. No
// batch statistics, so nothing is synchronised across replicas.
#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/normalization_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class LayerNormalizationLayer final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Layer>> Create(std::string name,
                                                       int64_t channels,
                                                       double epsilon,
                                                       bool center, bool scale,
                                                       Device device) {
    std::unique_ptr<LayerNormalizationLayer> layer(
        new LayerNormalizationLayer(name, channels, epsilon));
    auto make = [&](const char* var, double value) -> absl::StatusOr<Variable> {
      MT_ASSIGN_OR_RETURN(Tensor t,
                          ops::Fill(DType::kF32, {channels}, value, device));
      return Variable::Create(absl::StrCat(name, "/", var), t, true);
    };
    // Keras's order: gamma, beta. A disabled one is a constant.
    if (scale) {
      MT_ASSIGN_OR_RETURN(layer->gamma_, make("gamma", 1));
    } else {
      MT_ASSIGN_OR_RETURN(layer->ones_,
                          ops::Fill(DType::kF32, {channels}, 1, device));
    }
    if (center) {
      MT_ASSIGN_OR_RETURN(layer->beta_, make("beta", 0));
    } else {
      MT_ASSIGN_OR_RETURN(layer->zeros_,
                          ops::Fill(DType::kF32, {channels}, 0, device));
    }
    return layer;
  }

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    return ops::LayerNormalization(x, gamma_ ? gamma_->value() : ones_,
                                   beta_ ? beta_->value() : zeros_, epsilon_);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() < 2 || input.back() != channels_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects input [batch, ..., ", channels_,
                       "], got ", ShapeToString(input)));
    }
    return input;
  }

  std::vector<Variable*> variables() override {
    std::vector<Variable*> out;
    if (gamma_) out.push_back(&*gamma_);
    if (beta_) out.push_back(&*beta_);
    return out;
  }

 private:
  LayerNormalizationLayer(std::string name, int64_t channels, double epsilon)
      : Layer(std::move(name)), channels_(channels), epsilon_(epsilon) {}

  int64_t channels_;
  double epsilon_;
  std::optional<Variable> gamma_, beta_;
  Tensor ones_, zeros_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "layer_normalization",
     .doc = "normalises each position over its last axis with its own mean "
            "and variance, then gamma * x + beta (Keras LayerNormalization, "
            "axis -1)",
     .params =
         {{Param::Float("epsilon").Default(0.001).Min(0, false).Doc(
               "added to the variance"),
           Param::Bool("center").Default(true).Doc("learn an offset (beta)"),
           Param::Bool("scale").Default(true).Doc("learn a scale (gamma)")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const Shape& in = b.input_shape();
       if (in.size() < 2) {
         return absl::InvalidArgumentError(absl::StrCat(
             "expects input [batch, ..., features], got ", ShapeToString(in)));
       }
       const Params& p = spec.params;
       return LayerNormalizationLayer::Create(
           b.name(), in.back(), p.Float("epsilon"), p.Bool("center"),
           p.Bool("scale"), b.device());
     }});

}  // namespace mirrortrain::models
