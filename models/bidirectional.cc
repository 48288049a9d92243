// `bidirectional` (Keras Bidirectional): a recurrent layer (its one entry
// of `layers`: an lstm, gru or simple_rnn, not go_backwards) run forwards and,
// as a go_backwards copy, backwards over the same sequences, the two outputs
// merged (merge_mode: concat along the features, sum, mul or ave). With
// return_sequences the backward copy's outputs are put back in time order
// first, so step t's features are both directions' at t. The copies are
// Keras's: `<name>/forward_<layer>` and `<name>/backward_<layer>` (the
// wrapped layer's auto-name, or its own), initialised forward first, so a
// Keras model's weights load by name.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class BidirectionalLayer final : public Layer {
 public:
  BidirectionalLayer(std::string name, std::unique_ptr<Layer> forward,
                     std::unique_ptr<Layer> backward, std::string merge,
                     bool sequences)
      : Layer(std::move(name)),
        forward_(std::move(forward)),
        backward_(std::move(backward)),
        merge_(std::move(merge)),
        sequences_(sequences) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    // Each copy's output rounded as Keras casts it (the merge reads them).
    const ForwardContext copies = ctx.ForWrappedLayer();
    MT_ASSIGN_OR_RETURN(const Tensor forward, forward_->Call(x, copies));
    MT_ASSIGN_OR_RETURN(Tensor backward, backward_->Call(x, copies));
    if (sequences_ && backward.dim(1) > 1) {
      // Back in time order: the steps reversed (Keras's flip).
      MT_ASSIGN_OR_RETURN(std::vector<Tensor> steps,
                          ops::Split(backward, backward.dim(1), 1));
      std::reverse(steps.begin(), steps.end());
      MT_ASSIGN_OR_RETURN(backward, ops::Concat(steps, 1));
    }
    MT_ASSIGN_OR_RETURN(Tensor merged, Merge(forward, backward));
    if (!sequences_ || !ctx.mask.defined()) return merged;
    // Keras sets both copies' zero_output_for_mask: a masked step's outputs
    // are 0 (not the step before's), whatever the merge.
    MT_ASSIGN_OR_RETURN(const Tensor keep, MaskOverFeatures(ctx.mask, merged));
    return ops::Mul(merged, keep);
  }

  bool SupportsMasking() const override { return true; }
  bool OutputMasked(bool input_masked) const override {
    return input_masked && sequences_;
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_ASSIGN_OR_RETURN(Shape out, forward_->OutputShape(input));
    if (merge_ == "concat") out.back() *= 2;
    return out;
  }

  std::vector<Variable*> variables() override {
    std::vector<Variable*> out = forward_->variables();
    for (Variable* v : backward_->variables()) out.push_back(v);
    return out;
  }

 private:
  absl::StatusOr<Tensor> Merge(const Tensor& forward,
                               const Tensor& backward) const {
    if (merge_ == "concat") return ops::Concat({forward, backward}, -1);
    if (merge_ == "mul") return ops::Mul(forward, backward);
    MT_ASSIGN_OR_RETURN(const Tensor sum, ops::Add(forward, backward));
    if (merge_ == "sum") return sum;
    return ops::Scale(sum, 0.5);  // ave
  }

  std::unique_ptr<Layer> forward_;
  std::unique_ptr<Layer> backward_;
  std::string merge_;
  bool sequences_;
};

absl::StatusOr<std::unique_ptr<Layer>> CreateBidirectional(
    const LayerSpec& spec, LayerBuilder& b) {
  const std::string_view type =
      spec.layers.size() == 1 ? spec.layers[0].type : "";
  if (type != "lstm" && type != "gru" && type != "simple_rnn") {
    return absl::InvalidArgumentError(
        "layers: takes one lstm, gru or simple_rnn layer (the one run both "
        "ways)");
  }
  const LayerSpec& inner = spec.layers[0];
  if (inner.repeat != 1) {
    return absl::InvalidArgumentError(
        "layers[0].repeat: a bidirectional wraps one layer (repeat the "
        "bidirectional entry instead)");
  }
  if (inner.params.Bool("go_backwards")) {
    return absl::InvalidArgumentError(
        "layers[0].go_backwards: the bidirectional runs the layer both ways "
        "itself (Keras refuses a wrapped go_backwards too)");
  }
  const std::string base =
      inner.name.empty() ? b.TakeAutoName(inner.type) : inner.name;
  LayerSpec forward = inner, backward = inner;
  // Keras keeps a name that starts forward_ (backward_) as it is.
  forward.name =
      absl::StrCat(b.name(), "/",
                   absl::StartsWith(base, "forward_") ? "" : "forward_", base);
  backward.name = absl::StrCat(
      b.name(), "/", absl::StartsWith(base, "backward_") ? "" : "backward_",
      base);
  backward.params.Set("go_backwards", true);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> f,
                      b.BuildSequence({forward}, b.input_shape()));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> r,
                      b.BuildSequence({backward}, b.input_shape()));
  return std::unique_ptr<Layer>(new BidirectionalLayer(
      b.name(), std::move(f), std::move(r), spec.params.String("merge_mode"),
      inner.params.Bool("return_sequences")));
}

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "bidirectional",
     .doc = "its one lstm, gru or simple_rnn layer (`layers`) run forwards and "
            "backwards, the outputs merged (Keras Bidirectional)",
     .params = {{Param::String("merge_mode")
                     .Default("concat")
                     .OneOf({"concat", "sum", "mul", "ave"})
                     .Doc("concat: both outputs along the features; "
                          "sum, mul, ave: elementwise")}},
     .container = true,
     .create = CreateBidirectional});

}  // namespace mirrortrain::models
