// Depthwise convolution layers (config types `depthwise_conv2d` and
// `depthwise_conv1d`), Keras DepthwiseConv2D and DepthwiseConv1D:
// activation(depthwise_conv(x, kernel) + bias), NHWC images or sequences
// [batch, steps, channels], kernel [kh, kw, channels, depth_multiplier]
// ([k, channels, depth_multiplier]) named `<name>/kernel` (glorot_uniform
// with Keras's fans: channels and depth_multiplier times the window), bias
// [channels * depth_multiplier]. The 1-D layer runs the 2-D op on one-row
// images (as conv1d), keeping Keras's kernel shape.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/activation.h"
#include "models/conv2d_layer.h"
#include "models/initializers.h"
#include "models/kernel_bias_layer.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/depthwise_conv_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class DepthwiseConv2DLayer final : public KernelBiasLayer {
 public:
  DepthwiseConv2DLayer(std::string name, KernelAndBias weights,
                       ops::Conv2DOptions options,
                       const ActivationDef& activation)
      : KernelBiasLayer(std::move(name), std::move(weights)),
        options_(options),
        activation_(activation) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    Tensor in = x, kernel = kernel_.value();
    if (one_d()) {
      MT_ASSIGN_OR_RETURN(in, SequencesAsImages(x));
      MT_ASSIGN_OR_RETURN(kernel, KernelAsImageKernel(kernel));
    }
    MT_ASSIGN_OR_RETURN(Tensor y, ops::DepthwiseConv2D(in, kernel, options_));
    if (one_d()) {
      MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, out));
    }
    if (!bias_.has_value()) return Activate(activation_, y);
    return BiasActivate(activation_, y, bias_->value());
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    Shape k = kernel_.shape();
    if (one_d()) k.insert(k.begin(), 1);
    auto image = [&](const Shape& in) {
      return ConvOutputShape(name(), in, k[2], {k[0], k[1]}, options_,
                             k[2] * k[3]);
    };
    if (one_d()) return OneRowOutputShape(name(), input, k[2], image);
    return image(input);
  }

 private:
  bool one_d() const { return kernel_.shape().size() == 3; }

  ops::Conv2DOptions options_;
  const ActivationDef& activation_;
};

// The layer for the builder's input, its kernel of Keras's shape.
absl::StatusOr<std::unique_ptr<Layer>> MakeDepthwise(const LayerSpec& spec,
                                                     LayerBuilder& b,
                                                     const DepthwiseParts& p) {
  MT_ASSIGN_OR_RETURN(
      KernelAndBias weights,
      MakeKernelAndBias(
          b.name(), p.depthwise_kernel, {p.channels * p.multiplier},
          spec.params.Bool("use_bias"), b.NextSeed(), b.device(), std::nullopt,
          ReadInitializers(spec.params, "depthwise_initializer")));
  return std::unique_ptr<Layer>(new DepthwiseConv2DLayer(
      b.name(), std::move(weights), p.window.options, *p.activation));
}

MT_REGISTER(LayerType,
            (DepthwiseLayerType(
                "depthwise_conv2d",
                "activation(depthwise_conv2d(x, kernel) + bias), NHWC: each "
                "channel convolved with its own depth_multiplier filters "
                "(Keras DepthwiseConv2D)",
                {}, DepthwiseParams(), /*one_d=*/false, MakeDepthwise)));
MT_REGISTER(LayerType,
            (DepthwiseLayerType(
                "depthwise_conv1d",
                "activation(depthwise_conv1d(x, kernel) + bias) over [batch, "
                "steps, channels]: each channel convolved with its own "
                "depth_multiplier filters (Keras DepthwiseConv1D)",
                {}, DepthwiseParams(), /*one_d=*/true, MakeDepthwise)));

}  // namespace
}  // namespace mirrortrain::models
