// 2-D convolution layer: activation(conv2d(x, kernel) + bias), NHWC, kernel
// [kh, kw, in / groups, out], names `<name>/kernel` and `<name>/bias` as Keras
// (glorot_uniform kernel, zero bias). Config type `conv2d`.
//
// A max pooling layer that directly follows is absorbed (AbsorbNext): the
// layer then computes activation(max_pool(conv2d(x)) + bias). That equals
// pooling after the activation exactly, because the bias is constant per
// channel and the activation is elementwise non-decreasing (and float
// rounding is monotone), while the bias and activation touch only the
// pooled values (a quarter for 2x2 pooling). Gradients equal the unfused
// chain's too, except which of several values that round to the same
// maximum receives it. Activations that are not non-decreasing are never
// fused. Under mixed bfloat16 the pool runs on the rounded outputs, as
// Keras pools the layer's bf16 output: values the rounding ties are common
// there, and the first of them takes the gradient.
#ifndef MIRRORTRAIN_MODELS_CONV2D_LAYER_H_
#define MIRRORTRAIN_MODELS_CONV2D_LAYER_H_

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "models/activation.h"
#include "models/initializers.h"
#include "models/kernel_bias_layer.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/pooling_ops.h"

namespace mirrortrain::models {

class Conv2DLayer final : public KernelBiasLayer {
 public:
  static absl::StatusOr<std::unique_ptr<Conv2DLayer>> Create(
      std::string name, int64_t in_channels, int64_t filters,
      std::array<int64_t, 2> kernel_size, const ops::Conv2DOptions& options,
      const ActivationDef& activation, bool use_bias, uint64_t seed,
      Device device, const WeightInitializers& init = {}, int64_t groups = 1);

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  bool AbsorbNext(const Layer& next) override;

 private:
  Conv2DLayer(std::string name, KernelAndBias w, ops::Conv2DOptions options,
              const ActivationDef& activation, int64_t groups)
      : KernelBiasLayer(std::move(name), std::move(w)),
        options_(options),
        activation_(activation),
        groups_(groups) {}
  // activation(conv2d(x) + bias), without the absorbed pool.
  absl::StatusOr<Tensor> Unpooled(const Tensor& x) const;

  ops::Conv2DOptions options_;
  const ActivationDef& activation_;
  // The kernel [kh, kw, in / groups, filters] convolves groups of
  // channels (ops::Conv2D infers them from the shapes).
  int64_t groups_;
  std::optional<ops::Pool2DOptions> pool_;
};

// The `groups` key of conv2d and conv1d (Keras's), and its check against
// the input channels and filters: InvalidArgument naming the key unless
// groups divides both.
Param GroupsParam();
absl::Status CheckGroups(int64_t groups, int64_t in_channels, int64_t filters);

// The dilation_rate key's doc, and its rule: above 1 only with strides 1
// (Keras's Conv rule); InvalidArgument naming the key otherwise. Keras's
// depthwise and separable layers take both (their own doc).
inline constexpr char kDilationDoc[] =
    "taps this many cells apart (a dilated, atrous convolution: the window "
    "spans (kernel_size - 1) * dilation_rate + 1); above 1 only with strides "
    "1";
inline constexpr char kDepthwiseDilationDoc[] =
    "taps this many cells apart (a dilated, atrous convolution: the window "
    "spans (kernel_size - 1) * dilation_rate + 1); with strides too, as "
    "Keras's depthwise layers";
absl::Status CheckDilation(int64_t stride, int64_t dilation);

// The keys of a conv layer's window, Keras's: `kernel_size`, `strides` and
// `dilation_rate` (an integer for both dimensions, or [height, width]) and
// `padding` (`padding_doc`, `dilation_doc`, `strides_doc` say what they
// do), between
// `first` and `rest` (conv2d's filters come first, depthwise_conv2d's
// depth_multiplier after).
inline constexpr char kConvPaddingDoc[] =
    "valid: no padding; same: output = ceil(in / strides)";
inline constexpr char kConvStridesDoc[] =
    "step [down, across]; an integer: both";
std::vector<Param> WithConvWindowParams(
    std::vector<Param> first, std::vector<Param> rest,
    const char* padding_doc = kConvPaddingDoc,
    const char* dilation_doc = kDilationDoc,
    const char* strides_doc = kConvStridesDoc);

// A conv layer's output for NHWC `input` of `in_channels` channels under
// `window` (height, width) and `options`: [batch, out_h, out_w,
// out_channels]; InvalidArgument naming `layer` for other inputs.
absl::StatusOr<Shape> ConvOutputShape(const std::string& layer,
                                      const Shape& input, int64_t in_channels,
                                      std::array<int64_t, 2> window,
                                      const ops::Conv2DOptions& options,
                                      int64_t out_channels);

// A depthwise layer's keys after its window (depthwise_conv2d, _conv1d,
// separable_conv2d, _conv1d): depth_multiplier, activation, use_bias, and
// the depthwise_initializer and bias_initializer.
std::vector<Param> DepthwiseParams();

// depth_multiplier of a depthwise layer (depthwise_conv2d, _conv1d,
// separable_conv2d, _conv1d) for the builder's input (channels last),
// refused when the channels times it exceed kMaxDimension.
absl::StatusOr<int64_t> ReadDepthMultiplier(const LayerSpec& spec,
                                            const LayerBuilder& b);

// Those keys' values for the builder's input, which must be NHWC, the
// window checked to fit it; dilation with strides too where
// `strided_dilation` (the depthwise layers), else CheckDilation's rule.
struct ConvWindow {
  std::array<int64_t, 2> kernel_size = {1, 1};  // Height, width.
  ops::Conv2DOptions options;
};
absl::StatusOr<ConvWindow> ReadConvWindow(const LayerSpec& spec,
                                          const LayerBuilder& b,
                                          bool strided_dilation = false);

// The `filters` key of the conv layers that take one.
Param FiltersParam();
// A kernel layer's keys after its window: `own` (groups, output_padding),
// activation, use_bias and the kernel and bias initializers.
std::vector<Param> KernelLayerKeys(Param own);

// The 1-D conv layers' window keys (integers: kernel_size, strides,
// dilation_rate; padding) between `first` and `rest`, as `docs` describe
// them (the defaults: the depthwise layers', padding valid or same,
// dilation with strides too); and, for the depthwise layers
// (depthwise_conv1d, separable_conv1d), their values for the builder's
// sequences as a one-row image's window (kernel [1, k], strides [1, s]).
struct Conv1DKeyDocs {
  std::vector<std::string> paddings = {"valid", "same"};
  const char* padding =
      "valid: no padding; same: output = ceil(steps / strides)";
  const char* strides = "step between outputs";
  const char* dilation = kDepthwiseDilationDoc;
};
std::vector<Param> WithConv1DWindowParams(std::vector<Param> first,
                                          std::vector<Param> rest,
                                          const Conv1DKeyDocs& docs = {});
absl::StatusOr<ConvWindow> ReadConv1DWindow(const LayerSpec& spec,
                                            const LayerBuilder& b);

// The registry entry of a depthwise layer (depthwise_conv2d, _conv1d,
// separable_conv2d, _conv1d): the window keys around `first` and `rest`,
// what every depthwise layer reads (DepthwiseParts: the window, by
// ReadConv1DWindow where one_d, else ReadConvWindow with dilation and
// strides together), then `make` builds the layer.
struct DepthwiseParts {
  ConvWindow window;
  const ActivationDef* activation = nullptr;
  int64_t channels = 0, multiplier = 0;
  bool one_d = false;
  // Keras's shape of the depthwise kernel: [kh, kw, channels, multiplier],
  // 1-D [k, channels, multiplier].
  Shape depthwise_kernel;
};
using DepthwiseMaker = absl::StatusOr<std::unique_ptr<Layer>> (*)(
    const LayerSpec& spec, LayerBuilder& b, const DepthwiseParts& parts);
LayerType DepthwiseLayerType(std::string name, std::string doc,
                             std::vector<Param> first, std::vector<Param> rest,
                             bool one_d, DepthwiseMaker make);

// Sequences [batch, steps, channels] as one-row images [batch, 1, steps,
// channels], and a 1-D kernel [k, ...] as the 2-D one [1, k, ...]
// (reshapes of the same memory).
absl::StatusOr<Tensor> SequencesAsImages(const Tensor& x);
absl::StatusOr<Tensor> KernelAsImageKernel(const Tensor& kernel);
// A one-row layer's output shape for sequences `input`: the 2-D layer's
// (`image` computes it for [batch, 1, steps, channels]) without the row
// axis; InvalidArgument naming `layer` for inputs that are not sequences
// of `channels` channels.
absl::StatusOr<Shape> OneRowOutputShape(
    const std::string& layer, const Shape& input, int64_t channels,
    const std::function<absl::StatusOr<Shape>(const Shape&)>& image);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_CONV2D_LAYER_H_
