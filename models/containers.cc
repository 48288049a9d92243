#include "models/containers.h"

#include <algorithm>

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

}  // namespace

absl::StatusOr<Tensor> TwoBranchLayer::Call(const Tensor& x,
                                            const ForwardContext& ctx) {
  Tensor mask;
  return CallMasked(x, ctx, mask);
}

bool TwoBranchLayer::OutputMasked(bool input_masked) const {
  const bool main = main_->OutputMasked(input_masked);
  const bool shortcut = shortcut_ != nullptr
                            ? shortcut_->OutputMasked(input_masked)
                            : input_masked;
  return merge_ == Merge::kConcatenate ? main || shortcut : main && shortcut;
}

absl::StatusOr<Tensor> TwoBranchLayer::CallMasked(const Tensor& x,
                                                  const ForwardContext& ctx,
                                                  Tensor& mask) {
  // The request for the sum's storage is not the branches'.
  ForwardContext branch = ctx;
  branch.output_rounding = ops::OutputRounding::kNone;
  // Unrounded token ids go as they are only to a branch that reads them
  // first; the other gets a rounded copy of its own, so neither can round
  // the other's input in place (ForwardContext::raw_token_ids).
  auto input_of = [&](const Layer* b) -> absl::StatusOr<Tensor> {
    if (!ctx.raw_token_ids || (b != nullptr && b->ReadsTokenIds())) return x;
    return ops::RoundedToBFloat16(x, b != nullptr && b->InputFeedsProduct());
  };
  ForwardContext main_ctx = branch;
  main_ctx.raw_token_ids = ctx.raw_token_ids && main_->ReadsTokenIds();
  MT_ASSIGN_OR_RETURN(const Tensor main_in, input_of(main_.get()));
  Tensor main_mask, shortcut_mask = ctx.mask;
  MT_ASSIGN_OR_RETURN(Tensor y,
                      main_->CallMasked(main_in, main_ctx, main_mask));
  MT_ASSIGN_OR_RETURN(Tensor s, input_of(shortcut_.get()));
  if (shortcut_ != nullptr) {
    ForwardContext short_ctx = branch;
    short_ctx.raw_token_ids = ctx.raw_token_ids && shortcut_->ReadsTokenIds();
    MT_ASSIGN_OR_RETURN(s, shortcut_->CallMasked(s, short_ctx, shortcut_mask));
  }
  MT_ASSIGN_OR_RETURN(mask, MergedMask(main_mask, shortcut_mask));
  if (merge_ != Merge::kConcatenate && y.rank() != s.rank()) {
    // Keras's merges give the lower-rank output axes of 1 after the batch.
    Tensor& low = y.rank() < s.rank() ? y : s;
    MT_ASSIGN_OR_RETURN(
        low, ops::Reshape(
                 low, WithUnitAxes(low.shape(), std::max(y.rank(), s.rank()))));
  }
  switch (merge_) {
    case Merge::kAdd:
      return ops::Add(y, s);
    case Merge::kConcatenate:
      return ops::Concat({y, s}, y.rank() - 1);
    case Merge::kMultiply:
      return ops::Mul(y, s);
    case Merge::kSubtract:
      return ops::Sub(y, s);
    case Merge::kAverage: {
      // Keras's Average: the sum divided by the count (a halving, exact).
      MT_ASSIGN_OR_RETURN(const Tensor sum, ops::Add(y, s));
      return ops::Scale(sum, 0.5);
    }
    case Merge::kMaximum:
      return ops::Maximum(y, s);
    case Merge::kMinimum:
      return ops::Minimum(y, s);
  }
  return absl::InternalError("unknown merge");
}

absl::StatusOr<Shape> TwoBranchLayer::OutputShape(const Shape& input) const {
  MT_ASSIGN_OR_RETURN(Shape main, main_->OutputShape(input));
  Shape shortcut = input;
  if (shortcut_ != nullptr) {
    MT_ASSIGN_OR_RETURN(shortcut, shortcut_->OutputShape(input));
  }
  const std::string shortcut_name =
      shortcut_ == nullptr ? "identity shortcut" : "shortcut";
  if (merge_ == Merge::kConcatenate) {
    // Every axis but the last (the channels, the features) must agree.
    if (main.size() != shortcut.size() ||
        !std::equal(main.begin(), main.end() - 1, shortcut.begin())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the main branch gives ", ShapeToString(main), " but the ",
          shortcut_name, " gives ", ShapeToString(shortcut),
          ": concatenated along the last axis, the others must agree"));
    }
    main.back() += shortcut.back();
    return main;
  }
  // Elementwise: Keras's broadcast of axes of 1 (a gate [1, 1, c] over an
  // image [h, w, c]), the lower rank given axes of 1 after the batch first
  // (a gate [c]).
  const size_t rank = std::max(main.size(), shortcut.size());
  const Shape main_given = main, shortcut_given = shortcut;
  main = WithUnitAxes(main, rank);
  shortcut = WithUnitAxes(shortcut, rank);
  bool broadcasts = true;
  Shape out = main;
  for (size_t i = 0; broadcasts && i < rank; ++i) {
    broadcasts = main[i] == shortcut[i] || main[i] == 1 || shortcut[i] == 1;
    out[i] = main[i] == 1 ? shortcut[i] : main[i];
  }
  if (!broadcasts) {
    // The remedy depends on what flows: images take a strided 1x1 conv,
    // vectors and sequences a dense layer of the main branch's width.
    const std::string remedy =
        input.size() == 4
            ? "a strided 1x1 conv2d"
            : absl::StrCat("a dense layer of ", main.back(), " units");
    return absl::InvalidArgumentError(absl::StrCat(
        "the main branch gives ", ShapeToString(main_given), " but the ",
        shortcut_name, " gives ", ShapeToString(shortcut_given),
        " (each axis must agree or be 1 on one side; add a shortcut with ",
        remedy, ")"));
  }
  return out;
}

absl::StatusOr<Tensor> TwoBranchLayer::MergedMask(
    const Tensor& main, const Tensor& shortcut) const {
  if (main.defined() && shortcut.defined()) return MaskOr(main, shortcut);
  if (merge_ != Merge::kConcatenate ||
      (!main.defined() && !shortcut.defined())) {
    return Tensor();
  }
  // Keras counts the unmasked branch's steps as all 1: so is the OR.
  const Tensor& one = main.defined() ? main : shortcut;
  return ops::OnesLike(one);
}

std::vector<Variable*> TwoBranchLayer::variables() {
  std::vector<Variable*> out = main_->variables();
  if (shortcut_ != nullptr) {
    for (Variable* v : shortcut_->variables()) out.push_back(v);
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
  return std::make_unique<TwoBranchLayer>(b.name(), std::move(main),
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

}  // namespace mirrortrain::models
