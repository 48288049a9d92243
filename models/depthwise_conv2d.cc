// Depthwise 2-D convolution layer (config type `depthwise_conv2d`), Keras
// DepthwiseConv2D: activation(depthwise_conv2d(x, kernel) + bias), NHWC,
// kernel [kh, kw, channels, depth_multiplier] named `<name>/kernel`
// (glorot_uniform with Keras's fans: channels and depth_multiplier times
// the window), bias [channels * depth_multiplier].
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/activation.h"
#include "models/conv2d_layer.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/depthwise_conv_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class DepthwiseConv2DLayer final : public Layer {
 public:
  DepthwiseConv2DLayer(std::string name, KernelAndBias weights,
                       ops::Conv2DOptions options,
                       const ActivationDef& activation)
      : Layer(std::move(name)),
        kernel_(std::move(weights.kernel)),
        bias_(std::move(weights.bias)),
        options_(options),
        activation_(activation) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(Tensor y,
                        ops::DepthwiseConv2D(x, kernel_.value(), options_));
    if (!bias_.has_value()) return Activate(activation_, y);
    return BiasActivate(activation_, y, bias_->value());
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const Shape& k = kernel_.shape();
    return ConvOutputShape(name(), input, k[2], {k[0], k[1]}, options_,
                           k[2] * k[3]);
  }

  std::vector<Variable*> variables() override {
    if (!bias_.has_value()) return {&kernel_};
    return {&kernel_, &*bias_};
  }

 private:
  Variable kernel_;
  std::optional<Variable> bias_;
  ops::Conv2DOptions options_;
  const ActivationDef& activation_;
};

MT_REGISTER(
    LayerType,
    {.name = "depthwise_conv2d",
     .doc = "activation(depthwise_conv2d(x, kernel) + bias), NHWC: each "
            "channel convolved with its own depth_multiplier filters (Keras "
            "DepthwiseConv2D)",
     .params = {WithConvWindowParams({}, DepthwiseParams())},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_ASSIGN_OR_RETURN(const ConvWindow w, ReadConvWindow(spec, b));
       MT_ASSIGN_OR_RETURN(const ActivationDef* act,
                           FindActivation(spec.params.String("activation")));
       const int64_t channels = b.input_shape()[3];
       MT_ASSIGN_OR_RETURN(const int64_t multiplier,
                           ReadDepthMultiplier(spec, b));
       const std::array<int64_t, 2> k = w.kernel_size;
       MT_ASSIGN_OR_RETURN(
           KernelAndBias weights,
           MakeKernelAndBias(
               b.name(), {k[0], k[1], channels, multiplier},
               {channels * multiplier}, spec.params.Bool("use_bias"),
               b.NextSeed(), b.device(), std::nullopt,
               ReadInitializers(spec.params, "depthwise_initializer")));
       return std::unique_ptr<Layer>(new DepthwiseConv2DLayer(
           b.name(), std::move(weights), w.options, *act));
     }});

}  // namespace
}  // namespace mirrortrain::models
