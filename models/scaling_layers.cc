// Layers that rescale values without variables, from recorded elementwise
// ops (their gradients and GPU paths are those ops'):
//  * `rescaling` (Keras Rescaling): x * scale + offset, Keras's order. The
//    data sources scale uint8 pixels to [0, 1] already, so a Keras model's
//    Rescaling(1 / 255) is not wanted on them; Rescaling(2, offset=-1)
//    maps them to [-1, 1] as MobileNet's preprocessing does.
//  * `unit_normalization` (Keras UnitNormalization): x * min(1 /
//    sqrt(sum(x^2 over the last axis)), 1e12), Keras's form (an all-zero
//    vector stays zeros); the sum is floored at the smallest normal float
//    first, which changes no value (the cap binds below it) and keeps the
//    gradient of an all-zero vector finite, as TensorFlow's is.
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class RescalingLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  RescalingLayer(std::string name, double scale, double offset)
      : Layer(std::move(name)), scale_(scale), offset_(offset) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Tensor scaled, ops::Scale(x, scale_));
    if (offset_ == 0) return scaled;
    MT_ASSIGN_OR_RETURN(const Tensor offset,
                        ops::internal::ScalarLike(x, offset_));
    return ops::Add(scaled, offset);
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }

 private:
  double scale_, offset_;
};

// Keras's epsilon of UnitNormalization: the inverse norm's cap is 1 / it.
constexpr double kUnitNormEpsilon = 1e-12;

class UnitNormalizationLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  // `axes`: the example axes (from 1) normalised together.
  UnitNormalizationLayer(std::string name, std::vector<int> axes)
      : Layer(std::move(name)), axes_(std::move(axes)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Tensor squares, ops::Square(x));
    MT_ASSIGN_OR_RETURN(Tensor sum,
                        ops::ReduceSum(squares, axes_, /*keepdims=*/true));
    MT_ASSIGN_OR_RETURN(
        const Tensor floor,
        ops::internal::ScalarLike(x, std::numeric_limits<float>::min()));
    MT_ASSIGN_OR_RETURN(sum, ops::Maximum(sum, floor));
    MT_ASSIGN_OR_RETURN(const Tensor norm, ops::Sqrt(sum));
    MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(x, 1));
    MT_ASSIGN_OR_RETURN(const Tensor inverse, ops::Div(one, norm));
    MT_ASSIGN_OR_RETURN(const Tensor cap,
                        ops::internal::ScalarLike(x, 1 / kUnitNormEpsilon));
    MT_ASSIGN_OR_RETURN(const Tensor capped, ops::Minimum(inverse, cap));
    return ops::Mul(x, capped);
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }

 private:
  std::vector<int> axes_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "rescaling",
     .doc = "x * scale + offset (Keras Rescaling; uint8 data is scaled to "
            "[0, 1] already)",
     .params = {{Param::Float("scale").InFloat32().Doc("the factor"),
                 Param::Float("offset").Default(0.0).InFloat32().Doc(
                     "added after the product")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       return std::unique_ptr<Layer>(new RescalingLayer(
           b.name(), spec.params.Float("scale"), spec.params.Float("offset")));
     }});

MT_REGISTER(
    LayerType,
    {.name = "unit_normalization",
     .doc = "each vector along `axis` scaled to unit L2 norm (Keras "
            "UnitNormalization)",
     .params =
         {{Param::IntList("axis")
               .OneIntegerIsAList()
               .Default(std::vector<int64_t>{-1})
               .Doc("the axes normalised together: example axes, from 1 or "
                    "counted from the end (-1: the last); never the batch's")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const int64_t rank = static_cast<int64_t>(b.input_shape().size());
       std::vector<int> axes;
       for (int64_t axis : spec.params.IntList("axis")) {
         const int64_t a = axis < 0 ? axis + rank : axis;
         // Across the batch, replicas' shards would normalise
         // apart.
         if (a < 1 || a >= rank) {
           return absl::InvalidArgumentError(
               absl::StrCat("axis: ", axis, " is not an example axis of input ",
                            ShapeToString(b.input_shape()), " (1..", rank - 1,
                            ", or -1..-", rank - 1, ")"));
         }
         if (absl::c_linear_search(axes, static_cast<int>(a))) {
           return absl::InvalidArgumentError(
               absl::StrCat("axis: ", axis, " is given twice"));
         }
         axes.push_back(static_cast<int>(a));
       }
       if (axes.empty()) {
         return absl::InvalidArgumentError("axis: names no axis");
       }
       return std::unique_ptr<Layer>(
           new UnitNormalizationLayer(b.name(), std::move(axes)));
     }});

}  // namespace mirrortrain::models
