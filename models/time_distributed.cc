// `time_distributed` (Keras TimeDistributed): its one layer (the one entry
// of `layers`) applied to every step of [batch, steps, ...], as Keras 3
// computes it: the layer called once per step on that step's [batch, ...]
// (one Split, the outputs concatenated back), so a batch normalization
// inside normalises each step by its own batch statistics and updates its
// moving ones per step, and a conv2d reads frames [batch, steps, h, w, c]
// as images. Each step's call mixes its own salt into the context's
// dropout salt (a chain, for nested wrappers), so a dropout inside draws
// another mask per step, the same for a shard as for the whole batch
// (the rows keep their offsets). The wrapped layer is Keras's
// `<name>/<layer>` (its auto-name or its own):
// `time_distributed/conv2d/kernel`.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/dropout_mask.h"
#include "tensor/ops/array_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// What each step's dropout salt mixes in beside its index ("timedist").
constexpr uint64_t kStepSalt = 0x74696d6564697374ULL;

// One step's shape: [batch, steps, rest...] -> [batch, rest...].
Shape StepShape(const Shape& input) {
  Shape step = input;
  step.erase(step.begin() + 1);
  return step;
}

class TimeDistributedLayer final : public Layer {
 public:
  TimeDistributedLayer(std::string name, std::unique_ptr<Layer> inner)
      : Layer(std::move(name)), inner_(std::move(inner)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    const int64_t steps = x.dim(1);
    MT_ASSIGN_OR_RETURN(std::vector<Tensor> pieces, ops::Split(x, steps, 1));
    const Shape in_step = StepShape(x.shape());
    Shape out_step = out;
    out_step[1] = 1;
    ForwardContext step = ctx.ForWrappedLayer();
    // Keras hands its layer each step's column of the mask (a batch
    // normalization inside weighs its rows by it); the whole mask is the
    // output's.
    std::vector<Tensor> step_masks;
    if (ctx.mask.defined()) {
      const Tensor& mask = ctx.mask;
      if (mask.rank() < 2 || mask.dim(0) != x.dim(0) || mask.dim(1) != steps) {
        return absl::InvalidArgumentError(
            absl::StrCat(name(), ": a mask ", ShapeToString(mask.shape()),
                         " does not fit input ", ShapeToString(x.shape()),
                         " (it starts with the batch and the steps)"));
      }
      MT_ASSIGN_OR_RETURN(step_masks, ops::Split(mask, steps, 1));
    }
    std::vector<Tensor> outputs;
    outputs.reserve(steps);
    for (int64_t t = 0; t < steps; ++t) {
      MT_ASSIGN_OR_RETURN(const Tensor in, ops::Reshape(pieces[t], in_step));
      pieces[t] = Tensor();
      step.dropout_salt =
          DropoutMix(ctx.dropout_salt ^ (kStepSalt + static_cast<uint64_t>(t)));
      if (!step_masks.empty()) {
        MT_ASSIGN_OR_RETURN(
            step.mask,
            ops::Reshape(step_masks[t], StepShape(ctx.mask.shape())));
        step_masks[t] = Tensor();
      }
      MT_ASSIGN_OR_RETURN(const Tensor y, inner_->Call(in, step));
      MT_ASSIGN_OR_RETURN(Tensor y_step, ops::Reshape(y, out_step));
      outputs.push_back(std::move(y_step));
    }
    return ops::Concat(outputs, 1);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects [batch, steps, ...] input, got ",
                       ShapeToString(input)));
    }
    MT_ASSIGN_OR_RETURN(Shape out, inner_->OutputShape(StepShape(input)));
    if (out.empty() || out[0] != input[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": the wrapped layer changes the batch (",
                       ShapeToString(out), ")"));
    }
    out.insert(out.begin() + 1, input[1]);
    return out;
  }

  std::vector<Variable*> variables() override { return inner_->variables(); }
  bool ReadsTokenIds() const override { return inner_->ReadsTokenIds(); }
  // Keras's: the mask passes to the output; its layer gets each step's
  // column (Call).
  bool SupportsMasking() const override { return true; }

 private:
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
  // Keras calls its layer's call() directly: a layer that does not take
  // the steps' mask drops it without a warning.
  b.set_input_masked(false);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                      b.BuildSequence({inner}, StepShape(in)));
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
