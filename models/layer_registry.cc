#include "models/layer_registry.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "models/containers.h"
#include "models/losses.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// Per-layer initialiser seeds from the model seed (splitmix64 of the
// index), so they depend on neither the device nor the replica.
uint64_t LayerSeed(uint64_t seed, int index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int64_t CountParams(Layer& layer) {
  int64_t n = 0;
  for (Variable* v : layer.variables()) n += NumElements(v->shape());
  return n;
}

}  // namespace

absl::StatusOr<LayerSpec> MakeLayerSpec(
    const std::string& type,
    std::vector<std::pair<std::string, ParamValue>> values) {
  const LayerType* t = LayerRegistry::Global().Find(type);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown layer type '", type, "'"));
  }
  LayerSpec spec;
  spec.type = type;
  spec.params = Params::Defaults(t->params);
  for (auto& [key, value] : values) {
    if (t->params.Find(key) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer type '", type, "' has no key '", key, "'"));
    }
    spec.params.Set(key, std::move(value));
  }
  return spec;
}

const LayerSpec* TokenIdLayer(absl::Span<const LayerSpec> layers,
                              bool past_pass_through) {
  const std::vector<const LayerSpec*> all =
      TokenIdLayers(layers, past_pass_through);
  return all.empty() ? nullptr : all.front();
}

std::vector<const LayerSpec*> TokenIdLayers(absl::Span<const LayerSpec> layers,
                                            bool past_pass_through) {
  for (const LayerSpec& spec : layers) {
    const LayerType* type = LayerRegistry::Global().Find(spec.type);
    if (type == nullptr) return {};
    if (type->reads_token_ids) return {&spec};
    if (type->parallel) {
      // Every branch reads its input.
      std::vector<const LayerSpec*> out;
      for (const LayerSpec& branch : spec.layers) {
        // The entry itself, not a copy: the pointers outlive this call.
        for (const LayerSpec* s : TokenIdLayers(absl::MakeConstSpan(&branch, 1),
                                                past_pass_through)) {
          out.push_back(s);
        }
      }
      return out;
    }
    if (type->container) {
      // Both branches of a two-branch container read its input.
      std::vector<const LayerSpec*> out =
          TokenIdLayers(spec.layers, past_pass_through);
      if (spec.shortcut.has_value()) {
        for (const LayerSpec* s :
             TokenIdLayers(*spec.shortcut, past_pass_through)) {
          out.push_back(s);
        }
      }
      return out;
    }
    if (!past_pass_through || !type->passes_values_on) return {};
  }
  return {};
}

const LayerSpec* OutputLayer(absl::Span<const LayerSpec> layers) {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    const LayerType* type = LayerRegistry::Global().Find(it->type);
    if (type == nullptr) return &*it;
    if (type->passes_values_on) continue;
    if (type->container && !type->shortcut && !type->parallel) {
      if (const LayerSpec* inner = OutputLayer(it->layers)) return inner;
      continue;  // Only layers that pass values on inside.
    }
    return &*it;
  }
  return nullptr;
}

namespace {

// The last of the layers OutputLayer looks past (behind the output layer);
// nullptr if none.
const LayerSpec* BehindOutput(absl::Span<const LayerSpec> layers) {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    const LayerType* type = LayerRegistry::Global().Find(it->type);
    if (type == nullptr) return nullptr;
    if (type->returns_input) continue;
    if (type->passes_values_on) return &*it;
    if (type->container && !type->shortcut && !type->parallel) {
      if (const LayerSpec* inner = BehindOutput(it->layers)) return inner;
      if (OutputLayer(it->layers) == nullptr) continue;
    }
    return nullptr;
  }
  return nullptr;
}

}  // namespace

std::string OutputActivation(absl::Span<const LayerSpec> layers) {
  const LayerSpec* last = OutputLayer(layers);
  if (last == nullptr || !last->params.Has("activation")) return "";
  if (const LayerType* type = LayerRegistry::Global().Find(last->type);
      type != nullptr && type->inner_activation) {
    return "";
  }
  return last->params.String("activation");
}

absl::Status CheckMergedOutput(absl::Span<const LayerSpec> layers,
                               const LossType& loss) {
  const LayerSpec* out = OutputLayer(layers);
  const LayerType* type =
      out == nullptr ? nullptr : LayerRegistry::Global().Find(out->type);
  if (type == nullptr || loss.output_activation.empty() ||
      !(type->shortcut || type->parallel)) {
    return absl::OkStatus();
  }
  std::vector<absl::Span<const LayerSpec>> branches;
  if (type->parallel) {
    for (const LayerSpec& entry : out->layers) {
      branches.push_back(absl::MakeConstSpan(&entry, 1));
    }
  } else {
    branches.push_back(out->layers);
    if (out->shortcut.has_value()) branches.push_back(*out->shortcut);
  }
  for (const absl::Span<const LayerSpec> branch : branches) {
    MT_RETURN_IF_ERROR(CheckMergedOutput(branch, loss));
    if (OutputActivation(branch) != loss.output_activation) continue;
    const LayerSpec* last = OutputLayer(branch);
    return absl::InvalidArgumentError(absl::StrCat(
        "the model's output merges a branch whose last layer (", last->path,
        ") applies ", loss.output_activation, ": Keras would merge ",
        loss.output_activation,
        " probabilities, but the loss reads the merge's output as logits "
        "and would apply its ",
        loss.output_activation,
        " again; merge the logits and end with {type: activation, "
        "activation: ",
        loss.output_activation, "}"));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputActivation(const std::vector<LayerSpec>& layers,
                                   const LossType& loss) {
  const std::string activation = OutputActivation(layers);
  // A loss without one (regression) reads whatever the output layer makes.
  if (activation.empty() || loss.output_activation.empty()) {
    return absl::OkStatus();
  }
  if (activation == loss.output_activation) {
    const LayerSpec* behind = BehindOutput(layers);
    if (behind == nullptr) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        activation, " on the output layer, then a ", behind->type, " (",
        behind->path, "): the loss takes the logits before the ", activation,
        ", which must make the model's output; put it last"));
  }
  // Another loss's probabilities: Keras would read them as probabilities,
  // which this loss, reading logits, cannot.
  for (const LossType* other : LossRegistry::Global().Entries()) {
    if (other->output_activation != activation) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", activation, " on the output layer gives ", other->name,
        "'s probabilities, but the loss is ", loss.name,
        ", which reads "
        "logits (no activation) or a ",
        loss.output_activation, " there; set loss.name: ", other->name,
        " or change the activation"));
  }
  return absl::OkStatus();
}

std::string LayerBuilder::TakeAutoName(const std::string& type) {
  // Keras's prefix where the type names its own (PReLU's p_re_lu).
  const LayerType* t = LayerRegistry::Global().Find(type);
  const std::string prefix =
      t != nullptr && !t->auto_name.empty() ? t->auto_name : type;
  const int n = auto_name_counts_[prefix]++;
  return n == 0 ? prefix : absl::StrCat(prefix, "_", n);
}

absl::Status LayerBuilder::CheckSequences() const {
  const Shape& in = input_shape_;
  if (in.size() == 3) return absl::OkStatus();
  // An npz of sequences [n, steps, channels] read as grayscale images gains
  // a channel unless the model takes two axes.
  const bool one_channel = in.size() == 4 && in[3] == 1;
  return absl::InvalidArgumentError(absl::StrCat(
      "expects [batch, steps, channels] input, got ", ShapeToString(in),
      one_channel ? " (npz sequences [n, steps, channels]: set "
                    "model.input_shape: [steps, channels])"
                  : ""));
}

namespace {

// "a", or "axb" where they differ.
std::string Sides(int64_t a, int64_t b) {
  return a == b ? absl::StrCat(a) : absl::StrCat(a, "x", b);
}

// "<key> <k>", and " dilated by <d> (<span> cells)" for a dilated window.
std::string WindowName(const std::string& key, std::array<int64_t, 2> k,
                       std::array<int64_t, 2> d) {
  std::string out = absl::StrCat(key, " ", Sides(k[0], k[1]));
  if (d[0] != 1 || d[1] != 1) {
    absl::StrAppend(
        &out, " dilated by ", Sides(d[0], d[1]), " (",
        Sides(ops::DilatedSize(k[0], d[0]), ops::DilatedSize(k[1], d[1])),
        " cells)");
  }
  return out;
}

}  // namespace

absl::Status LayerBuilder::CheckWindow1D(const std::string& key, int64_t k,
                                         const std::string& padding,
                                         int64_t dilation) const {
  const int64_t steps = input_shape_[1];
  const int64_t limit = padding == "valid"  ? steps
                        : padding == "same" ? 2 * steps - 1
                                            : kMaxDimension;
  if (ops::DilatedSize(k, dilation) <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      WindowName(key, {k, k}, {dilation, dilation}), " does not fit the ",
      steps, " steps",
      padding == "valid"  ? " with padding valid"
      : padding == "same" ? " (padding same: at most 2 * steps - 1)"
                          : absl::StrCat(" (padding causal: at most ",
                                         kMaxDimension, " cells)")));
}

absl::Status LayerBuilder::CheckWindow(const std::string& key,
                                       std::array<int64_t, 2> k, bool same,
                                       std::array<int64_t, 2> dilation) const {
  const int64_t h = input_shape_[1], w = input_shape_[2];
  const int64_t limit_h = same ? 2 * h - 1 : h, limit_w = same ? 2 * w - 1 : w;
  if (ops::DilatedSize(k[0], dilation[0]) <= limit_h &&
      ops::DilatedSize(k[1], dilation[1]) <= limit_w) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      WindowName(key, k, dilation), " does not fit the ", h, "x", w, " input",
      same ? " (padding same: at most 2 * side - 1, beyond that taps only "
             "ever see padding)"
           : " with padding valid"));
}

int64_t ExpandedLayerCount(const std::vector<LayerSpec>& specs) {
  constexpr int64_t kCap = kMaxLayers + 1;
  int64_t total = 0;
  for (const LayerSpec& spec : specs) {
    int64_t one = 1 + ExpandedLayerCount(spec.layers);
    if (spec.shortcut.has_value()) one += ExpandedLayerCount(*spec.shortcut);
    // Both factors are at most kCap here, so the product fits.
    total += std::min(kCap, one) * std::min(kCap, spec.repeat);
    if (total >= kCap) return kCap;
  }
  return total;
}

uint64_t LayerBuilder::NextSeed() { return LayerSeed(seed_, seeds_drawn_++); }

absl::StatusOr<std::unique_ptr<Layer>> LayerBuilder::BuildOne(
    const LayerSpec& spec, const Shape& input) {
  const LayerType* type = LayerRegistry::Global().Find(spec.type);
  if (type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.Where(), ".type: unknown layer type '", spec.type,
        "' (expected one of ", LayerRegistry::Global().NameList(), ")"));
  }
  // The enclosing factory's view comes back when this layer is built.
  const absl::Cleanup restore = [this, name = name_, shape = input_shape_,
                                 index = type_index_,
                                 masked = input_masked_]() mutable {
    name_ = std::move(name);
    input_shape_ = std::move(shape);
    type_index_ = index;
    input_masked_ = masked;
  };
  type_index_ = type_counts_[type->name]++;
  // Keras names the n-th unnamed layer of a kind "kind", "kind_1",
  // "kind_2", ...; a layer given a name takes no number.
  if (spec.name.empty()) {
    name_ = TakeAutoName(type->name);
  } else {
    name_ = spec.name;
  }
  // Variables are saved under their layer's name (Keras refuses the same
  // name twice in a model too).
  if (const auto [taken, fresh] = names_.try_emplace(name_, spec.path);
      !fresh) {
    error_named_ = true;  // Containers pass it on as it is.
    return absl::InvalidArgumentError(absl::StrCat(
        spec.Where(), spec.name.empty() ? "" : ".name", ": the layer name '",
        name_, "' is taken by ", taken->second,
        !spec.name.empty() ? ""
        : repeated_        ? absl::StrCat(" (rename ", taken->second, ")")
                           : " (give this one a name)"));
  }
  input_shape_ = input;
  if (type->reads_token_ids && trainable_upstream_) {
    error_named_ = true;
    return absl::InvalidArgumentError(absl::StrCat(
        spec.Where(), " (", type->name,
        "): reads its input as token ids, which carry no gradient, so the "
        "trainable layers before it would never train (make it the first "
        "layer)"));
  }
  const size_t row = summary_.size();
  summary_.push_back({absl::StrCat(std::string(2 * depth_, ' '), name_),
                      type->name,
                      {},
                      0,
                      ""});
  ++depth_;
  // A frozen container's layers are frozen as they are built, so each
  // later one sees whether trainable variables lie before it.
  const bool enclosing_frozen = frozen_;
  frozen_ = frozen_ || !spec.trainable;
  absl::StatusOr<std::unique_ptr<Layer>> layer = type->create(spec, *this);
  const bool frozen = frozen_;
  frozen_ = enclosing_frozen;
  --depth_;
  if (!layer.ok()) {
    // The innermost failing layer names its path; the containers around it
    // pass its error on as it is.
    if (error_named_) return layer.status();
    error_named_ = true;
    // The factory's code stays: a device out of memory is not a config error.
    return absl::Status(layer.status().code(),
                        absl::StrCat(spec.Where(), " (", type->name,
                                     "): ", layer.status().message()));
  }
  if (frozen) {
    (*layer)->Freeze();
    for (const Variable* v : (*layer)->variables()) frozen_variables_.insert(v);
  }
  absl::StatusOr<Shape> out = (*layer)->OutputShape(input);
  if (!out.ok()) {
    error_named_ = true;
    return absl::InvalidArgumentError(absl::StrCat(
        spec.Where(), " (", type->name, "): ", out.status().message()));
  }
  // Checkpoints save variables by name. A container lists its children's
  // variables again (the same objects, recorded when they were built).
  for (const Variable* v : (*layer)->variables()) {
    const auto [owner, fresh] =
        variable_owners_.try_emplace(v->name(), v, spec.path);
    if (!fresh && owner->second.first != v) {
      error_named_ = true;
      return absl::InvalidArgumentError(absl::StrCat(
          spec.Where(), spec.name.empty() ? "" : ".name", ": its variable '",
          v->name(), "' has the name of a variable of ", owner->second.second,
          " (layer names that extend one another collide: rename one)"));
    }
  }
  summary_[row].output_shape = *out;
  summary_[row].params = CountParams(**layer);
  return layer;
}

absl::StatusOr<std::unique_ptr<Layer>> LayerBuilder::BuildSequence(
    const std::vector<LayerSpec>& specs, const Shape& input, std::string name) {
  auto sequence = std::make_unique<SequentialLayer>(std::move(name));
  Shape shape = input;
  // Each layer sees whether trainable variables lie before its input; the
  // caller's view (a container's input) comes back at the end.
  const bool entry_upstream = trainable_upstream_;
  const bool entry_repeated = repeated_;
  const bool entry_masked = input_masked_;
  const absl::Cleanup restore = [this, entry_upstream, entry_repeated,
                                 entry_masked] {
    trainable_upstream_ = entry_upstream;
    repeated_ = entry_repeated;
    input_masked_ = entry_masked;
  };
  bool upstream = entry_upstream;
  bool masked = entry_masked;
  for (const LayerSpec& spec : specs) {
    for (int64_t r = 0; r < spec.repeat; ++r) {
      const size_t row = summary_.size();
      trainable_upstream_ = upstream;
      repeated_ = entry_repeated || spec.repeat > 1;
      input_masked_ = masked;
      MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer, BuildOne(spec, shape));
      for (const Variable* v : layer->variables()) {
        upstream = upstream || v->trainable();
      }
      if (masked && !layer->SupportsMasking()) {
        mask_warnings_.push_back(absl::StrCat(
            spec.Where(), " (", spec.type,
            ") drops the mask of its input (Keras's supports_masking is "
            "false there): the layers after it see every step"));
      }
      masked = layer->OutputMasked(masked);
      MT_ASSIGN_OR_RETURN(shape, layer->OutputShape(shape));
      if (sequence->Append(std::move(layer))) {
        summary_[row].note = "computed inside the previous layer";
      }
    }
  }
  return sequence;
}

}  // namespace mirrortrain::models
