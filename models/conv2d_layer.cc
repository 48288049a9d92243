#include "models/conv2d_layer.h"

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "models/layer_registry.h"
#include "models/simple_layers.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<std::unique_ptr<Conv2DLayer>> Conv2DLayer::Create(
    std::string name, int64_t in_channels, int64_t filters,
    std::array<int64_t, 2> kernel_size, const ops::Conv2DOptions& options,
    const ActivationDef& activation, bool use_bias, uint64_t seed,
    Device device, const WeightInitializers& init, int64_t groups) {
  MT_RETURN_IF_ERROR(CheckGroups(groups, in_channels, filters));
  MT_ASSIGN_OR_RETURN(
      KernelAndBias w,
      MakeKernelAndBias(
          name, {kernel_size[0], kernel_size[1], in_channels / groups, filters},
          {filters}, use_bias, seed, device, std::nullopt, init));
  return std::unique_ptr<Conv2DLayer>(new Conv2DLayer(
      std::move(name), std::move(w), options, activation, groups));
}

Param GroupsParam() {
  return Param::Int("groups")
      .Default(1)
      .Min(1)
      .Max(kMaxDimension)
      .Doc(
          "channel groups, each convolved with its own filters (ResNeXt's "
          "grouped convolution; the kernel's input axis is channels / "
          "groups); must divide the input channels and filters");
}

absl::Status CheckGroups(int64_t groups, int64_t in_channels, int64_t filters) {
  if (in_channels % groups == 0 && filters % groups == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("groups: ", groups, " does not divide ",
                   in_channels % groups != 0
                       ? absl::StrCat("the ", in_channels, " input channels")
                       : absl::StrCat("the ", filters, " filters")));
}

absl::StatusOr<Tensor> Conv2DLayer::Call(const Tensor& x,
                                         const ForwardContext& ctx) {
  // The channels it was built for (Keras's InputSpec): ops::Conv2D would
  // take a multiple of them as more groups.
  MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
  if (pool_.has_value() && ctx.bf16_activations) {
    // The pool's winners among the bf16 values (the fused pool would pick
    // them among the f32 ones before the rounding: another value of a tie,
    // and so another gradient, than Keras's).
    MT_ASSIGN_OR_RETURN(Tensor y, Unpooled(x));
    MT_RETURN_IF_ERROR(ops::RoundOutput(y, ops::OutputRounding::kBf16));
    return ops::MaxPool2D(y, *pool_);
  }
  if (!pool_.has_value()) return Unpooled(x);
  if (bias_.has_value() && activation_.apply == ops::Relu) {
    // Pooled, then the bias and relu: in the pooled kernel's epilogue.
    return ops::Conv2DMaxPoolBiasRelu(x, kernel_.value(), bias_->value(),
                                      options_, *pool_);
  }
  MT_ASSIGN_OR_RETURN(Tensor y,
                      ops::Conv2DMaxPool(x, kernel_.value(), options_, *pool_));
  if (!bias_.has_value()) return Activate(activation_, y);
  return BiasActivate(activation_, y, bias_->value());
}

absl::StatusOr<Tensor> Conv2DLayer::Unpooled(const Tensor& x) const {
  if (bias_.has_value()) {
    return ConvBiasActivate(activation_, x, kernel_.value(), bias_->value(),
                            options_);
  }
  MT_ASSIGN_OR_RETURN(Tensor y, ops::Conv2D(x, kernel_.value(), options_));
  return Activate(activation_, y);
}

absl::StatusOr<Shape> ConvOutputShape(const std::string& layer,
                                      const Shape& input, int64_t in_channels,
                                      std::array<int64_t, 2> window,
                                      const ops::Conv2DOptions& options,
                                      int64_t out_channels) {
  if (input.size() != 4 || input[3] != in_channels) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": expects NHWC input with ", in_channels,
                     " channels, got ", ShapeToString(input)));
  }
  const ImageWindow g = ops::MakeImageWindow(
      input, window[0], window[1], options.stride_h, options.stride_w,
      options.padding, options.dilation_h, options.dilation_w);
  return Shape{input[0], g.oh, g.ow, out_channels};
}

absl::StatusOr<Shape> Conv2DLayer::OutputShape(const Shape& input) const {
  const Shape& k = kernel_.shape();
  MT_ASSIGN_OR_RETURN(Shape out, ConvOutputShape(name(), input, k[2] * groups_,
                                                 {k[0], k[1]}, options_, k[3]));
  if (pool_.has_value()) {
    out[1] = ops::ComputeWindow(out[1], pool_->ksize_h, pool_->stride_h,
                                pool_->padding)
                 .out;
    out[2] = ops::ComputeWindow(out[2], pool_->ksize_w, pool_->stride_w,
                                pool_->padding)
                 .out;
  }
  return out;
}

bool Conv2DLayer::AbsorbNext(const Layer& next) {
  const auto* pool = dynamic_cast<const MaxPool2DLayer*>(&next);
  if (pool == nullptr || pool_.has_value() || !activation_.non_decreasing) {
    return false;
  }
  pool_ = pool->options();
  return true;
}

std::vector<Param> WithConvWindowParams(std::vector<Param> first,
                                        std::vector<Param> rest,
                                        const char* padding_doc,
                                        const char* dilation_doc,
                                        const char* strides_doc) {
  first.push_back(Param::IntPair("kernel_size")
                      .Min(1)
                      .Max(kMaxDimension)
                      .Doc("kernel [height, width]; an integer: a square"));
  first.push_back(Param::IntPair("strides")
                      .Default(1)
                      .Min(1)
                      .Max(kMaxDimension)
                      .Doc(strides_doc));
  first.push_back(Param::String("padding")
                      .Default("valid")
                      .OneOf({"valid", "same"})
                      .Doc(padding_doc));
  first.push_back(Param::IntPair("dilation_rate")
                      .Default(1)
                      .Min(1)
                      .Max(kMaxDimension)
                      .Doc(dilation_doc));
  for (Param& p : rest) first.push_back(std::move(p));
  return first;
}

std::vector<Param> DepthwiseParams() {
  return WithInitializerParams(
      {Param::Int("depth_multiplier")
           .Default(1)
           .Min(1)
           .Max(kMaxDimension)
           .Doc("filters per input channel"),
       ActivationParam("linear", "applied after the bias"), UseBiasParam()},
      "depthwise_initializer");
}

absl::StatusOr<int64_t> ReadDepthMultiplier(const LayerSpec& spec,
                                            const LayerBuilder& b) {
  const int64_t channels = b.input_shape().back();
  const int64_t multiplier = spec.params.Int("depth_multiplier");
  if (channels > kMaxDimension / multiplier) {
    return absl::InvalidArgumentError(absl::StrCat(
        "depth_multiplier: ", channels, " channels times ", multiplier,
        " is more than ", kMaxDimension, " output channels"));
  }
  return multiplier;
}

absl::Status CheckDilation(int64_t stride, int64_t dilation) {
  if (stride == 1 || dilation == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "dilation_rate: ", dilation, " with strides ", stride,
      ": a dilated window takes strides 1 (Keras's rule for its Conv "
      "layers)"));
}

absl::StatusOr<ConvWindow> ReadConvWindow(const LayerSpec& spec,
                                          const LayerBuilder& b,
                                          bool strided_dilation) {
  MT_RETURN_IF_ERROR(CheckImageShape(b.input_shape(), ""));
  ConvWindow w;
  w.kernel_size = spec.params.IntPair("kernel_size");
  const bool same = spec.params.String("padding") == "same";
  const std::array<int64_t, 2> s = spec.params.IntPair("strides");
  const std::array<int64_t, 2> d = spec.params.IntPair("dilation_rate");
  if (!strided_dilation) {
    MT_RETURN_IF_ERROR(
        CheckDilation(std::max(s[0], s[1]), std::max(d[0], d[1])));
  }
  MT_RETURN_IF_ERROR(b.CheckWindow("kernel_size", w.kernel_size, same, d));
  w.options = {.stride_h = s[0],
               .stride_w = s[1],
               .padding = same ? ops::Padding::kSame : ops::Padding::kValid,
               .dilation_h = d[0],
               .dilation_w = d[1]};
  return w;
}

Param FiltersParam() {
  return Param::Int("filters").Min(1).Max(kMaxDimension).Doc("output channels");
}

std::vector<Param> KernelLayerKeys(Param own) {
  return WithInitializerParams(
      {std::move(own), ActivationParam("linear", "applied after the bias"),
       UseBiasParam()},
      "kernel_initializer");
}

std::vector<Param> WithConv1DWindowParams(std::vector<Param> first,
                                          std::vector<Param> rest,
                                          const Conv1DKeyDocs& docs) {
  first.push_back(Param::Int("kernel_size")
                      .Min(1)
                      .Max(kMaxDimension)
                      .Doc("steps the kernel spans"));
  first.push_back(Param::Int("strides")
                      .Default(1)
                      .Min(1)
                      .Max(kMaxDimension)
                      .Doc(docs.strides));
  first.push_back(Param::String("padding")
                      .Default("valid")
                      .OneOf(docs.paddings)
                      .Doc(docs.padding));
  first.push_back(Param::Int("dilation_rate")
                      .Default(1)
                      .Min(1)
                      .Max(kMaxDimension)
                      .Doc(docs.dilation));
  for (Param& p : rest) first.push_back(std::move(p));
  return first;
}

absl::StatusOr<ConvWindow> ReadConv1DWindow(const LayerSpec& spec,
                                            const LayerBuilder& b) {
  MT_RETURN_IF_ERROR(b.CheckSequences());
  const int64_t k = spec.params.Int("kernel_size");
  const int64_t s = spec.params.Int("strides");
  const int64_t d = spec.params.Int("dilation_rate");
  const std::string padding = spec.params.String("padding");
  MT_RETURN_IF_ERROR(b.CheckWindow1D("kernel_size", k, padding, d));
  ConvWindow w;
  w.kernel_size = {1, k};
  w.options = {
      .stride_h = 1,
      .stride_w = s,
      .padding = padding == "same" ? ops::Padding::kSame : ops::Padding::kValid,
      .dilation_w = d};
  return w;
}

LayerType DepthwiseLayerType(std::string name, std::string doc,
                             std::vector<Param> first, std::vector<Param> rest,
                             bool one_d, DepthwiseMaker make) {
  return {
      .name = std::move(name),
      .doc = std::move(doc),
      .params = {one_d
                     ? WithConv1DWindowParams(std::move(first), std::move(rest))
                     : WithConvWindowParams(std::move(first), std::move(rest),
                                            kConvPaddingDoc,
                                            kDepthwiseDilationDoc)},
      .create = [one_d, make](const LayerSpec& spec, LayerBuilder& b)
          -> absl::StatusOr<std::unique_ptr<Layer>> {
        DepthwiseParts p{.one_d = one_d};
        MT_ASSIGN_OR_RETURN(
            p.window, one_d
                          ? ReadConv1DWindow(spec, b)
                          : ReadConvWindow(spec, b, /*strided_dilation=*/true));
        MT_ASSIGN_OR_RETURN(p.activation,
                            FindActivation(spec.params.String("activation")));
        p.channels = b.input_shape().back();
        MT_ASSIGN_OR_RETURN(p.multiplier, ReadDepthMultiplier(spec, b));
        const std::array<int64_t, 2> k = p.window.kernel_size;
        p.depthwise_kernel = one_d
                                 ? Shape{k[1], p.channels, p.multiplier}
                                 : Shape{k[0], k[1], p.channels, p.multiplier};
        return make(spec, b, p);
      }};
}

absl::StatusOr<Tensor> SequencesAsImages(const Tensor& x) {
  return ops::Reshape(x, {x.dim(0), 1, x.dim(1), x.dim(2)});
}

absl::StatusOr<Tensor> KernelAsImageKernel(const Tensor& kernel) {
  Shape shape = kernel.shape();
  shape.insert(shape.begin(), 1);
  return ops::Reshape(kernel, shape);
}

absl::StatusOr<Shape> OneRowOutputShape(
    const std::string& layer, const Shape& input, int64_t channels,
    const std::function<absl::StatusOr<Shape>(const Shape&)>& image) {
  if (input.size() != 3 || input[2] != channels) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": expects [batch, steps, ", channels,
                     "] input, got ", ShapeToString(input)));
  }
  MT_ASSIGN_OR_RETURN(const Shape out,
                      image({input[0], 1, input[1], input[2]}));
  return Shape{out[0], out[2], out[3]};
}

MT_REGISTER(LayerType,
            {.name = "conv2d",
             .doc = "activation(conv2d(x, kernel) + bias), NHWC (Keras Conv2D)",
             .params = {WithConvWindowParams({FiltersParam()},
                                             KernelLayerKeys(GroupsParam()))},
             .create = [](const LayerSpec& spec, LayerBuilder& b)
                 -> absl::StatusOr<std::unique_ptr<Layer>> {
               MT_ASSIGN_OR_RETURN(const ConvWindow w, ReadConvWindow(spec, b));
               MT_ASSIGN_OR_RETURN(
                   const ActivationDef* act,
                   FindActivation(spec.params.String("activation")));
               return Conv2DLayer::Create(
                   b.name(), b.input_shape()[3], spec.params.Int("filters"),
                   w.kernel_size, w.options, *act, spec.params.Bool("use_bias"),
                   b.NextSeed(), b.device(),
                   ReadInitializers(spec.params, "kernel_initializer"),
                   spec.params.Int("groups"));
             }});

}  // namespace mirrortrain::models
