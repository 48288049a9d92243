// Pooling over the steps of sequences [batch, steps, channels], as Keras's
// MaxPooling1D, AveragePooling1D, GlobalMaxPooling1D and
// GlobalAveragePooling1D (config types max_pooling1d, average_pooling1d,
// global_max_pooling1d, global_average_pooling1d).
//
// Windows run on the 2-D pooling ops (their CPU and GPU kernels and
// gradients) over a one-row image: x as [batch, 1, steps, channels], a
// reshape of the same memory, and windows [1, pool_size].
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

// A built layer's input at call time (the factory checks it with
// LayerBuilder::CheckSequences).
absl::Status CheckSequences(const Shape& input, const std::string& layer) {
  if (input.size() == 3) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(layer, ": expects [batch, steps, channels] input, got ",
                   ShapeToString(input)));
}

// max_pooling1d and average_pooling1d: windows of `options.ksize_w` steps.
class Pool1DLayer final : public Layer {
 public:
  Pool1DLayer(std::string name, bool max, ops::Pool2DOptions options)
      : Layer(std::move(name)), max_(max), options_(options) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    MT_ASSIGN_OR_RETURN(const Tensor rows,
                        ops::Reshape(x, {x.dim(0), 1, x.dim(1), x.dim(2)}));
    MT_ASSIGN_OR_RETURN(const Tensor y, max_ ? ops::MaxPool2D(rows, options_)
                                             : ops::AvgPool2D(rows, options_));
    return ops::Reshape(y, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_RETURN_IF_ERROR(CheckSequences(input, name()));
    const ops::Window1D w = ops::ComputeWindow(
        input[1], options_.ksize_w, options_.stride_w, options_.padding);
    return Shape{input[0], w.out, input[2]};
  }

 private:
  bool max_;
  ops::Pool2DOptions options_;
};

// global_max_pooling1d and global_average_pooling1d: over every step.
class GlobalPooling1DLayer final : public Layer {
 public:
  GlobalPooling1DLayer(std::string name, bool max, bool keepdims)
      : Layer(std::move(name)), max_(max), keepdims_(keepdims) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    if (!max_ && ctx.mask.defined()) return MaskedMean(x, ctx.mask);
    if (!max_) return ops::ReduceMean(x, {1}, keepdims_);
    // One window over every step: max pooling's gradient (the first
    // maximum of each channel), as global_max_pooling2d's.
    const int64_t steps = x.dim(1);
    MT_ASSIGN_OR_RETURN(const Tensor rows,
                        ops::Reshape(x, {x.dim(0), 1, steps, x.dim(2)}));
    MT_ASSIGN_OR_RETURN(
        const Tensor y,
        ops::MaxPool2D(rows, {1, steps, 1, steps, ops::Padding::kValid}));
    return ops::Reshape(y, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_RETURN_IF_ERROR(CheckSequences(input, name()));
    if (keepdims_) return Shape{input[0], 1, input[2]};
    return Shape{input[0], input[2]};
  }

  // Keras's: the average pooling takes a mask (and gives none); the max
  // pooling drops it.
  bool SupportsMasking() const override { return !max_; }
  bool OutputMasked(bool) const override { return false; }

 private:
  // The mean over the unmasked steps, as Keras's: their sum over their
  // count (0 / 0 where every step is masked, as Keras's NaN).
  absl::StatusOr<Tensor> MaskedMean(const Tensor& x, const Tensor& mask) const {
    MT_RETURN_IF_ERROR(CheckMask(x, mask, name()));
    MT_ASSIGN_OR_RETURN(const Tensor weights, MaskOverFeatures(mask, x));
    MT_ASSIGN_OR_RETURN(const Tensor kept, ops::Mul(x, weights));
    MT_ASSIGN_OR_RETURN(const Tensor sum, ops::ReduceSum(kept, {1}, keepdims_));
    MT_ASSIGN_OR_RETURN(const Tensor count,
                        ops::ReduceSum(weights, {1}, keepdims_));
    return ops::Div(sum, count);
  }

  bool max_;
  bool keepdims_;
};

ParamSchema Pool1DParams() {
  return {{Param::Int("pool_size")
               .Default(2)
               .Min(1)
               .Max(kMaxDimension)
               .Doc("steps in a window"),
           Param::Int("strides")
               .Nullable()
               .Min(1)
               .Max(kMaxDimension)
               .Doc("steps between windows; null: pool_size"),
           Param::String("padding")
               .Default("valid")
               .OneOf({"valid", "same"})
               .Doc("valid: windows inside the sequence; same: ceil(steps "
                    "/ strides) outputs")}};
}

template <bool kMax>
LayerOr CreatePool1D(const LayerSpec& spec, LayerBuilder& b) {
  MT_RETURN_IF_ERROR(b.CheckSequences());
  const int64_t k = spec.params.Int("pool_size");
  const int64_t s = spec.params.OptionalInt("strides").value_or(k);
  const bool same = spec.params.String("padding") == "same";
  MT_RETURN_IF_ERROR(
      b.CheckWindow1D("pool_size", k, spec.params.String("padding")));
  return std::make_unique<Pool1DLayer>(
      b.name(), kMax,
      ops::Pool2DOptions{1, k, 1, s,
                         same ? ops::Padding::kSame : ops::Padding::kValid});
}

template <bool kMax>
LayerOr CreateGlobalPooling1D(const LayerSpec& spec, LayerBuilder& b) {
  MT_RETURN_IF_ERROR(b.CheckSequences());
  return std::make_unique<GlobalPooling1DLayer>(b.name(), kMax,
                                                spec.params.Bool("keepdims"));
}

ParamSchema GlobalPooling1DParams() {
  return {{Param::Bool("keepdims")
               .Default(false)
               .Doc("keep the steps dimension as size 1")}};
}

}  // namespace

MT_REGISTER(LayerType,
            {.name = "max_pooling1d",
             .doc = "maximum over windows of steps, [batch, steps, channels] "
                    "(Keras MaxPooling1D)",
             .params = Pool1DParams(),
             .create = CreatePool1D<true>});
MT_REGISTER(LayerType,
            {.name = "average_pooling1d",
             .doc = "mean over windows of steps; padded steps are not "
                    "counted (Keras AveragePooling1D)",
             .params = Pool1DParams(),
             .create = CreatePool1D<false>});
MT_REGISTER(LayerType,
            {.name = "global_max_pooling1d",
             .doc = "maximum over the steps of [batch, steps, channels] "
                    "(Keras GlobalMaxPooling1D)",
             .params = GlobalPooling1DParams(),
             .create = CreateGlobalPooling1D<true>});
MT_REGISTER(
    LayerType,
    {.name = "global_average_pooling1d",
     .doc = "mean over the steps of [batch, steps, channels] (Keras "
            "GlobalAveragePooling1D; over the unmasked steps of a masked "
            "input)",
     .params = GlobalPooling1DParams(),
     .create = CreateGlobalPooling1D<false>});

}  // namespace mirrortrain::models
