// Transposed convolutions (Keras Conv2DTranspose and Conv1DTranspose, the
// up-sampling convolutions of U-Nets, autoencoders and DCGAN generators):
// activation(conv_transpose(x, kernel) + bias), the kernel
// [kh, kw, filters, in] ([k, filters, in] in 1-D), as Keras shapes and
// names them (`<name>/kernel`, `<name>/bias`).
//
// The output size is Keras's: valid (in - 1) * strides + max(span, strides),
// same in * strides, or with output_padding p (valid: (in - 1) * strides +
// span + p, same: (in - 1) * strides + span % 2 + p), where span is the
// dilated kernel's. The op is ops::Conv2DTranspose (the 1-D layer on
// one-row images, as conv1d), which pads same as the convolution of that
// output does, as tf.nn.conv_transpose: the output must convolve back to
// the input's size, which output_padding can break (same, an even span, p
// 0): such a layer is refused, as TensorFlow refuses it when it runs
// (except from a one-cell input, where TensorFlow returns an empty output).
#include <algorithm>
#include <array>
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

// Keras's output length of one axis (deconv_output_length).
int64_t OutputLength(int64_t in, int64_t span, int64_t stride, bool same,
                     std::optional<int64_t> output_padding) {
  if (!output_padding.has_value()) {
    return same ? in * stride : (in - 1) * stride + std::max(span, stride);
  }
  return (in - 1) * stride + (same ? span % 2 : span) + *output_padding;
}

class ConvTransposeLayer final : public KernelBiasLayer {
 public:
  // `out` is the output's [height, width] (1-D: [1, steps]) for inputs of
  // `in` [height, width]; the kernel has Keras's shape (rank 3 in 1-D).
  ConvTransposeLayer(std::string name, KernelAndBias w,
                     ops::Conv2DOptions options, std::array<int64_t, 2> in,
                     std::array<int64_t, 2> out,
                     const ActivationDef& activation)
      : KernelBiasLayer(std::move(name), std::move(w)),
        options_(options),
        in_(in),
        out_(out),
        activation_(activation) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& /*ctx*/) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    Tensor in = x, kernel = kernel_.value();
    if (one_d()) {
      const Shape& k = kernel_.shape();
      MT_ASSIGN_OR_RETURN(in, ops::Reshape(x, {x.dim(0), 1, x.dim(1), k[2]}));
      MT_ASSIGN_OR_RETURN(kernel, ops::Reshape(kernel, {1, k[0], k[1], k[2]}));
    }
    MT_ASSIGN_OR_RETURN(
        Tensor y, ops::Conv2DTranspose(in, kernel, out_[0], out_[1], options_));
    if (one_d()) {
      MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, out));
    }
    if (!bias_.has_value()) return Activate(activation_, y);
    return BiasActivate(activation_, y, bias_->value());
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const Shape& k = kernel_.shape();
    const int64_t channels = k.back(), filters = k[k.size() - 2];
    if (one_d()) {
      if (input.size() != 3 || input[1] != in_[1] || input[2] != channels) {
        return absl::InvalidArgumentError(
            absl::StrCat(name(), ": expects [batch, ", in_[1], ", ", channels,
                         "] input, got ", ShapeToString(input)));
      }
      return Shape{input[0], out_[1], filters};
    }
    if (input.size() != 4 || input[1] != in_[0] || input[2] != in_[1] ||
        input[3] != channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": expects NHWC input [batch, ", in_[0], ", ", in_[1], ", ",
          channels, "], got ", ShapeToString(input)));
    }
    return Shape{input[0], out_[0], out_[1], filters};
  }

 private:
  bool one_d() const { return kernel_.shape().size() == 3; }

  ops::Conv2DOptions options_;
  // The input's and output's [height, width]: the output size is fixed
  // when the layer is built, as Keras's InputSpec fixes the input's.
  std::array<int64_t, 2> in_;
  std::array<int64_t, 2> out_;
  const ActivationDef& activation_;
};

Param OutputPaddingParam(bool pair) {
  Param p =
      pair ? Param::IntPair("output_padding") : Param::Int("output_padding");
  return std::move(p)
      .Nullable()
      .Min(0)
      .Max(kMaxDimension)
      .Doc(
          "extra output cells at the end (below strides); null: Keras's sizes "
          "(same: in * strides)");
}

// The layer for the builder's input of spatial size `in` ([1, steps] in
// 1-D) and a kernel of `kernel_shape` (Keras's) with window `k`.
absl::StatusOr<std::unique_ptr<Layer>> MakeConvTranspose(
    const LayerSpec& spec, LayerBuilder& b, std::array<int64_t, 2> in,
    std::array<int64_t, 2> k, std::array<int64_t, 2> s,
    std::array<int64_t, 2> d, std::optional<std::array<int64_t, 2>> op,
    Shape kernel_shape) {
  const bool same = spec.params.String("padding") == "same";
  MT_RETURN_IF_ERROR(CheckDilation(std::max(s[0], s[1]), std::max(d[0], d[1])));
  std::array<int64_t, 2> out;
  for (int i = 0; i < 2; ++i) {
    if (op.has_value() && (*op)[i] >= s[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("output_padding: ", (*op)[i], " is not below strides ",
                       s[i], " (Keras's rule)"));
    }
    const int64_t span = ops::DilatedSize(k[i], d[i]);
    out[i] =
        OutputLength(in[i], span, s[i], same,
                     op.has_value() ? std::optional((*op)[i]) : std::nullopt);
    if (out[i] > kMaxDimension) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel_size, strides: an output of ", out[i],
                       " cells is more than ", kMaxDimension));
    }
    // tf.nn.conv_transpose's rule: the output convolves back to the input.
    const int64_t back =
        ops::ComputeWindow(out[i], span, s[i],
                           same ? ops::Padding::kSame : ops::Padding::kValid)
            .out;
    if (back != in[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output_padding: an output of ", out[i], " cells convolves to ", back,
          ", not the input's ", in[i],
          " (TensorFlow refuses it; use another output_padding)"));
    }
  }
  MT_ASSIGN_OR_RETURN(const ActivationDef* act,
                      FindActivation(spec.params.String("activation")));
  const int64_t filters = spec.params.Int("filters");
  MT_ASSIGN_OR_RETURN(
      KernelAndBias w,
      MakeKernelAndBias(b.name(), kernel_shape, {filters},
                        spec.params.Bool("use_bias"), b.NextSeed(), b.device(),
                        std::nullopt,
                        ReadInitializers(spec.params, "kernel_initializer")));
  const ops::Conv2DOptions options{
      .stride_h = s[0],
      .stride_w = s[1],
      .padding = same ? ops::Padding::kSame : ops::Padding::kValid,
      .dilation_h = d[0],
      .dilation_w = d[1]};
  return std::unique_ptr<Layer>(
      new ConvTransposeLayer(b.name(), std::move(w), options, in, out, *act));
}

constexpr char kSameDoc[] =
    "valid: no padding; same: output = in * strides (the padding of the "
    "convolution it transposes)";

MT_REGISTER(
    LayerType,
    {.name = "conv2d_transpose",
     .doc = "activation(conv2d_transpose(x, kernel) + bias), NHWC, the "
            "kernel [kh, kw, filters, in] (Keras Conv2DTranspose)",
     .params = {WithConvWindowParams(
         {FiltersParam()}, KernelLayerKeys(OutputPaddingParam(/*pair=*/true)),
         kSameDoc, kDilationDoc,
         "output cells per input cell [down, across]; an integer: both")},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(CheckImageShape(b.input_shape(), ""));
       const Shape& in = b.input_shape();
       const std::array<int64_t, 2> k = spec.params.IntPair("kernel_size");
       return MakeConvTranspose(
           spec, b, {in[1], in[2]}, k, spec.params.IntPair("strides"),
           spec.params.IntPair("dilation_rate"),
           spec.params.OptionalIntPair("output_padding"),
           {k[0], k[1], spec.params.Int("filters"), in[3]});
     }});

MT_REGISTER(
    LayerType,
    {.name = "conv1d_transpose",
     .doc = "activation(conv1d_transpose(x, kernel) + bias) over [batch, "
            "steps, channels], the kernel [k, filters, in] (Keras "
            "Conv1DTranspose)",
     .params = {WithConv1DWindowParams(
         {FiltersParam()}, KernelLayerKeys(OutputPaddingParam(/*pair=*/false)),
         {.padding = kSameDoc,
          .strides = "output steps per input step",
          .dilation = kDilationDoc})},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(b.CheckSequences());
       const Shape& in = b.input_shape();
       const int64_t k = spec.params.Int("kernel_size");
       const std::optional<int64_t> op =
           spec.params.OptionalInt("output_padding");
       return MakeConvTranspose(
           spec, b, {1, in[1]}, {1, k}, {1, spec.params.Int("strides")},
           {1, spec.params.Int("dilation_rate")},
           op.has_value() ? std::optional(std::array<int64_t, 2>{0, *op})
                          : std::nullopt,
           {k, spec.params.Int("filters"), in[2]});
     }});

}  // namespace
}  // namespace mirrortrain::models
