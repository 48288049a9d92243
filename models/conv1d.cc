// 1-D convolution layer (Keras Conv1D): activation(conv1d(x, kernel) +
// bias) over sequences [batch, steps, channels], kernel [k, in / groups,
// out], names `<name>/kernel` and `<name>/bias`. Padding valid, same, or
// causal ((k - 1) * dilation zero steps in front, then valid: step t sees
// steps <= t only; WaveNet's dilated causal stacks).
//
// The convolution is conv2d's (ops::Conv2D, its CPU and GPU paths, grouped
// where groups > 1) on a one-row image: x as [batch, 1, steps, in] and the
// kernel as [1, k, in / groups, out], both reshapes of the same memory. The
// variable keeps Keras's shape, so checkpoints and warm starts read Keras's
// weights as they are.
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "models/activation.h"
#include "models/conv2d_layer.h"
#include "models/initializers.h"
#include "models/kernel_bias_layer.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class Conv1DLayer final : public KernelBiasLayer {
 public:
  Conv1DLayer(std::string name, KernelAndBias w, int64_t stride,
              int64_t dilation, int64_t groups, std::string padding,
              const ActivationDef& activation)
      : KernelBiasLayer(std::move(name), std::move(w)),
        stride_(stride),
        dilation_(dilation),
        groups_(groups),
        padding_(std::move(padding)),
        activation_(activation) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& /*ctx*/) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    const Shape& k = kernel_.shape();
    Tensor in = x;
    const int64_t channels = x.dim(2);
    if (padding_ == "causal") {
      MT_ASSIGN_OR_RETURN(in, ops::PadZeros(x, 1, Front(), 0));
    }
    MT_ASSIGN_OR_RETURN(in,
                        ops::Reshape(in, {in.dim(0), 1, in.dim(1), channels}));
    MT_ASSIGN_OR_RETURN(const Tensor kernel,
                        ops::Reshape(kernel_.value(), {1, k[0], k[1], k[2]}));
    const ops::Conv2DOptions options{.stride_h = 1,
                                     .stride_w = stride_,
                                     .padding = padding_ == "same"
                                                    ? ops::Padding::kSame
                                                    : ops::Padding::kValid,
                                     .dilation_w = dilation_};
    Tensor y;
    if (bias_.has_value()) {
      MT_ASSIGN_OR_RETURN(y, ConvBiasActivate(activation_, in, kernel,
                                              bias_->value(), options));
    } else {
      MT_ASSIGN_OR_RETURN(y, ops::Conv2D(in, kernel, options));
      MT_ASSIGN_OR_RETURN(y, Activate(activation_, y));
    }
    return ops::Reshape(y, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const Shape& k = kernel_.shape();
    if (input.size() != 3 || input[2] != k[1] * groups_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects [batch, steps, ", k[1] * groups_,
                       "] input, got ", ShapeToString(input)));
    }
    // Causal: valid over the steps with the span less one in front.
    const bool same = padding_ == "same";
    const int64_t steps = padding_ == "causal" ? input[1] + Front() : input[1];
    const ops::Window1D w =
        ops::ComputeWindow(steps, ops::DilatedSize(k[0], dilation_), stride_,
                           same ? ops::Padding::kSame : ops::Padding::kValid);
    return Shape{input[0], w.out, k[2]};
  }

 private:
  // Causal padding: zero steps in front, so that the window's last tap is
  // the output's own step.
  int64_t Front() const {
    return ops::DilatedSize(kernel_.shape()[0], dilation_) - 1;
  }

  int64_t stride_;
  int64_t dilation_;
  int64_t groups_;       // The kernel is [k, channels / groups, filters].
  std::string padding_;  // valid | same | causal
  const ActivationDef& activation_;
};

MT_REGISTER(
    LayerType,
    {.name = "conv1d",
     .doc = "activation(conv1d(x, kernel) + bias) over [batch, steps, "
            "channels] (Keras Conv1D)",
     .params = {WithConv1DWindowParams(
         {FiltersParam()}, KernelLayerKeys(GroupsParam()),
         {.paddings = {"valid", "same", "causal"},
          .padding = "valid: no padding; same: output = ceil(steps / "
                     "strides); causal: (kernel_size - 1) * dilation_rate "
                     "zeros in front, so an output sees no later step",
          .dilation = kDilationDoc})},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(b.CheckSequences());
       const Shape& in = b.input_shape();
       const int64_t k = spec.params.Int("kernel_size");
       const std::string padding = spec.params.String("padding");
       const int64_t stride = spec.params.Int("strides");
       const int64_t dilation = spec.params.Int("dilation_rate");
       MT_RETURN_IF_ERROR(CheckDilation(stride, dilation));
       MT_RETURN_IF_ERROR(b.CheckWindow1D("kernel_size", k, padding, dilation));
       MT_ASSIGN_OR_RETURN(const ActivationDef* act,
                           FindActivation(spec.params.String("activation")));
       const int64_t filters = spec.params.Int("filters");
       const int64_t groups = spec.params.Int("groups");
       MT_RETURN_IF_ERROR(CheckGroups(groups, in[2], filters));
       MT_ASSIGN_OR_RETURN(
           KernelAndBias w,
           MakeKernelAndBias(
               b.name(), {k, in[2] / groups, filters}, {filters},
               spec.params.Bool("use_bias"), b.NextSeed(), b.device(),
               std::nullopt,
               ReadInitializers(spec.params, "kernel_initializer")));
       return std::unique_ptr<Layer>(new Conv1DLayer(
           b.name(), std::move(w), stride, dilation, groups, padding, *act));
     }});

}  // namespace
}  // namespace mirrortrain::models
