#include "models/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "models/activation.h"
#include "models/losses.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<std::unique_ptr<Model>> Model::Build(const ModelDef& def,
                                                    uint64_t seed,
                                                    Device device) {
  std::unique_ptr<Model> m(new Model());
  m->input_shape_ = def.input_shape;
  // Only an embedding the input reaches first: a layer in front rounds its
  // own output under bf16 (as Keras's autocast does), ids included.
  m->token_inputs_ =
      TokenIdLayer(def.layers, /*past_pass_through=*/false) != nullptr;
  m->reads_token_ids_ = TokenIdLayer(def.layers) != nullptr;
  // Shapes carry a batch dimension of 1 while building.
  Shape input = {1};
  input.insert(input.end(), def.input_shape.begin(), def.input_shape.end());
  LayerBuilder builder(seed, device, def.input_vocabulary,
                       def.continuous_inputs);
  // The loss's activation on the output layer (Keras's activation='softmax'
  // or 'sigmoid' with from_logits=False): the body makes the logits, which
  // the loss takes as Keras on TensorFlow takes them (the activation's
  // recorded _keras_logits); Probabilities() applies it. No variable
  // depends on it.
  MT_ASSIGN_OR_RETURN(const LossType* loss, FindLoss(def.loss));
  std::vector<LayerSpec> layers = def.layers;
  if (absl::Status s = CheckOutputActivation(layers, *loss); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OutputLayer(layers)->path, ".activation: ", s.message()));
  }
  if (absl::Status s = CheckMergedOutput(layers, *loss); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OutputLayer(layers)->path, ": ", s.message()));
  }
  if (!loss->output_activation.empty() &&
      OutputActivation(layers) == loss->output_activation) {
    const_cast<LayerSpec*>(OutputLayer(layers))
        ->params.Set("activation", std::string("linear"));
    m->output_activation_ = loss->output_activation;
  }
  MT_ASSIGN_OR_RETURN(m->body_, builder.BuildSequence(layers, input));
  MT_ASSIGN_OR_RETURN(Shape out, m->body_->OutputShape(input));
  m->output_shape_.assign(out.begin() + 1, out.end());
  m->variables_ = m->body_->variables();
  m->has_frozen_layers_ = !builder.frozen_variables().empty();
  for (Variable* v : m->variables_) {
    if (!v->trainable() && !builder.frozen_variables().contains(v)) {
      m->forward_state_.push_back(v);
    }
  }
  m->summary_ = std::move(builder.summary());
  m->output_masked_ = m->body_->OutputMasked(false);
  m->mask_warnings_ = builder.mask_warnings();
  return m;
}

absl::StatusOr<Tensor> Model::Probabilities(const Tensor& outputs) const {
  if (output_activation_.empty()) return outputs;
  MT_ASSIGN_OR_RETURN(const ActivationDef* activation,
                      FindActivation(output_activation_));
  return Activate(*activation, outputs);
}

absl::StatusOr<Tensor> Model::Call(const Tensor& inputs,
                                   const ForwardContext& ctx,
                                   Tensor* output_mask) {
  Tensor mask;
  MT_ASSIGN_OR_RETURN(Tensor y, CallBody(inputs, ctx, mask));
  if (output_mask != nullptr) *output_mask = std::move(mask);
  return y;
}

absl::StatusOr<Tensor> Model::CallBody(const Tensor& inputs,
                                       const ForwardContext& ctx,
                                       Tensor& mask) {
  if (inputs.rank() != static_cast<int>(input_shape_.size()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model input must be [batch, ", ShapeToString(input_shape_), "], got ",
        inputs.DebugString()));
  }
  if (!mixed_bfloat16_) return body_->CallMasked(inputs, ctx, mask);
  Tensor x;
  if (!token_inputs_) {
    // A rounded copy: the caller's batch stays as it was.
    MT_ASSIGN_OR_RETURN(
        x, ops::RoundedToBFloat16(inputs, body_->InputFeedsProduct()));
  } else {
    x = inputs;  // Ids as they are (ForwardContext::raw_token_ids).
  }
  ForwardContext bf16_ctx = ctx;
  bf16_ctx.bf16_activations = true;
  bf16_ctx.raw_token_ids = token_inputs_;
  return body_->CallMasked(x, bf16_ctx, mask);
}

std::vector<Variable*> Model::trainable_variables() const {
  std::vector<Variable*> out;
  for (Variable* v : variables_) {
    if (v->trainable()) out.push_back(v);
  }
  return out;
}

std::string Model::Summary() const {
  auto shape = [](const Shape& s) {
    std::vector<std::string> dims = {"None"};
    for (size_t i = 1; i < s.size(); ++i) dims.push_back(absl::StrCat(s[i]));
    return absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
  };
  struct Row {
    std::string layer, shape, params, note;
  };
  std::vector<Row> rows;
  // Keras's column widths, widened to the longest cell (with a space to
  // spare) so that long layer names and shapes keep the columns aligned.
  size_t layer_width = 36, shape_width = 24, params_width = 12;
  for (const LayerSummary& row : summary_) {
    rows.push_back({absl::StrCat(row.name, " (", row.type, ")"),
                    shape(row.output_shape), absl::StrCat(row.params),
                    row.note.empty() ? "" : "  " + row.note});
    layer_width = std::max(layer_width, rows.back().layer.size() + 1);
    shape_width = std::max(shape_width, rows.back().shape.size() + 1);
    params_width = std::max(params_width, rows.back().params.size());
  }
  const std::string rule(
      78 + (layer_width - 36) + (shape_width - 24) + (params_width - 12), '=');
  auto line = [&](const Row& row) {
    return absl::StrFormat("%-*s %-*s %*s%s\n", static_cast<int>(layer_width),
                           row.layer, static_cast<int>(shape_width), row.shape,
                           static_cast<int>(params_width), row.params,
                           row.note);
  };
  std::string out = absl::StrCat(
      line({"Layer (type)", "Output Shape", "Param #", ""}), rule, "\n");
  for (const Row& row : rows) out += line(row);
  int64_t total = 0, trainable = 0;
  for (Variable* v : variables_) {
    const int64_t n = NumElements(v->shape());
    total += n;
    if (v->trainable()) trainable += n;
  }
  absl::StrAppendFormat(&out,
                        "%s\nTotal params: %d\nTrainable params: %d\n"
                        "Non-trainable params: %d\n",
                        rule, total, trainable, total - trainable);
  for (const std::string& warning : mask_warnings_) {
    absl::StrAppend(&out, "warning: ", warning, "\n");
  }
  return out;
}

}  // namespace mirrortrain::models
