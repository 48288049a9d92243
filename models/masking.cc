#include "models/masking.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/bfloat16.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<Tensor> NotEqualMask(const Tensor& x, double value) {
  // The comparison kernel takes floats: integer ids as f64, exact to 2^53.
  Tensor values = x;
  if (!IsFloating(x.dtype())) {
    MT_ASSIGN_OR_RETURN(values, ops::Cast(x, DType::kF64));
  }
  MT_ASSIGN_OR_RETURN(const Tensor v, ops::internal::ScalarLike(values, value));
  MT_ASSIGN_OR_RETURN(Tensor mask,
                      ops::internal::BinaryKernel(
                          "NotEqual", BinaryKind::kNotEqual, values, v));
  // Masks meet f32 states and scores: f64 or integer inputs' too.
  if (mask.dtype() != DType::kF32) {
    MT_ASSIGN_OR_RETURN(mask, ops::Cast(mask, DType::kF32));
  }
  return mask;
}

absl::StatusOr<Tensor> AnyNotEqualMask(const Tensor& x, double value) {
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a mask needs axes before the features, got ", x.DebugString()));
  }
  MT_ASSIGN_OR_RETURN(const Tensor differs, NotEqualMask(x, value));
  MT_ASSIGN_OR_RETURN(const Tensor count,
                      ops::ReduceSum(differs, {x.rank() - 1}));
  MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(count, 1));
  return ops::internal::BinaryKernel("AnyNotEqual", BinaryKind::kMinimum, count,
                                     one);
}

absl::StatusOr<Tensor> MaskOr(const Tensor& a, const Tensor& b) {
  MT_ASSIGN_OR_RETURN(const Tensor b_as_a, MaskAs(b, a.dtype()));
  return ops::internal::BinaryKernel("MaskOr", BinaryKind::kMaximum, a, b_as_a);
}

absl::StatusOr<Tensor> MaskSelect(const Tensor& mask, const Tensor& a,
                                  const Tensor& b) {
  Tensor m = mask;
  if (mask.rank() < a.rank()) {
    MT_ASSIGN_OR_RETURN(m, MaskOverFeatures(mask, a));
  } else {
    MT_ASSIGN_OR_RETURN(m, MaskAs(mask, a.dtype()));
  }
  MT_ASSIGN_OR_RETURN(const Tensor keep, MaskComplement(m));
  MT_ASSIGN_OR_RETURN(const Tensor taken, ops::Mul(a, m));
  MT_ASSIGN_OR_RETURN(const Tensor kept, ops::Mul(b, keep));
  return ops::Add(taken, kept);
}

absl::StatusOr<Tensor> MaskComplement(const Tensor& mask) {
  MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(mask, 1));
  return ops::internal::BinaryKernel("MaskComplement", BinaryKind::kSub, one,
                                     mask);
}

absl::StatusOr<Tensor> MaskAs(const Tensor& mask, DType dtype) {
  if (mask.dtype() == dtype) return mask;
  return ops::Cast(mask, dtype);
}

absl::StatusOr<Tensor> MaskOverFeatures(const Tensor& mask, const Tensor& x) {
  Shape shape = mask.shape();
  shape.push_back(1);
  MT_ASSIGN_OR_RETURN(const Tensor column, ops::Reshape(mask, shape));
  return MaskAs(column, x.dtype());
}

absl::Status CheckMask(const Tensor& x, const Tensor& mask,
                       const std::string& layer) {
  const Shape& s = x.shape();
  if (!s.empty() && mask.shape() == Shape(s.begin(), s.end() - 1)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      layer, ": a mask ", ShapeToString(mask.shape()), " does not fit input ",
      ShapeToString(s), " (a mask has the input's axes but the last)"));
}

namespace {

// Keras Masking: steps whose features all equal mask_value are masked for
// the layers after it, and zeroed.
class MaskingLayer final : public Layer {
 public:
  MaskingLayer(std::string name, double mask_value)
      : Layer(std::move(name)), mask_value_(mask_value) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    Tensor mask;
    return CallMasked(x, ctx, mask);
  }
  absl::StatusOr<Tensor> CallMasked(const Tensor& x, const ForwardContext& ctx,
                                    Tensor& mask) override {
    MT_ASSIGN_OR_RETURN(mask, AnyNotEqualMask(x, Value(ctx)));
    MT_ASSIGN_OR_RETURN(const Tensor scale, MaskOverFeatures(mask, x));
    // x * 1 or x * 0: Keras's where(mask, x, 0), its gradient too.
    return ops::Mul(x, scale);
  }
  absl::StatusOr<Tensor> OutputMask(const Tensor& x,
                                    const ForwardContext& ctx) const override {
    return AnyNotEqualMask(x, Value(ctx));
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects [batch, ..., features], got ",
                       ShapeToString(input)));
    }
    return input;
  }
  bool SupportsMasking() const override { return true; }
  bool OutputMasked(bool) const override { return true; }

 private:
  // The value compared with: under mixed bfloat16 the input is rounded, and
  // Keras's not_equal casts mask_value to the input's bfloat16 too.
  double Value(const ForwardContext& ctx) const {
    if (!ctx.bf16_activations) return mask_value_;
    return RoundToBFloat16(static_cast<float>(mask_value_));
  }

  double mask_value_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "masking",
     .doc = "masks the steps of [batch, steps, features] whose features all "
            "equal mask_value, and zeroes them (Keras Masking): the "
            "recurrent layers, attention, global average pooling, batch "
            "normalization and a masked loss after it skip them",
     .params = {{Param::Float("mask_value")
                     .Default(0.0)
                     .InFloat32()
                     .Doc("the value of every feature of a padded step")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       return std::make_unique<MaskingLayer>(b.name(),
                                             spec.params.Float("mask_value"));
     }});

}  // namespace mirrortrain::models
