// A model built from a list of layer specs (the `model` section of a
// config: `model.layers`, or a preset that expands to layers), with Keras
// layer names (dense, dense_1, conv2d, ...) and initialisers.
//
// Ownership: the model owns its layers and their variables. Every replica
// builds its own Model from the same definition and seed, so the replicas'
// initial variables are identical (mirrored). Thread contract: one thread
// at a time.
#ifndef MIRRORTRAIN_MODELS_MODEL_H_
#define MIRRORTRAIN_MODELS_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/losses.h"

namespace mirrortrain::models {

struct ModelDef {
  Shape input_shape;  // One example (no batch dimension), e.g. NHWC.
  std::vector<LayerSpec> layers;
  // > 0 when the inputs are token ids in [0, input_vocabulary) (text):
  // embedding layers must cover them.
  int64_t input_vocabulary = 0;
  // The inputs are real values, never token ids (synthetic data, or pixels
  // scaled to [0, 1]: fashion_mnist, cifar10, uint8 npz): an embedding
  // would read every one as id 0 (a cast truncates), so it is refused.
  bool continuous_inputs = false;
  // The loss the model trains with (a LossType): its output_activation on
  // the output layer is Keras's from_logits=False (Model::Build).
  std::string loss = kDefaultLoss;
};

class Model {
 public:
  // Errors are InvalidArgument naming the layer's config path.
  static absl::StatusOr<std::unique_ptr<Model>> Build(const ModelDef& def,
                                                      uint64_t seed,
                                                      Device device);

  // The model's output for inputs [batch, ...input_shape]; with
  // `output_mask`, the output's mask there (undefined unless
  // output_masked()).
  absl::StatusOr<Tensor> Call(const Tensor& inputs, const ForwardContext& ctx,
                              Tensor* output_mask = nullptr);
  // Keras masking: whether the output carries a mask (an embedding's
  // mask_zero or a masking layer, passed on to the output), which then
  // weighs each label of the loss and the metric (Keras's loss masking).
  bool output_masked() const { return output_masked_; }
  // Where the model drops a mask (LayerBuilder::mask_warnings): Keras
  // warns so too.
  const std::vector<std::string>& mask_warnings() const {
    return mask_warnings_;
  }

  // TensorFlow's mixed_bfloat16 policy (`precision: bf16`): the inputs and
  // every layer's output are rounded to bfloat16 (ForwardContext::
  // bf16_activations); variables stay f32. Token ids are not rounded when
  // the input reaches an embedding first (TokenIdLayer without pass-through
  // layers): bf16 holds integers exactly only up to 256, and Keras's
  // Embedding does not cast its input. A layer in front (a reshape) rounds
  // its output, ids included, as Keras's autocast does.
  // Matrix products take bf16 operands through the process-wide
  // MatMulPrecision, set separately.
  void SetMixedBFloat16(bool on) { mixed_bfloat16_ = on; }

  // Input and output shape of one example (no batch dimension).
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  // Every variable, in layer order (kernel before bias).
  const std::vector<Variable*>& variables() const { return variables_; }
  std::vector<Variable*> trainable_variables() const;
  // The non-trainable variables a training step's forward pass writes (the
  // moving statistics of batch normalizations that are not frozen), in
  // variables() order: what strategies that keep variables apart from the
  // replicas (central storage, parameter servers) take back from them.
  // Frozen layers' variables are in neither list.
  const std::vector<Variable*>& forward_state() const { return forward_state_; }
  // Whether the input reaches an embedding (TokenIdLayer, past layers that
  // only pass values on): the inputs are token ids.
  bool reads_token_ids() const { return reads_token_ids_; }
  // The activation the config's output layer applies that turns the loss's
  // logits into probabilities (Keras's usual activation='softmax', or
  // 'sigmoid' for binary_crossentropy), "" where there is none: Call then
  // returns the logits before it, for the loss, and Probabilities applies
  // it.
  const std::string& output_activation() const { return output_activation_; }
  // What the config's model outputs for Call's `outputs`: the
  // output_activation() of the logits where there is one, else `outputs`
  // themselves (Keras's model.predict).
  absl::StatusOr<Tensor> Probabilities(const Tensor& outputs) const;
  // Whether a layer was built frozen (LayerSpec::trainable).
  bool has_frozen_layers() const { return has_frozen_layers_; }
  // The table Keras's model.summary() prints: layer, output shape, params.
  std::string Summary() const;

 private:
  Model() = default;
  absl::StatusOr<Tensor> CallBody(const Tensor& inputs,
                                  const ForwardContext& ctx, Tensor& mask);

  std::unique_ptr<Layer> body_;
  std::vector<Variable*> variables_;
  std::vector<Variable*> forward_state_;
  bool has_frozen_layers_ = false;
  std::vector<LayerSummary> summary_;
  Shape input_shape_;
  Shape output_shape_;
  bool mixed_bfloat16_ = false;
  bool token_inputs_ = false;  // The input layer reads token ids.
  bool reads_token_ids_ = false;
  std::string output_activation_;
  bool output_masked_ = false;
  std::vector<std::string> mask_warnings_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_MODEL_H_
