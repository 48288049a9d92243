#include "models/containers.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

bool SequentialLayer::Append(std::unique_ptr<Layer> layer) {
  if (!layers_.empty() && layers_.back()->AbsorbNext(*layer)) return true;
  layers_.push_back(std::move(layer));
  return false;
}

absl::StatusOr<Tensor> SequentialLayer::Call(const Tensor& x,
                                             const ForwardContext& ctx) {
  Tensor mask;
  return CallMasked(x, ctx, mask);
}

bool SequentialLayer::OutputMasked(bool input_masked) const {
  for (const auto& layer : layers_) {
    input_masked = layer->OutputMasked(input_masked);
  }
  return input_masked;
}

absl::StatusOr<Tensor> SequentialLayer::CallMasked(const Tensor& x,
                                                   const ForwardContext& ctx,
                                                   Tensor& mask) {
  Tensor y = x;
  ForwardContext inner = ctx;
  for (size_t i = 0; i < layers_.size(); ++i) {
    // Under mixed bfloat16 every layer's output is rounded, with halves
    // when a product reads it next, as halves alone when nothing else
    // reads it (the last layer's: as the caller asks).
    const bool last = i + 1 == layers_.size();
    const bool feeds_product =
        last ? ctx.output_rounding == ops::OutputRounding::kBf16WithHalves ||
                   ctx.output_rounding == ops::OutputRounding::kBf16HalvesOnly
             : layers_[i + 1]->InputFeedsProduct();
    const bool only_products =
        last ? ctx.output_rounding == ops::OutputRounding::kBf16HalvesOnly
             : layers_[i]->OutputNeedsOnlyHalves() &&
                   layers_[i + 1]->InputOnlyFeedsProducts();
    inner.output_rounding =
        !ctx.bf16_activations ? ops::OutputRounding::kNone
        : only_products       ? ops::OutputRounding::kBf16HalvesOnly
        : feeds_product       ? ops::OutputRounding::kBf16WithHalves
                              : ops::OutputRounding::kBf16;
    // Raw token ids reach the first layer only (its own output is rounded
    // below).
    inner.raw_token_ids = ctx.raw_token_ids && i == 0;
    Tensor out_mask;
    MT_ASSIGN_OR_RETURN(y, layers_[i]->CallMasked(y, inner, out_mask));
    inner.mask = std::move(out_mask);
    // A layer handing back a rounded tensor (a nested sequence's output, a
    // view of its input): nothing left then.
    MT_RETURN_IF_ERROR(ops::RoundOutput(y, inner.output_rounding));
  }
  mask = inner.mask;
  return y;
}

absl::StatusOr<Shape> SequentialLayer::OutputShape(const Shape& input) const {
  Shape shape = input;
  for (const auto& layer : layers_) {
    MT_ASSIGN_OR_RETURN(shape, layer->OutputShape(shape));
  }
  return shape;
}

std::vector<Variable*> SequentialLayer::variables() {
  std::vector<Variable*> out;
  for (auto& layer : layers_) {
    for (Variable* v : layer->variables()) out.push_back(v);
  }
  return out;
}

namespace {

// `shape` with axes of 1 inserted after the batch up to `rank` (Keras's
// merge layers' expand_dims at axis 1).
Shape WithUnitAxes(Shape shape, size_t rank) {
  if (shape.empty() || shape.size() >= rank) return shape;
  shape.insert(shape.begin() + 1, rank - shape.size(), 1);
  return shape;
}

// a op b for an elementwise merge (Average's sum, divided by the caller).
absl::StatusOr<Tensor> Elementwise(Merge merge, const Tensor& a,
                                   const Tensor& b) {
  switch (merge) {
    case Merge::kAdd:
    case Merge::kAverage:
      return ops::Add(a, b);
    case Merge::kMultiply:
      return ops::Mul(a, b);
    case Merge::kSubtract:
      return ops::Sub(a, b);
    case Merge::kMaximum:
      return ops::Maximum(a, b);
    case Merge::kMinimum:
      return ops::Minimum(a, b);
    case Merge::kConcatenate:
      break;
  }
  return absl::InternalError("concatenation is not elementwise");
}

}  // namespace

std::unique_ptr<BranchesLayer> BranchesLayer::TwoBranches(
    std::string name, std::unique_ptr<Layer> main,
    std::unique_ptr<Layer> shortcut, Merge merge) {
  const bool identity = shortcut == nullptr;
  std::vector<std::unique_ptr<Layer>> branches;
  branches.push_back(std::move(main));
  branches.push_back(std::move(shortcut));
  return std::make_unique<BranchesLayer>(
      std::move(name), std::move(branches),
      std::vector<std::string>{"main branch",
                               identity ? "identity shortcut" : "shortcut"},
      merge, /*main_and_shortcut=*/true);
}

absl::StatusOr<Tensor> BranchesLayer::Call(const Tensor& x,
                                           const ForwardContext& ctx) {
  Tensor mask;
  return CallMasked(x, ctx, mask);
}

bool BranchesLayer::OutputMasked(bool input_masked) const {
  bool any = false, all = true;
  for (const auto& b : branches_) {
    const bool masked =
        b != nullptr ? b->OutputMasked(input_masked) : input_masked;
    any = any || masked;
    all = all && masked;
  }
  return merge_ == Merge::kConcatenate ? any : all;
}

bool BranchesLayer::InputFeedsProduct() const {
  return std::any_of(branches_.begin(), branches_.end(), [](const auto& b) {
    return b != nullptr && b->InputFeedsProduct();
  });
}

bool BranchesLayer::ReadsTokenIds() const {
  return std::any_of(branches_.begin(), branches_.end(), [](const auto& b) {
    return b != nullptr && b->ReadsTokenIds();
  });
}

absl::StatusOr<Tensor> BranchesLayer::CallMasked(const Tensor& x,
                                                 const ForwardContext& ctx,
                                                 Tensor& mask) {
  // The request for the merge's storage is not the branches'.
  ForwardContext branch = ctx;
  branch.output_rounding = ops::OutputRounding::kNone;
  // Unrounded token ids go as they are only to a branch that reads them
  // first; the others get a rounded copy each, so none can round another's
  // input in place (ForwardContext::raw_token_ids).
  std::vector<Tensor> outputs, masks;
  size_t rank = 0;
  for (const auto& b : branches_) {
    Tensor in = x;
    if (ctx.raw_token_ids && (b == nullptr || !b->ReadsTokenIds())) {
      MT_ASSIGN_OR_RETURN(in, ops::RoundedToBFloat16(
                                  x, b != nullptr && b->InputFeedsProduct()));
    }
    Tensor out_mask = ctx.mask;
    if (b != nullptr) {
      ForwardContext inner = branch;
      inner.raw_token_ids = ctx.raw_token_ids && b->ReadsTokenIds();
      MT_ASSIGN_OR_RETURN(in, b->CallMasked(in, inner, out_mask));
    }
    rank = std::max(rank, static_cast<size_t>(in.rank()));
    outputs.push_back(std::move(in));
    masks.push_back(std::move(out_mask));
  }
  MT_ASSIGN_OR_RETURN(mask, MergedMask(masks));
  if (merge_ == Merge::kConcatenate) {
    return ops::Concat(outputs, static_cast<int>(rank) - 1);
  }
  // Keras's merges give a lower-rank output axes of 1 after the batch.
  for (Tensor& y : outputs) {
    if (static_cast<size_t>(y.rank()) < rank) {
      MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, WithUnitAxes(y.shape(), rank)));
    }
  }
  const bool masked = std::any_of(masks.begin(), masks.end(),
                                  [](const Tensor& m) { return m.defined(); });
  if (masked && merge_ == Merge::kMultiply) {
    return MaskedProduct(outputs, masks, mask);
  }
  if (masked && (merge_ == Merge::kMaximum || merge_ == Merge::kMinimum)) {
    return MaskedExtremum(outputs, masks);
  }
  // Keras's order: ((y0 op y1) op y2) ...
  Tensor merged = outputs[0];
  for (size_t k = 1; k < outputs.size(); ++k) {
    MT_ASSIGN_OR_RETURN(merged, Elementwise(merge_, merged, outputs[k]));
  }
  if (merge_ != Merge::kAverage) return merged;
  // Keras's Average: the sum divided by the count.
  MT_ASSIGN_OR_RETURN(
      const Tensor count,
      ops::internal::ScalarLike(merged, static_cast<double>(outputs.size())));
  return ops::Div(merged, count);
}

absl::StatusOr<Tensor> BranchesLayer::MaskedProduct(
    const std::vector<Tensor>& outputs, const std::vector<Tensor>& masks,
    const Tensor& output_mask) {
  // Keras's Multiply: a masked step of a branch counts as 1, and where
  // every branch is masked (the output's mask is then their OR) the
  // product's masked steps are 0.
  Tensor merged;
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor y = outputs[k];
    if (masks[k].defined()) {
      MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(y, 1));
      MT_ASSIGN_OR_RETURN(y, MaskSelect(masks[k], y, one));
    }
    if (merged.defined()) {
      MT_ASSIGN_OR_RETURN(merged, ops::Mul(merged, y));
    } else {
      merged = y;
    }
  }
  if (!output_mask.defined()) return merged;
  MT_ASSIGN_OR_RETURN(const Tensor zero, ops::internal::ScalarLike(merged, 0));
  return MaskSelect(output_mask, merged, zero);
}

absl::StatusOr<Tensor> BranchesLayer::MaskedExtremum(
    const std::vector<Tensor>& outputs,
    const std::vector<Tensor>& masks) const {
  // Keras's Maximum and Minimum (_apply_merge_op_and_or_mask): a masked
  // step takes the other side's value, in order, the running mask the OR
  // while every branch so far has one.
  Tensor merged = outputs[0], mask = masks[0];
  for (size_t k = 1; k < outputs.size(); ++k) {
    Tensor y = outputs[k];
    if (masks[k].defined()) {
      MT_ASSIGN_OR_RETURN(y, MaskSelect(masks[k], y, merged));
    }
    if (mask.defined()) {
      MT_ASSIGN_OR_RETURN(merged, MaskSelect(mask, merged, y));
    }
    if (mask.defined() && masks[k].defined()) {
      MT_ASSIGN_OR_RETURN(mask, MaskOr(mask, masks[k]));
    } else {
      mask = Tensor();
    }
    MT_ASSIGN_OR_RETURN(merged, Elementwise(merge_, merged, y));
  }
  return merged;
}

absl::StatusOr<Shape> BranchesLayer::OutputShape(const Shape& input) const {
  std::vector<Shape> shapes;
  size_t rank = 0;
  for (const auto& b : branches_) {
    Shape out = input;
    if (b != nullptr) {
      MT_ASSIGN_OR_RETURN(out, b->OutputShape(input));
    }
    rank = std::max(rank, out.size());
    shapes.push_back(std::move(out));
  }
  auto gives = [&](size_t j, size_t k) {
    return absl::StrCat("the ", names_[j], " gives ", ShapeToString(shapes[j]),
                        " but the ", names_[k], " gives ",
                        ShapeToString(shapes[k]));
  };
  if (merge_ == Merge::kConcatenate) {
    // Every axis but the last (the channels, the features) must agree.
    Shape out = shapes[0];
    for (size_t k = 1; k < shapes.size(); ++k) {
      const Shape& s = shapes[k];
      if (s.size() != out.size() ||
          !std::equal(out.begin(), out.end() - 1, s.begin())) {
        return absl::InvalidArgumentError(
            absl::StrCat(gives(0, k),
                         ": concatenated along the last axis, the others "
                         "must agree"));
      }
      out.back() += s.back();
    }
    return out;
  }
  // Elementwise: Keras's broadcast of axes of 1 (a gate [1, 1, c] over an
  // image [h, w, c]), the lower rank given axes of 1 after the batch first
  // (a gate [c]).
  auto broadcast = [rank](const Shape& a, const Shape& b, Shape* out) -> bool {
    const Shape x = WithUnitAxes(a, rank), y = WithUnitAxes(b, rank);
    *out = x;
    for (size_t i = 0; i < rank; ++i) {
      if (x[i] != y[i] && x[i] != 1 && y[i] != 1) return false;
      (*out)[i] = x[i] == 1 ? y[i] : x[i];
    }
    return true;
  };
  Shape out = WithUnitAxes(shapes[0], rank);
  for (size_t k = 1; k < shapes.size(); ++k) {
    if (broadcast(out, shapes[k], &out)) continue;
    // Name a branch it disagrees with on its own, if one does.
    size_t j = 0;
    Shape unused;
    while (j + 1 < k && broadcast(shapes[j], shapes[k], &unused)) ++j;
    std::string remedy;
    if (main_and_shortcut_) {
      // The remedy depends on what flows: images take a strided 1x1 conv,
      // vectors and sequences a dense layer of the main branch's width.
      remedy = absl::StrCat(
          "; add a shortcut with ",
          input.size() == 4
              ? "a strided 1x1 conv2d"
              : absl::StrCat("a dense layer of ", shapes[0].back(), " units"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(gives(j, k), " (each axis must agree or be 1 on one side",
                     remedy, ")"));
  }
  return out;
}

absl::StatusOr<Tensor> BranchesLayer::MergedMask(
    const std::vector<Tensor>& masks) const {
  const Tensor* first = nullptr;
  bool all = true;
  for (const Tensor& m : masks) {
    if (m.defined() && first == nullptr) first = &m;
    all = all && m.defined();
  }
  if (first == nullptr) return Tensor();
  if (!all && merge_ != Merge::kConcatenate) return Tensor();
  // A concatenation counts a branch without a mask as all 1 (Keras's): the
  // OR is then all 1.
  if (!all) return ops::OnesLike(*first);
  Tensor merged = masks[0];
  for (size_t k = 1; k < masks.size(); ++k) {
    MT_ASSIGN_OR_RETURN(merged, MaskOr(merged, masks[k]));
  }
  return merged;
}

std::vector<Variable*> BranchesLayer::variables() {
  std::vector<Variable*> out;
  for (auto& b : branches_) {
    if (b == nullptr) continue;
    for (Variable* v : b->variables()) out.push_back(v);
  }
  return out;
}

namespace {

absl::StatusOr<std::unique_ptr<Layer>> CreateSequential(const LayerSpec& spec,
                                                        LayerBuilder& b) {
  return b.BuildSequence(spec.layers, b.input_shape(), b.name());
}

template <Merge kMerge>
absl::StatusOr<std::unique_ptr<Layer>> CreateTwoBranches(const LayerSpec& spec,
                                                         LayerBuilder& b) {
  // The builder's name and input shape are this layer's again after each
  // branch is built (LayerBuilder::BuildOne restores them).
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> main,
                      b.BuildSequence(spec.layers, b.input_shape()));
  std::unique_ptr<Layer> shortcut;
  if (spec.shortcut.has_value()) {
    MT_ASSIGN_OR_RETURN(shortcut,
                        b.BuildSequence(*spec.shortcut, b.input_shape()));
  }
  return BranchesLayer::TwoBranches(b.name(), std::move(main),
                                    std::move(shortcut), kMerge);
}

// An elementwise merge container: `what` it computes, then its branches.
template <Merge kMerge>
LayerType MergeContainer(const char* name, const char* what) {
  return {.name = name,
          .doc = absl::StrCat(what,
                              ": `layers` is the main branch, `shortcut` "
                              "(optional; identity when absent) the other"),
          .container = true,
          .shortcut = true,
          .create = CreateTwoBranches<kMerge>};
}

// The merges a `parallel` takes, by name (its `merge` key's choices).
constexpr std::pair<absl::string_view, Merge> kParallelMerges[] = {
    {"concatenate", Merge::kConcatenate}, {"add", Merge::kAdd},
    {"multiply", Merge::kMultiply},       {"average", Merge::kAverage},
    {"maximum", Merge::kMaximum},         {"minimum", Merge::kMinimum}};

std::vector<std::string> ParallelMergeNames() {
  std::vector<std::string> names;
  for (const auto& [name, merge] : kParallelMerges) names.emplace_back(name);
  return names;
}

// `parallel`: each entry of `layers` a branch over the input.
absl::StatusOr<std::unique_ptr<Layer>> CreateParallel(const LayerSpec& spec,
                                                      LayerBuilder& b) {
  if (spec.layers.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layers: takes two or more branches (one per entry; a sequential "
        "for a branch of several layers), got ",
        spec.layers.size()));
  }
  std::vector<std::unique_ptr<Layer>> branches;
  std::vector<std::string> names;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    if (spec.layers[i].repeat != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layers[", i,
          "].repeat: an entry is one branch (repeat layers inside a "
          "sequential entry)"));
    }
    // The builder's name and input shape are this layer's again after each
    // branch is built (LayerBuilder::BuildOne restores them).
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Layer> branch,
                        b.BuildSequence({spec.layers[i]}, b.input_shape()));
    branches.push_back(std::move(branch));
    names.push_back(absl::StrCat("layers[", i, "]"));
  }
  // A spec built in code has not met the key's choices.
  const std::string name = spec.params.String("merge");
  const auto* merge = absl::c_find_if(
      kParallelMerges, [&](const auto& m) { return m.first == name; });
  if (merge == std::end(kParallelMerges)) {
    return absl::InvalidArgumentError(
        absl::StrCat("merge: unknown merge '", name, "'"));
  }
  return std::make_unique<BranchesLayer>(b.name(), std::move(branches),
                                         std::move(names), merge->second);
}

}  // namespace

MT_REGISTER(LayerType, {.name = "sequential",
                        .doc = "its `layers` in order",
                        .container = true,
                        .create = CreateSequential});
MT_REGISTER(LayerType, (MergeContainer<Merge::kAdd>(
                           "residual", "main(x) + shortcut(x) (Keras's Add)")));
MT_REGISTER(LayerType,
            {.name = "concatenate",
             .doc = "[main(x), shortcut(x)] along the last axis (Keras's "
                    "Concatenate of two branches): `layers` is the main "
                    "branch, `shortcut` (optional; identity when absent, "
                    "DenseNet's block) the other",
             .container = true,
             .shortcut = true,
             .create = CreateTwoBranches<Merge::kConcatenate>});

// Keras's other merges of two branches, elementwise with broadcasting.
MT_REGISTER(LayerType, (MergeContainer<Merge::kMultiply>(
                           "multiply",
                           "main(x) * shortcut(x) (Keras's Multiply; with the "
                           "identity, a squeeze-and-excitation gate)")));
MT_REGISTER(LayerType,
            (MergeContainer<Merge::kSubtract>(
                "subtract", "main(x) - shortcut(x) (Keras's Subtract)")));
MT_REGISTER(LayerType,
            (MergeContainer<Merge::kAverage>(
                "average", "(main(x) + shortcut(x)) / 2 (Keras's Average)")));
MT_REGISTER(LayerType,
            (MergeContainer<Merge::kMaximum>(
                "maximum", "max(main(x), shortcut(x)) (Keras's Maximum)")));
MT_REGISTER(LayerType,
            (MergeContainer<Merge::kMinimum>(
                "minimum", "min(main(x), shortcut(x)) (Keras's Minimum)")));

MT_REGISTER(
    LayerType,
    {.name = "parallel",
     .doc = "any number of branches over its input, each entry of `layers` "
            "one (a layer, or a sequential of several), their outputs "
            "merged as Keras's merge layers of them (an Inception block's "
            "concatenation)",
     .params = {{Param::String("merge")
                     .Default("concatenate")
                     .OneOf(ParallelMergeNames())
                     .Doc("concatenate: along the last axis; the others "
                          "elementwise, broadcasting axes of 1, in order "
                          "(average: the sum over the count)")}},
     .container = true,
     .parallel = true,
     .create = CreateParallel});

}  // namespace mirrortrain::models
