// Depthwise-separable 2-D convolution layer (config type
// `separable_conv2d`), Keras SeparableConv2D: each channel convolved with
// its own depth_multiplier filters (`<name>/depthwise_kernel`, [kh, kw,
// channels, depth_multiplier]), then a 1x1 convolution mixing them
// (`<name>/pointwise_kernel`, [1, 1, channels * depth_multiplier,
// filters]), the bias [filters] and the activation: Xception's and
// MobileNet's block as one layer. The two steps are the depthwise op and
// conv2d's (a 1x1 window: its bias and relu epilogue on GPUs).
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
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/depthwise_conv_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// The depthwise keys with pointwise_initializer beside
// depthwise_initializer (Keras's order: depthwise, pointwise, bias).
std::vector<Param> SeparableParams() {
  std::vector<Param> params = DepthwiseParams();
  params.insert(params.end() - 1,
                Param::String("pointwise_initializer")
                    .Default("glorot_uniform")
                    .OneOf(InitializerNames())
                    .Doc("the pointwise kernel's initial values (as "
                         "depthwise_initializer's)"));
  return params;
}

class SeparableConv2DLayer final : public Layer {
 public:
  SeparableConv2DLayer(std::string name, Variable depthwise,
                       KernelAndBias pointwise, ops::Conv2DOptions options,
                       const ActivationDef& activation)
      : Layer(std::move(name)),
        depthwise_(std::move(depthwise)),
        pointwise_(std::move(pointwise.kernel)),
        bias_(std::move(pointwise.bias)),
        options_(options),
        activation_(activation) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Tensor y,
                        ops::DepthwiseConv2D(x, depthwise_.value(), options_));
    const ops::Conv2DOptions pointwise{1, 1, ops::Padding::kValid};
    if (bias_.has_value()) {
      return ConvBiasActivate(activation_, y, pointwise_.value(),
                              bias_->value(), pointwise);
    }
    MT_ASSIGN_OR_RETURN(const Tensor z,
                        ops::Conv2D(y, pointwise_.value(), pointwise));
    return Activate(activation_, z);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const Shape& k = depthwise_.shape();
    return ConvOutputShape(name(), input, k[2], {k[0], k[1]}, options_,
                           pointwise_.shape()[3]);
  }

  std::vector<Variable*> variables() override {
    if (!bias_.has_value()) return {&depthwise_, &pointwise_};
    return {&depthwise_, &pointwise_, &*bias_};
  }

 private:
  Variable depthwise_;
  Variable pointwise_;
  std::optional<Variable> bias_;
  ops::Conv2DOptions options_;
  const ActivationDef& activation_;
};

MT_REGISTER(
    LayerType,
    {.name = "separable_conv2d",
     .doc = "activation(conv2d_1x1(depthwise_conv2d(x, depthwise_kernel), "
            "pointwise_kernel) + bias), NHWC (Keras SeparableConv2D)",
     .params = {WithConvWindowParams({Param::Int("filters")
                                          .Min(1)
                                          .Max(kMaxDimension)
                                          .Doc("output channels")},
                                     SeparableParams())},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_ASSIGN_OR_RETURN(const ConvWindow w, ReadConvWindow(spec, b));
       MT_ASSIGN_OR_RETURN(const ActivationDef* act,
                           FindActivation(spec.params.String("activation")));
       const int64_t channels = b.input_shape()[3];
       MT_ASSIGN_OR_RETURN(const int64_t multiplier,
                           ReadDepthMultiplier(spec, b));
       const std::array<int64_t, 2> k = w.kernel_size;
       const WeightInitializers init =
           ReadInitializers(spec.params, "depthwise_initializer");
       // Two seeds, one per kernel, as two layers would draw them.
       MT_ASSIGN_OR_RETURN(
           KernelAndBias depthwise,
           MakeKernelAndBias(b.name(), {k[0], k[1], channels, multiplier}, {},
                             /*use_bias=*/false, b.NextSeed(), b.device(),
                             std::nullopt, init, "depthwise_kernel"));
       const int64_t filters = spec.params.Int("filters");
       MT_ASSIGN_OR_RETURN(
           KernelAndBias pointwise,
           MakeKernelAndBias(
               b.name(), {1, 1, channels * multiplier, filters}, {filters},
               spec.params.Bool("use_bias"), b.NextSeed(), b.device(),
               std::nullopt,
               {spec.params.String("pointwise_initializer"), init.bias},
               "pointwise_kernel"));
       return std::unique_ptr<Layer>(
           new SeparableConv2DLayer(b.name(), std::move(depthwise.kernel),
                                    std::move(pointwise), w.options, *act));
     }});

}  // namespace
}  // namespace mirrortrain::models
