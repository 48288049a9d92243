// LayerNormalization (config type `layer_normalization`), Keras semantics
// with axis -1: each example position is normalised over its last axis with
// its own mean and variance, then scaled by gamma and shifted by beta. No
// batch statistics, so nothing is synchronised across replicas.
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/normalization_params.h"
#include "tensor/ops/normalization_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class LayerNormalizationLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Layer>> Create(std::string name,
                                                       int64_t channels,
                                                       double epsilon,
                                                       bool center, bool scale,
                                                       Device device) {
    MT_ASSIGN_OR_RETURN(
        NormalizationParams params,
        NormalizationParams::Create(name, channels, scale, center, device));
    return std::unique_ptr<Layer>(new LayerNormalizationLayer(
        std::move(name), channels, epsilon, std::move(params)));
  }

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    return ops::LayerNormalization(x, params_.gamma(), params_.beta(),
                                   epsilon_);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return NormalizedOutputShape(name(), input, channels_);
  }

  std::vector<Variable*> variables() override {
    std::vector<Variable*> out;
    params_.AppendVariables(out);
    return out;
  }

 private:
  LayerNormalizationLayer(std::string name, int64_t channels, double epsilon,
                          NormalizationParams params)
      : Layer(std::move(name)),
        channels_(channels),
        epsilon_(epsilon),
        params_(std::move(params)) {}

  int64_t channels_;
  double epsilon_;
  NormalizationParams params_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "layer_normalization",
     .doc = "normalises each position over its last axis with its own mean "
            "and variance, then gamma * x + beta (Keras LayerNormalization, "
            "axis -1)",
     .params =
         {{Param::Float("epsilon").Default(0.001).Min(0, false).InFloat32().Doc(
               "added to the variance"),
           Param::Bool("center").Default(true).Doc("learn an offset (beta)"),
           Param::Bool("scale").Default(true).Doc("learn a scale (gamma)")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_ASSIGN_OR_RETURN(const int64_t features,
                           NormalizedAxis(b.input_shape(), "features"));
       const Params& p = spec.params;
       return LayerNormalizationLayer::Create(
           b.name(), features, p.Float("epsilon"), p.Bool("center"),
           p.Bool("scale"), b.device());
     }});

}  // namespace mirrortrain::models
