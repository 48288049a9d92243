// `time_distributed` (Keras TimeDistributed): its one layer (the one entry
// of `layers`) applied to every step of [batch, steps, ...] alike, as
// Keras computes it: the steps folded into the batch ([batch * steps,
// ...]), the layer called once, the output unfolded. So a batch
// normalization inside sees every step's values as one batch (Keras's), and
// a conv2d reads frames [batch, steps, h, w, c] as images. The wrapped
// layer is Keras's `<name>/<layer>` (its auto-name or its own), so its
// variables read `time_distributed/conv2d/kernel`.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class TimeDistributedLayer final : public Layer {
 public:
  TimeDistributedLayer(std::string name, std::unique_ptr<Layer> inner)
      : Layer(std::move(name)), inner_(std::move(inner)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    MT_ASSIGN_OR_RETURN(const Tensor folded,
                        ops::Reshape(x, Folded(x.shape())));
    MT_ASSIGN_OR_RETURN(const Tensor y, inner_->Call(folded, ctx));
    return ops::Reshape(y, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects [batch, steps, ...] input, got ",
                       ShapeToString(input)));
    }
    MT_ASSIGN_OR_RETURN(Shape out, inner_->OutputShape(Folded(input)));
    if (out.empty() || out[0] != input[0] * input[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": the wrapped layer changes the batch (",
                       ShapeToString(out), ")"));
    }
    out[0] = input[1];
    out.insert(out.begin(), input[0]);
    return out;
  }

  std::vector<Variable*> variables() override { return inner_->variables(); }
  bool ReadsTokenIds() const override { return inner_->ReadsTokenIds(); }

 private:
  // [batch, steps, rest...] -> [batch * steps, rest...].
  static Shape Folded(const Shape& input) {
    Shape folded(input.begin() + 1, input.end());
    folded[0] *= input[0];
    return folded;
  }

  std::unique_ptr<Layer> inner_;
};

absl::StatusOr<std::unique_ptr<Layer>> CreateTimeDistributed(
    const LayerSpec& spec, LayerBuilder& b) {
  const Shape& in = b.input_shape();
  if (spec.layers.size() != 1) {
    return absl::InvalidArgumentError(
        "layers: takes one layer (the one applied to every step)");
  }
  if (in.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expects [batch, steps, ...] input, got ", ShapeToString(in)));
  }
  LayerSpec inner = spec.layers[0];
  if (inner.repeat != 1) {
    return absl::InvalidArgumentError(
        "layers[0].repeat: a time_distributed wraps one layer (repeat the "
        "time_distributed entry, or wrap a sequential)");
  }
  inner.name = absl::StrCat(
      b.name(), "/",
      inner.name.empty() ? b.TakeAutoName(inner.type) : inner.name);
  Shape folded(in.begin() + 1, in.end());
  folded[0] *= in[0];
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                      b.BuildSequence({inner}, folded));
  return std::unique_ptr<Layer>(
      new TimeDistributedLayer(b.name(), std::move(layer)));
}

}  // namespace

MT_REGISTER(LayerType,
            {.name = "time_distributed",
             .doc = "its one layer (`layers`) applied to every step of "
                    "[batch, steps, ...] alike (Keras TimeDistributed)",
             .container = true,
             .create = CreateTimeDistributed});

}  // namespace mirrortrain::models
