// Layers as data: the layer types a config's `model.layers` may name, each
// registered next to its code with its Keras name, its keys (ParamSchema)
// and a factory (DESIGN.md, "Models as data").
//
//   MT_REGISTER(LayerType, {.name = "flatten", .doc = "...", .params = {},
//                           .create = [](const LayerSpec&, LayerBuilder& b)
//                               -> absl::StatusOr<std::unique_ptr<Layer>> {
//                             return std::make_unique<FlattenLayer>(b.name());
//                           }});
//
// Thread contract: the registry is filled during static initialisation and
// read-only afterwards; a LayerBuilder belongs to one Model::Build call.
#ifndef MIRRORTRAIN_MODELS_LAYER_REGISTRY_H_
#define MIRRORTRAIN_MODELS_LAYER_REGISTRY_H_

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/layer.h"
#include "models/losses.h"
#include "tensor/device.h"
#include "tensor/params.h"
#include "tensor/registry.h"

namespace mirrortrain::models {

// One entry of a layer list, as parsed from a config.
struct LayerSpec {
  std::string type;
  std::string name;  // Explicit name; "" gives the Keras auto-name.
  Params params;     // Checked against the type's schema.
  int64_t repeat = 1;
  std::vector<LayerSpec> layers;  // Containers: the (main) branch.
  // residual: the shortcut branch (absent: identity).
  std::optional<std::vector<LayerSpec>> shortcut;
  // false: the layer is frozen (Layer::Freeze), with every layer inside.
  bool trainable = true;
  std::string path;  // "model.layers[3]", for errors.
  // Where the entry was written ("file.yaml:4", "--set ..."), for errors;
  // "" for specs made in code (presets, tests).
  std::string location;

  // "file.yaml:4: model.layers[3]", or the path alone without a location:
  // how errors about this entry start.
  std::string Where() const {
    return location.empty() ? path : location + ": " + path;
  }
};

// The most layers a model may have, containers and repeats expanded: far
// beyond any real model, and refused before anything is built (nested
// repeats multiply).
inline constexpr int64_t kMaxLayers = 100000;
// The layers `specs` build, containers and repeats expanded, saturating
// just above kMaxLayers.
int64_t ExpandedLayerCount(const std::vector<LayerSpec>& specs);

class LayerBuilder;

// The `use_bias` key of layers with a bias vector.
inline Param UseBiasParam() {
  return Param::Bool("use_bias").Default(true).Doc("add a bias vector");
}

struct LayerType {
  std::string name;  // The config `type`, and the Keras auto-name prefix
  // unless `auto_name` gives Keras's own (PReLU's "p_re_lu").
  std::string auto_name;
  std::string doc;
  ParamSchema params;
  // Takes a `layers` list (and, when `shortcut` is set, a shortcut list).
  bool container = false;
  bool shortcut = false;
  // Its `layers` are branches over its input, one per entry (`parallel`),
  // not a sequence.
  bool parallel = false;
  // Reads its input as token ids below its `input_dim` (embedding): the
  // data is checked against it when it loads, and mixed bfloat16 leaves
  // the ids unrounded (bf16 holds integers exactly only up to 256).
  bool reads_token_ids = false;
  // At evaluation its output holds its input's values, moved or not
  // (dropout, reshape, flatten): looked past to find the output layer.
  bool passes_values_on = false;
  // Its `activation` key works inside it (a recurrent cell's), not on its
  // output: never the model's output activation (Keras's from_logits).
  bool inner_activation = false;
  // Its output is its input tensor itself (identity): Keras's logits of an
  // output activation before it survive it.
  bool returns_input = false;
  // Builds the layer for input shape b.input_shape(); errors are
  // InvalidArgument without the path (the builder prefixes it).
  std::function<absl::StatusOr<std::unique_ptr<Layer>>(const LayerSpec& spec,
                                                       LayerBuilder& b)>
      create;
};

using LayerRegistry = Registry<LayerType>;

// A spec of registered type `type` with its defaults, then `values` set
// (presets and tests build specs in code this way). An unknown type or key
// is InvalidArgument.
absl::StatusOr<LayerSpec> MakeLayerSpec(
    const std::string& type,
    std::vector<std::pair<std::string, ParamValue>> values = {});

// The entry that first reads the model's input when it reads token ids: a
// `reads_token_ids` type, first in `layers` or first inside a container
// that is first (either branch of a two-branch one, the main branch's
// first; any entry of a parallel one), and with `past_pass_through` also
// behind `passes_values_on` types (a reshape before it); nullptr otherwise.
const LayerSpec* TokenIdLayer(absl::Span<const LayerSpec> layers,
                              bool past_pass_through = true);
// Every such entry: one per branch of a two-branch or parallel container
// whose branches read ids first (the data must suit each).
std::vector<const LayerSpec*> TokenIdLayers(absl::Span<const LayerSpec> layers,
                                            bool past_pass_through = true);

// The entry that makes the model's output: the last one, looked into
// (containers without a shortcut) and past `passes_values_on` types;
// nullptr if there is none.
const LayerSpec* OutputLayer(absl::Span<const LayerSpec> layers);
// The output layer's `activation` key ("" where it has none).
std::string OutputActivation(absl::Span<const LayerSpec> layers);
// InvalidArgument (without the key's path) when the output layer's
// activation is `loss`'s output_activation (Keras's from_logits=False) with
// layers behind it (a dropout, a flatten regrouping the softmax's axis),
// whose probabilities the logits the loss takes cannot stand for; or when
// it is another loss's (a sigmoid output under the categorical loss). A
// loss without an output activation (regression) takes any.
absl::Status CheckOutputActivation(const std::vector<LayerSpec>& layers,
                                   const LossType& loss);

// InvalidArgument (without a path) when the model's output is a merge (a
// two-branch or parallel container last) one of whose branches ends in
// `loss`'s output activation: Keras would merge probabilities there, but
// the loss takes the merge's output as logits and would apply its
// activation again. The message names the branch's layer.
absl::Status CheckMergedOutput(absl::Span<const LayerSpec> layers,
                               const LossType& loss);

// One row of a model summary (Keras model.summary()).
struct LayerSummary {
  std::string name;  // Indented by nesting depth.
  std::string type;
  Shape output_shape;  // Batch dimension first (printed as None).
  int64_t params = 0;
  std::string note;  // E.g. "computed inside the previous layer".
};

// Builds layers from specs: assigns Keras names (counted per type over the
// whole model), per-layer initialiser seeds, and the input shape of each.
class LayerBuilder {
 public:
  // `input_vocabulary` > 0: the model's inputs are token ids below it.
  LayerBuilder(uint64_t seed, Device device, int64_t input_vocabulary = 0,
               bool continuous_inputs = false)
      : seed_(seed),
        device_(device),
        input_vocabulary_(input_vocabulary),
        continuous_inputs_(continuous_inputs) {}

  // The current layer's input shape (batch dimension first), name and
  // device, valid inside its factory, also after it built children (a
  // container's factory): building one restores them afterwards.
  const Shape& input_shape() const { return input_shape_; }
  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  // The number of token ids the data can hold (0: inputs are not tokens).
  int64_t input_vocabulary() const { return input_vocabulary_; }
  // The model's inputs are real values, never token ids (ModelDef).
  bool continuous_inputs() const { return continuous_inputs_; }
  // Whether the current layer's input carries a mask (Layer::OutputMasked
  // of the layers before it), for the drop warnings. A wrapper whose layer
  // Keras calls directly (time_distributed: no warnings) clears it before
  // building that layer; building one restores it.
  void set_input_masked(bool masked) { input_masked_ = masked; }
  // One line per layer that drops its input's mask (not SupportsMasking):
  // "<where> (<type>) drops the mask ...", as Keras warns.
  const std::vector<std::string>& mask_warnings() const {
    return mask_warnings_;
  }
  // How many layers of this type were built before this one (0 for the
  // first); dropout layers and the recurrent layers' dropout use it to draw
  // different masks.
  int type_index() const { return type_index_; }
  // A window of k[0] x k[1] taps (the layer's key `key`), `dilation` cells
  // apart, over the spatial dimensions of an NHWC input_shape(): padding
  // valid needs its span ((k - 1) * dilation + 1) inside the input; padding
  // same allows at most 2 * side - 1, beyond which taps would only ever see
  // padding.
  absl::Status CheckWindow(const std::string& key, std::array<int64_t, 2> k,
                           bool same,
                           std::array<int64_t, 2> dilation = {1, 1}) const;
  // The 1-D layers' input: sequences [batch, steps, channels] (an npz of
  // sequences read as grayscale images is named, with the key that fixes
  // it); then a window of `k` steps `dilation` apart (key `key`) fitting
  // them as CheckWindow's do (`causal` pads the span less one in front: any
  // k).
  absl::Status CheckSequences() const;
  absl::Status CheckWindow1D(const std::string& key, int64_t k,
                             const std::string& padding,
                             int64_t dilation = 1) const;
  // A fresh initialiser seed: the n-th call over the model gets the n-th
  // seed derived from the model seed, the same on every device and replica.
  uint64_t NextSeed();
  // Keras's next auto-name for a layer of `type` ("lstm", "lstm_1", ...;
  // its LayerType::auto_name where it has one),
  // taken as if such a layer were built unnamed: a wrapper names its
  // copies after the layer it wraps (Bidirectional's forward_lstm).
  std::string TakeAutoName(const std::string& type);

  // Builds a list of specs into one sequential layer named `name`
  // (containers call it for their branches), starting at `input`.
  absl::StatusOr<std::unique_ptr<Layer>> BuildSequence(
      const std::vector<LayerSpec>& specs, const Shape& input,
      std::string name = "sequence");

  std::vector<LayerSummary>& summary() { return summary_; }
  // The variables of the layers built frozen (LayerSpec::trainable).
  const absl::flat_hash_set<const Variable*>& frozen_variables() const {
    return frozen_variables_;
  }

 private:
  absl::StatusOr<std::unique_ptr<Layer>> BuildOne(const LayerSpec& spec,
                                                  const Shape& input);

  uint64_t seed_;
  Device device_;
  int64_t input_vocabulary_ = 0;
  bool continuous_inputs_ = false;
  bool input_masked_ = false;
  std::vector<std::string> mask_warnings_;
  int seeds_drawn_ = 0;
  int depth_ = 0;
  // Whether trainable variables lie between the model's input and the
  // current layer's input (a layer reading token ids would cut their
  // gradient: ids carry none).
  bool trainable_upstream_ = false;
  // Whether the current layer is built more than once (its entry, or a
  // container around it, has repeat > 1): it cannot be given a name.
  bool repeated_ = false;
  // Whether the current layer is frozen (its entry, or a container around
  // it, has trainable: false).
  bool frozen_ = false;
  absl::flat_hash_set<const Variable*> frozen_variables_;
  bool error_named_ = false;  // A failing layer has prefixed its path.
  // Per type: the layers built (type_index), and the unnamed ones (the
  // next auto-name's number).
  absl::flat_hash_map<std::string, int> type_counts_;
  absl::flat_hash_map<std::string, int> auto_name_counts_;
  // Every layer name given so far, and the path of the spec that has it.
  absl::flat_hash_map<std::string, std::string> names_;
  // Variable name -> the variable and the path of the layer that made it:
  // layer names that extend one another ('m' and 'm/query') could give
  // two variables one name.
  absl::flat_hash_map<std::string, std::pair<const Variable*, std::string>>
      variable_owners_;
  Shape input_shape_;
  std::string name_;
  int type_index_ = 0;
  std::vector<LayerSummary> summary_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_LAYER_REGISTRY_H_
