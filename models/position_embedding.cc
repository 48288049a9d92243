// PositionEmbedding (config type `position_embedding`), keras-nlp's learned
// position embedding: a table `embeddings` [sequence_length, width]
// (glorot_uniform, keras-nlp's default) whose first T rows are added to an
// input [batch, T, width]. keras-nlp's layer returns only the broadcast
// position vectors; in a layer list the sum is what the next layer needs,
// so this layer is `x + keras_nlp.layers.PositionEmbedding(L)(x)`.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class PositionEmbeddingLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Layer>> Create(std::string name,
                                                       int64_t sequence_length,
                                                       int64_t width,
                                                       uint64_t seed,
                                                       Device device) {
    MT_ASSIGN_OR_RETURN(Tensor initial,
                        GlorotUniform({sequence_length, width}, seed));
    MT_ASSIGN_OR_RETURN(
        Variable embeddings,
        VariableOn(absl::StrCat(name, "/embeddings"), initial, device));
    return std::unique_ptr<Layer>(
        new PositionEmbeddingLayer(std::move(name), std::move(embeddings)));
  }

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    const int64_t t = x.dim(1);
    const Tensor& table = embeddings_.value();
    if (t == table.dim(0)) return ops::Add(x, table);
    // The first T rows, through an op the tape differentiates (a view
    // would cut the table off from its gradient).
    if (!positions_.defined() || positions_.num_elements() != t) {
      std::vector<int64_t> rows(static_cast<size_t>(t));
      std::iota(rows.begin(), rows.end(), int64_t{0});
      MT_ASSIGN_OR_RETURN(positions_, Tensor::FromVector<int64_t>(rows, {t}).To(
                                          table.device()));
    }
    MT_ASSIGN_OR_RETURN(Tensor rows, ops::Gather(table, positions_));
    return ops::Add(x, rows);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const int64_t length = embeddings_.shape()[0];
    const int64_t width = embeddings_.shape()[1];
    if (input.size() != 3 || input[2] != width) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects input [batch, T, ", width, "], got ",
                       ShapeToString(input)));
    }
    if (input[1] > length) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": sequence of ", input[1],
                       " positions is longer than sequence_length ", length));
    }
    return input;
  }

  std::vector<Variable*> variables() override { return {&embeddings_}; }

 private:
  PositionEmbeddingLayer(std::string name, Variable embeddings)
      : Layer(std::move(name)), embeddings_(std::move(embeddings)) {}

  Variable embeddings_;
  Tensor positions_;  // [T] row ids for the last T < sequence_length.
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "position_embedding",
     .doc = "adds a learned vector per position to [batch, T, width]: "
            "keras-nlp PositionEmbedding's glorot_uniform table, summed "
            "with its input as keras-nlp's TokenAndPositionEmbedding sums "
            "them (its PositionEmbedding returns the table alone); T must "
            "not exceed sequence_length",
     .params = {{Param::Int("sequence_length")
                     .Min(1)
                     .Max(kMaxDimension)
                     .Doc("positions in the table: the longest sequence")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const Shape& in = b.input_shape();
       const int64_t length = spec.params.Int("sequence_length");
       if (in.size() != 3) {
         return absl::InvalidArgumentError(absl::StrCat(
             "expects input [batch, T, width], got ", ShapeToString(in)));
       }
       if (in[1] > length) {
         return absl::InvalidArgumentError(absl::StrCat(
             "sequence_length: ", length, " is shorter than the input's ",
             in[1], " positions"));
       }
       return PositionEmbeddingLayer::Create(b.name(), length, in[2],
                                             b.NextSeed(), b.device());
     }});

}  // namespace mirrortrain::models
