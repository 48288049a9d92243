// `prelu` (Keras PReLU, auto-named p_re_lu): relu(x) - alpha relu(-x) with
// a learned `alpha` of the example's shape (each axis in `shared_axes`
// collapsed to 1, shared across it), Keras's variable `<name>/alpha`
// (zeros by default: the layer starts as relu). Built from recorded ops as
// Keras computes it (pos = relu(x), neg = -alpha * relu(-x), pos + neg), so
// its gradients, TensorFlow's at 0 included, and its GPU path are theirs.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class PReluLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  PReluLayer(std::string name, Variable alpha)
      : Layer(std::move(name)), alpha_(std::move(alpha)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    MT_ASSIGN_OR_RETURN(const Tensor pos, ops::Relu(x));
    MT_ASSIGN_OR_RETURN(const Tensor flipped, ops::Neg(x));
    MT_ASSIGN_OR_RETURN(const Tensor below, ops::Relu(flipped));
    MT_ASSIGN_OR_RETURN(const Tensor minus_alpha, ops::Neg(alpha_.value()));
    MT_ASSIGN_OR_RETURN(const Tensor neg, ops::Mul(minus_alpha, below));
    return ops::Add(pos, neg);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const Shape& alpha = alpha_.shape();
    bool fits = input.size() == alpha.size() + 1;
    for (size_t i = 0; fits && i < alpha.size(); ++i) {
      fits = alpha[i] == 1 || alpha[i] == input[i + 1];
    }
    if (!fits) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": alpha ", ShapeToString(alpha),
                       " does not fit input ", ShapeToString(input)));
    }
    return input;
  }

  std::vector<Variable*> variables() override { return {&alpha_}; }

 private:
  Variable alpha_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "prelu",
     .auto_name = "p_re_lu",
     .doc = "relu(x) - alpha relu(-x) with a learned alpha per element of an "
            "example (Keras PReLU; auto-named p_re_lu as Keras names it)",
     .params = {{Param::String("alpha_initializer")
                     .Default("zeros")
                     .OneOf(InitializerNames())
                     .Doc("alpha's initial values (zeros: relu at the start)"),
                 Param::IntList("shared_axes")
                     .OneIntegerIsAList()
                     .Nullable()
                     .Min(1)
                     .Doc("example axes (from 1) alpha is shared across, "
                          "e.g. [1, 2]: one alpha per channel of an image; "
                          "null: none")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const Shape& in = b.input_shape();
       Shape alpha(in.begin() + 1, in.end());
       if (!spec.params.IsNull("shared_axes")) {
         for (const int64_t axis : spec.params.IntList("shared_axes")) {
           if (axis < 1 || axis > static_cast<int64_t>(alpha.size())) {
             return absl::InvalidArgumentError(absl::StrCat(
                 "shared_axes: ", axis, " is not an example axis of input ",
                 ShapeToString(in), " (1..", alpha.size(), ")"));
           }
           alpha[axis - 1] = 1;
         }
       }
       MT_ASSIGN_OR_RETURN(const Tensor initial,
                           Initialize(spec.params.String("alpha_initializer"),
                                      alpha, b.NextSeed()));
       MT_ASSIGN_OR_RETURN(
           Variable v,
           VariableOn(absl::StrCat(b.name(), "/alpha"), initial, b.device()));
       return std::unique_ptr<Layer>(
           std::make_unique<PReluLayer>(b.name(), std::move(v)));
     }});

}  // namespace mirrortrain::models
