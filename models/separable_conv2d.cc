// Depthwise-separable convolution layers (config types `separable_conv2d`
// and `separable_conv1d`), Keras SeparableConv2D and SeparableConv1D: each
// channel convolved with its own depth_multiplier filters
// (`<name>/depthwise_kernel`, [kh, kw, channels, depth_multiplier]; 1-D
// [k, channels, depth_multiplier]), then a 1x1 convolution mixing them
// (`<name>/pointwise_kernel`, [1, 1, channels * depth_multiplier,
// filters]; 1-D [1, ..., filters]), the bias [filters] and the activation:
// Xception's and MobileNet's block as one layer. The two steps are the
// depthwise op and conv2d's (a 1x1 window: its bias and relu epilogue on
// GPUs); the 1-D layer runs them on one-row images, keeping Keras's
// kernel shapes.
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
#include "tensor/ops/array_ops.h"
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
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    Tensor in = x, depthwise = depthwise_.value(),
           pointwise = pointwise_.value();
    if (one_d()) {
      MT_ASSIGN_OR_RETURN(in, SequencesAsImages(x));
      MT_ASSIGN_OR_RETURN(depthwise, KernelAsImageKernel(depthwise));
      MT_ASSIGN_OR_RETURN(pointwise, KernelAsImageKernel(pointwise));
    }
    MT_ASSIGN_OR_RETURN(const Tensor y,
                        ops::DepthwiseConv2D(in, depthwise, options_));
    const ops::Conv2DOptions one_by_one{1, 1, ops::Padding::kValid};
    Tensor z;
    if (bias_.has_value()) {
      MT_ASSIGN_OR_RETURN(z, ConvBiasActivate(activation_, y, pointwise,
                                              bias_->value(), one_by_one));
    } else {
      MT_ASSIGN_OR_RETURN(z, ops::Conv2D(y, pointwise, one_by_one));
      MT_ASSIGN_OR_RETURN(z, Activate(activation_, z));
    }
    if (!one_d()) return z;
    return ops::Reshape(z, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    Shape k = depthwise_.shape();
    if (one_d()) k.insert(k.begin(), 1);
    auto image = [&](const Shape& in) {
      return ConvOutputShape(name(), in, k[2], {k[0], k[1]}, options_,
                             pointwise_.shape().back());
    };
    if (one_d()) return OneRowOutputShape(name(), input, k[2], image);
    return image(input);
  }

  std::vector<Variable*> variables() override {
    if (!bias_.has_value()) return {&depthwise_, &pointwise_};
    return {&depthwise_, &pointwise_, &*bias_};
  }

 private:
  bool one_d() const { return depthwise_.shape().size() == 3; }

  Variable depthwise_;
  Variable pointwise_;
  std::optional<Variable> bias_;
  ops::Conv2DOptions options_;
  const ActivationDef& activation_;
};

// The layer for the builder's input, its kernels of Keras's shapes.
absl::StatusOr<std::unique_ptr<Layer>> MakeSeparable(const LayerSpec& spec,
                                                     LayerBuilder& b,
                                                     const DepthwiseParts& p) {
  const WeightInitializers init =
      ReadInitializers(spec.params, "depthwise_initializer");
  const int64_t filters = spec.params.Int("filters");
  // Keras's 1-D pointwise kernel has no row axis.
  const Shape pointwise_shape =
      p.one_d ? Shape{1, p.channels * p.multiplier, filters}
              : Shape{1, 1, p.channels * p.multiplier, filters};
  // Two seeds, one per kernel, as two layers would draw them.
  MT_ASSIGN_OR_RETURN(
      KernelAndBias depthwise,
      MakeKernelAndBias(b.name(), p.depthwise_kernel, {}, /*use_bias=*/false,
                        b.NextSeed(), b.device(), std::nullopt, init,
                        "depthwise_kernel"));
  MT_ASSIGN_OR_RETURN(
      KernelAndBias pointwise,
      MakeKernelAndBias(
          b.name(), pointwise_shape, {filters}, spec.params.Bool("use_bias"),
          b.NextSeed(), b.device(), std::nullopt,
          {spec.params.String("pointwise_initializer"), init.bias},
          "pointwise_kernel"));
  return std::unique_ptr<Layer>(new SeparableConv2DLayer(
      b.name(), std::move(depthwise.kernel), std::move(pointwise),
      p.window.options, *p.activation));
}

MT_REGISTER(LayerType,
            (DepthwiseLayerType(
                "separable_conv2d",
                "activation(conv2d_1x1(depthwise_conv2d(x, depthwise_kernel), "
                "pointwise_kernel) + bias), NHWC (Keras SeparableConv2D)",
                {FiltersParam()}, SeparableParams(), /*one_d=*/false,
                MakeSeparable)));
MT_REGISTER(LayerType,
            (DepthwiseLayerType(
                "separable_conv1d",
                "activation(conv1d_1x1(depthwise_conv1d(x, depthwise_kernel), "
                "pointwise_kernel) + bias) over [batch, steps, channels] "
                "(Keras SeparableConv1D)",
                {FiltersParam()}, SeparableParams(), /*one_d=*/true,
                MakeSeparable)));

}  // namespace
}  // namespace mirrortrain::models
