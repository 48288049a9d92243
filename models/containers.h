// The containers of "Models as data": `sequential` (layers in order),
// `residual` (y = main(x) + shortcut(x), the shortcut the identity when
// absent), `concatenate` (y = [main(x), shortcut(x)] along the last
// axis: DenseNet's block with the identity), and Keras's other merges of
// two branches: `multiply` (a squeeze-and-excitation block's gate),
// `subtract`, `average`, `maximum`, `minimum`; and `parallel`, any number
// of branches (each entry of its `layers`) merged by one of them (an
// Inception block's concatenation). They own their layers; variables are
// listed in layer order (main branch before shortcut, branches in order).
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

// How branches' outputs merge: concatenated along the last axis, or
// elementwise in order, ((b0 op b1) op b2) ... (Keras's merge layers: a
// lower rank gains axes of 1 after the batch, then each axis must agree or
// be 1 on one side, as Keras broadcasts them).
enum class Merge {
  kAdd,
  kConcatenate,
  kMultiply,
  kSubtract,  // main - shortcut (two branches only)
  kAverage,   // the sum / the count
  kMaximum,
  kMinimum,
};

// Branches over one input, their outputs merged in order (Keras's merge
// layers over the branches' outputs).
class BranchesLayer final : public Layer {
 public:
  // A null branch is the identity. `names` name the branches in shape
  // errors (the main branch and the shortcut, or layers[i]).
  BranchesLayer(std::string name, std::vector<std::unique_ptr<Layer>> branches,
                std::vector<std::string> names, Merge merge,
                bool main_and_shortcut = false)
      : Layer(std::move(name)),
        branches_(std::move(branches)),
        names_(std::move(names)),
        merge_(merge),
        main_and_shortcut_(main_and_shortcut) {}
  // Two branches: `main`, and `shortcut` (null: the identity).
  static std::unique_ptr<BranchesLayer> TwoBranches(
      std::string name, std::unique_ptr<Layer> main,
      std::unique_ptr<Layer> shortcut, Merge merge = Merge::kAdd);

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  // Every branch gets the input's mask. The output's, as Keras's merges
  // give it: elementwise merges are masked where any branch's mask is 1
  // when every branch is masked, else not at all; a concatenation is
  // masked where any is, a branch without a mask counting as all 1.
  absl::StatusOr<Tensor> CallMasked(const Tensor& x, const ForwardContext& ctx,
                                    Tensor& mask) override;
  bool SupportsMasking() const override { return true; }
  bool OutputMasked(bool input_masked) const override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  std::vector<Variable*> variables() override;
  bool InputFeedsProduct() const override;
  bool ReadsTokenIds() const override;

 private:
  // The output's mask from the branches' (CallMasked).
  absl::StatusOr<Tensor> MergedMask(const std::vector<Tensor>& masks) const;
  // The merges whose values Keras changes at masked steps: Multiply's and
  // Maximum's or Minimum's of the branches' outputs under their masks
  // (at least one defined).
  // `output_mask`: MergedMask's (their OR where every branch has one).
  static absl::StatusOr<Tensor> MaskedProduct(
      const std::vector<Tensor>& outputs, const std::vector<Tensor>& masks,
      const Tensor& output_mask);
  absl::StatusOr<Tensor> MaskedExtremum(const std::vector<Tensor>& outputs,
                                        const std::vector<Tensor>& masks) const;

  std::vector<std::unique_ptr<Layer>> branches_;
  std::vector<std::string> names_;
  Merge merge_;
  // A main branch and a shortcut (TwoBranches): a shape error may suggest
  // a shortcut that fits.
  bool main_and_shortcut_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_CONTAINERS_H_
