// The containers of "Models as data": `sequential` (layers in order),
// `residual` (y = main(x) + shortcut(x), the shortcut the identity when
// absent), `concatenate` (y = [main(x), shortcut(x)] along the last
// axis: DenseNet's block with the identity, a two-branch Inception block
// with both), and Keras's other merges of two branches: `multiply` (a
// squeeze-and-excitation block's gate), `subtract`, `average`, `maximum`,
// `minimum`. They own their layers; variables are listed in layer order
// (main branch before shortcut).
#ifndef MIRRORTRAIN_MODELS_CONTAINERS_H_
#define MIRRORTRAIN_MODELS_CONTAINERS_H_

#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"

namespace mirrortrain::models {

class SequentialLayer final : public Layer {
 public:
  explicit SequentialLayer(std::string name) : Layer(std::move(name)) {}
  // Appends `layer` unless the previous layer absorbs it (AbsorbNext);
  // returns whether it was absorbed.
  bool Append(std::unique_ptr<Layer> layer);

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  // Each layer gets the mask of its input: the sequence's, then the one
  // the layer before it gave.
  absl::StatusOr<Tensor> CallMasked(const Tensor& x, const ForwardContext& ctx,
                                    Tensor& mask) override;
  bool SupportsMasking() const override { return true; }
  bool OutputMasked(bool input_masked) const override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  std::vector<Variable*> variables() override;
  bool InputFeedsProduct() const override {
    return !layers_.empty() && layers_.front()->InputFeedsProduct();
  }
  bool ReadsTokenIds() const override {
    return !layers_.empty() && layers_.front()->ReadsTokenIds();
  }
  bool InputOnlyFeedsProducts() const override {
    return !layers_.empty() && layers_.front()->InputOnlyFeedsProducts();
  }
  // Its last layer's output is its output, stored as its caller asks.
  bool OutputNeedsOnlyHalves() const override {
    return !layers_.empty() && layers_.back()->OutputNeedsOnlyHalves();
  }
  // Its layers in call order (Keras's model.layers), owned here.
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
};

// How two branches' outputs merge: concatenated along the last axis, or
// elementwise (Keras's merge layers: main first; a lower rank gains axes of
// 1 after the batch, then each axis must agree or be 1 on one side, as
// Keras broadcasts them).
enum class Merge {
  kAdd,
  kConcatenate,
  kMultiply,
  kSubtract,  // main - shortcut
  kAverage,   // (main + shortcut) / 2
  kMaximum,
  kMinimum,
};

// Two branches over one input, their outputs merged.
class TwoBranchLayer final : public Layer {
 public:
  // `shortcut` null: the identity.
  TwoBranchLayer(std::string name, std::unique_ptr<Layer> main,
                 std::unique_ptr<Layer> shortcut, Merge merge = Merge::kAdd)
      : Layer(std::move(name)),
        main_(std::move(main)),
        shortcut_(std::move(shortcut)),
        merge_(merge) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  // Both branches get the input's mask. The output's, as Keras's merges
  // give it: elementwise merges are masked where either branch's mask is
  // 1 when both are masked, else not at all; a concatenation is masked
  // where either is, a branch without a mask counting as all 1.
  absl::StatusOr<Tensor> CallMasked(const Tensor& x, const ForwardContext& ctx,
                                    Tensor& mask) override;
  bool SupportsMasking() const override { return true; }
  bool OutputMasked(bool input_masked) const override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  std::vector<Variable*> variables() override;
  bool InputFeedsProduct() const override {
    return main_->InputFeedsProduct() ||
           (shortcut_ != nullptr && shortcut_->InputFeedsProduct());
  }
  bool ReadsTokenIds() const override {
    return main_->ReadsTokenIds() ||
           (shortcut_ != nullptr && shortcut_->ReadsTokenIds());
  }

 private:
  // The output's mask from the branches' (CallMasked).
  absl::StatusOr<Tensor> MergedMask(const Tensor& main,
                                    const Tensor& shortcut) const;

  std::unique_ptr<Layer> main_;
  std::unique_ptr<Layer> shortcut_;
  Merge merge_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_CONTAINERS_H_
