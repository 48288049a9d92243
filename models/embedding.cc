// Embedding (config type `embedding`), Keras semantics: token ids in, rows
// of the `embeddings` table [input_dim, output_dim] out, with one more axis
// than the input. Ids arrive as floats (the text data source's inputs) and
// are cast to integers; an id outside [0, input_dim) is an error naming the
// layer. The table's gradient is Gather's scatter-add, deterministic on
// both devices (tensor/ops/array_ops.h). With mask_zero, id 0 is padding:
// the output's mask is ids != 0 (Keras masking, models/masking.h).
#include <string>

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/index_checks.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// keras.layers.Embedding's default initializer: RandomUniform(-0.05, 0.05).
constexpr double kEmbeddingInitLimit = 0.05;

class EmbeddingLayer final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Layer>> Create(
      std::string name, int64_t input_dim, int64_t output_dim, bool mask_zero,
      uint64_t seed, Device device) {
    MT_ASSIGN_OR_RETURN(
        Tensor initial,
        RandomUniform({input_dim, output_dim}, seed, kEmbeddingInitLimit));
    MT_ASSIGN_OR_RETURN(
        Variable embeddings,
        VariableOn(absl::StrCat(name, "/embeddings"), initial, device));
    return std::unique_ptr<Layer>(
        new EmbeddingLayer(std::move(name), std::move(embeddings), mask_zero));
  }

  bool ReadsTokenIds() const override { return true; }
  // Keras's: supports_masking is mask_zero, and the mask is its own.
  bool SupportsMasking() const override { return mask_zero_; }
  bool OutputMasked(bool) const override { return mask_zero_; }
  absl::StatusOr<Tensor> OutputMask(const Tensor& x,
                                    const ForwardContext&) const override {
    if (!mask_zero_) return Tensor();
    return NotEqualMask(x, 0);
  }

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    const std::string context = absl::StrCat(name(), ": token ids (input_dim ",
                                             embeddings_.shape()[0], "): ");
    // The same context for an id checked later, on the device.
    ops::ScopedIndexCheckLabel label(context);
    absl::StatusOr<Tensor> y = Lookup(x);
    if (!y.ok()) {
      return absl::Status(y.status().code(),
                          absl::StrCat(context, y.status().message()));
    }
    return y;
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects input [batch, ...] of token ids"));
    }
    Shape out = input;
    out.push_back(embeddings_.shape()[1]);
    return out;
  }

  std::vector<Variable*> variables() override { return {&embeddings_}; }

 private:
  // Float ids (NaN or past i64 is a Cast error) are cast to integers first.
  absl::StatusOr<Tensor> Lookup(const Tensor& x) {
    Tensor ids = x;
    if (IsFloating(x.dtype())) {
      MT_ASSIGN_OR_RETURN(ids, ops::Cast(x, DType::kI64));
    }
    return ops::Gather(embeddings_.value(), ids);
  }

  EmbeddingLayer(std::string name, Variable embeddings, bool mask_zero)
      : Layer(std::move(name)),
        embeddings_(std::move(embeddings)),
        mask_zero_(mask_zero) {}

  Variable embeddings_;
  bool mask_zero_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "embedding",
     .doc = "token ids (floats cast to integers) -> rows of a learned table "
            "[input_dim, output_dim], initialised U(-0.05, 0.05) (Keras "
            "Embedding)",
     .params = {{Param::Int("input_dim")
                     .Min(1)
                     .Max(kMaxDimension)
                     .Doc("vocabulary size: ids lie in [0, input_dim)"),
                 Param::Int("output_dim")
                     .Min(1)
                     .Max(kMaxDimension)
                     .Doc("width of each embedding vector"),
                 Param::Bool("mask_zero")
                     .Default(false)
                     .Doc(
                         "id 0 is padding: the layers after it that take masks "
                         "(recurrent, attention, global average pooling, "
                         "batch normalization, a masked loss) skip those "
                         "steps (Keras mask_zero)")}},
     .reads_token_ids = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const int64_t input_dim = spec.params.Int("input_dim");
       if (b.continuous_inputs()) {
         return absl::InvalidArgumentError(
             "the data's examples are real values (synthetic, or pixels "
             "scaled to [0, 1]), not token ids (each would be id 0): train "
             "it on text, or on npz ids stored as float32");
       }
       if (b.input_vocabulary() > input_dim) {
         // Found when the model is built, not at the first unlucky batch.
         return absl::InvalidArgumentError(absl::StrCat(
             "input_dim: ", input_dim, " is smaller than the data's ",
             b.input_vocabulary(), " token ids"));
       }
       return EmbeddingLayer::Create(
           b.name(), input_dim, spec.params.Int("output_dim"),
           spec.params.Bool("mask_zero"), b.NextSeed(), b.device());
     }});

}  // namespace mirrortrain::models
