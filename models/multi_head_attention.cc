// MultiHeadAttention (config type `multi_head_attention`), Keras semantics
// for self-attention: query, key and value are the input x [batch, T, D].
//   q = (x Wq + bq) / sqrt(key_dim), k = x Wk + bk, v = x Wv + bv   per head
//   p = softmax(q k^T + mask)   (mask: 0, or -1e9 above the diagonal when
//                                `causal`, as Keras' Softmax adds)
//   y = (dropout(p) v) Wo + bo
// Variables carry Keras' names and shapes: query/kernel [D, heads, key_dim],
// query/bias [heads, key_dim], likewise key/ and value/, and
// attention_output/kernel [heads, key_dim, D], attention_output/bias [D];
// kernels glorot_uniform with the fans Keras 3.15's EinsumDense gives them
// (the einsum's input and output axes: D and heads * key_dim, and back),
// biases zero.
//
// Heads are laid out batch-first ([batch, heads, T, T] probabilities), so a
// replica's shard of the batch is a contiguous block of every intermediate
// and its dropout mask is the one the whole batch would draw.
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// keras.layers.Softmax's additive mask value for float32 scores.
constexpr double kMaskedScore = -1e9;

// One of the query/key/value/attention_output projections.
using Projection = KernelAndBias;

// rows [n, in] @ kernel viewed as [in, out] (+ bias viewed as [out]).
absl::StatusOr<Tensor> Project(const Projection& p, const Tensor& rows) {
  const Tensor& kernel = p.kernel.value();
  const int64_t out = kernel.num_elements() / rows.dim(1);
  MT_ASSIGN_OR_RETURN(Tensor w, ops::Reshape(kernel, {rows.dim(1), out}));
  if (!p.bias.has_value()) return ops::MatMul(rows, w);
  MT_ASSIGN_OR_RETURN(Tensor b, ops::Reshape(p.bias->value(), {out}));
  return ops::MatMulBias(rows, w, b);
}

class MultiHeadAttentionLayer final : public Layer {
 public:
  struct Options {
    int64_t width = 0;  // D, the input's last axis.
    int64_t heads = 0;
    int64_t key_dim = 0;
    bool use_bias = true;
    bool causal = false;
    double dropout = 0;
    int index = 0;  // Among the model's attention layers (dropout seeds).
  };

  static absl::StatusOr<std::unique_ptr<Layer>> Create(std::string name,
                                                       const Options& o,
                                                       LayerBuilder& b) {
    const Shape in_kernel = {o.width, o.heads, o.key_dim};
    const Shape head_bias = {o.heads, o.key_dim};
    const double heads_width = static_cast<double>(o.heads * o.key_dim);
    const double width = static_cast<double>(o.width);
    std::vector<Projection> projections;
    for (const char* part : {"query", "key", "value"}) {
      MT_ASSIGN_OR_RETURN(
          Projection p,
          MakeKernelAndBias(absl::StrCat(name, "/", part), in_kernel, head_bias,
                            o.use_bias, b.NextSeed(), b.device(),
                            Fans{.in = width, .out = heads_width}));
      projections.push_back(std::move(p));
    }
    MT_ASSIGN_OR_RETURN(
        Projection out,
        MakeKernelAndBias(absl::StrCat(name, "/attention_output"),
                          {o.heads, o.key_dim, o.width}, {o.width}, o.use_bias,
                          b.NextSeed(), b.device(),
                          Fans{.in = heads_width, .out = width}));
    projections.push_back(std::move(out));
    std::unique_ptr<Layer> layer(new MultiHeadAttentionLayer(
        std::move(name), o, std::move(projections)));
    return layer;
  }

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    const int64_t batch = x.dim(0), t = x.dim(1);
    const int64_t h = options_.heads, k = options_.key_dim;
    MT_ASSIGN_OR_RETURN(Tensor rows, ops::Reshape(x, {batch * t, x.dim(2)}));
    // [batch*T, heads*key_dim] -> [batch, heads, T, key_dim].
    auto heads_of = [&](const Projection& p) -> absl::StatusOr<Tensor> {
      MT_ASSIGN_OR_RETURN(Tensor y, Project(p, rows));
      MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, {batch, t, h, k}));
      return ops::Transpose(y, {0, 2, 1, 3});
    };
    MT_ASSIGN_OR_RETURN(Tensor q, heads_of(projections_[0]));
    MT_ASSIGN_OR_RETURN(Tensor key, heads_of(projections_[1]));
    MT_ASSIGN_OR_RETURN(Tensor v, heads_of(projections_[2]));
    MT_ASSIGN_OR_RETURN(q,
                        ops::Scale(q, 1.0 / std::sqrt(static_cast<double>(k))));
    MT_ASSIGN_OR_RETURN(Tensor scores, ops::MatMul(q, key, false, true));
    Tensor keep;  // [batch, 1, T, T] of 1 and 0 under a padding mask.
    if (ctx.mask.defined()) {
      MT_RETURN_IF_ERROR(CheckMask(x, ctx.mask, name()));
      MT_ASSIGN_OR_RETURN(const Tensor mask, MaskAs(ctx.mask, scores.dtype()));
      MT_ASSIGN_OR_RETURN(keep, AttentionMask(mask));
      // A masked score made a large negative one, as Keras selects it
      // (where(mask, s, -0.7 FLT_MAX) on its fused path, the Softmax
      // layer's -1e9 with dropout: the same probabilities): s * 1 + 0, or
      // s * 0 - 1e9.
      MT_ASSIGN_OR_RETURN(const Tensor large,
                          ops::internal::ScalarLike(scores, kMaskedScore));
      MT_ASSIGN_OR_RETURN(scores, MaskSelect(keep, scores, large));
    } else if (options_.causal) {
      MT_ASSIGN_OR_RETURN(Tensor mask, CausalMask(t, x.device()));
      MT_ASSIGN_OR_RETURN(mask, MaskAs(mask, scores.dtype()));
      MT_ASSIGN_OR_RETURN(scores, ops::Add(scores, mask));
    }
    MT_ASSIGN_OR_RETURN(Tensor probs, ops::Softmax(scores));
    if (keep.defined() && options_.dropout > 0) {
      // Keras's path with dropout (its Softmax layer's): a query whose
      // every key is masked attends to nothing (0), not to all alike.
      MT_ASSIGN_OR_RETURN(probs, ops::Mul(probs, keep));
    }
    if (ctx.training && options_.dropout > 0) {
      // Seeded by step and layer; salted apart from the dropout layers'.
      MT_ASSIGN_OR_RETURN(probs,
                          ctx.Dropout(probs, options_.dropout,
                                      static_cast<uint64_t>(options_.index),
                                      /*salt=*/0x6d756c7469686561ULL,
                                      ctx.row_offset * h * t * t));
    }
    MT_ASSIGN_OR_RETURN(Tensor attended, ops::MatMul(probs, v));
    MT_ASSIGN_OR_RETURN(attended, ops::Transpose(attended, {0, 2, 1, 3}));
    MT_ASSIGN_OR_RETURN(attended, ops::Reshape(attended, {batch * t, h * k}));
    MT_ASSIGN_OR_RETURN(Tensor y, Project(projections_[3], attended));
    return ops::Reshape(y, x.shape());
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() != 3 || input[2] != options_.width) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects input [batch, T, ", options_.width,
                       "], got ", ShapeToString(input)));
    }
    return input;
  }

  std::vector<Variable*> variables() override {
    std::vector<Variable*> vars;
    for (Projection& p : projections_) {
      vars.push_back(&p.kernel);
      if (p.bias.has_value()) vars.push_back(&*p.bias);
    }
    return vars;
  }
  bool InputFeedsProduct() const override { return true; }
  // Keras's: a masked query or key is left out; the output keeps the
  // (query's) mask.
  bool SupportsMasking() const override { return true; }

 private:
  // The padding mask [batch, T] as keep[b, 0, i, j] = mask[b, i] mask[b, j]
  // (Keras's query and value masks), and i >= j too when causal.
  absl::StatusOr<Tensor> AttentionMask(const Tensor& mask) {
    const int64_t batch = mask.dim(0), t = mask.dim(1);
    MT_ASSIGN_OR_RETURN(const Tensor rows,
                        ops::Reshape(mask, {batch, 1, t, 1}));
    MT_ASSIGN_OR_RETURN(const Tensor cols,
                        ops::Reshape(mask, {batch, 1, 1, t}));
    MT_ASSIGN_OR_RETURN(
        Tensor keep, ops::internal::BinaryKernel("AttentionMask",
                                                 BinaryKind::kMul, rows, cols));
    if (!options_.causal) return keep;
    MT_RETURN_IF_ERROR(CausalMask(t, mask.device()).status());
    MT_ASSIGN_OR_RETURN(const Tensor lower, MaskAs(causal_keep_, keep.dtype()));
    return ops::internal::BinaryKernel("AttentionMask", BinaryKind::kMul, keep,
                                       lower);
  }

  MultiHeadAttentionLayer(std::string name, const Options& options,
                          std::vector<Projection> projections)
      : Layer(std::move(name)),
        options_(options),
        projections_(std::move(projections)) {}

  // [T, T]: 0 on and below the diagonal, kMaskedScore above (added to the
  // scores); also causal_keep_, 1 on and below, 0 above (a padding mask's
  // factor). Built once per length and device.
  absl::StatusOr<Tensor> CausalMask(int64_t t, Device device) {
    if (!causal_mask_.defined() || causal_mask_.dim(0) != t ||
        causal_mask_.device() != device) {
      std::vector<float> m(static_cast<size_t>(t * t), 0.0f);
      std::vector<float> keep(static_cast<size_t>(t * t), 1.0f);
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = i + 1; j < t; ++j) {
          m[static_cast<size_t>(i * t + j)] = static_cast<float>(kMaskedScore);
          keep[static_cast<size_t>(i * t + j)] = 0.0f;
        }
      }
      MT_ASSIGN_OR_RETURN(causal_mask_,
                          Tensor::FromVector<float>(m, {t, t}).To(device));
      MT_ASSIGN_OR_RETURN(causal_keep_,
                          Tensor::FromVector<float>(keep, {t, t}).To(device));
    }
    return causal_mask_;
  }

  Options options_;
  std::vector<Projection> projections_;  // query, key, value, output.
  Tensor causal_mask_, causal_keep_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "multi_head_attention",
     .doc = "self-attention over [batch, T, width] (Keras "
            "MultiHeadAttention with query = key = value = the input; "
            "output width = input width)",
     .params = {{Param::Int("num_heads")
                     .Min(1)
                     .Max(kMaxDimension)
                     .Doc("attention heads"),
                 Param::Int("key_dim")
                     .Default(0)
                     .Min(0)
                     .Max(kMaxDimension)
                     .Doc("width of each head's query and key (and value); "
                          "0: width / num_heads, which must divide"),
                 Param::Bool("causal").Default(false).Doc(
                     "position i attends to positions <= i only (Keras "
                     "use_causal_mask)"),
                 Param::Float("dropout").Default(0).Min(0).Max(1, false).Doc(
                     "dropout rate on the attention probabilities while "
                     "training"),
                 UseBiasParam()}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const Shape& in = b.input_shape();
       if (in.size() != 3) {
         return absl::InvalidArgumentError(absl::StrCat(
             "expects input [batch, T, width], got ", ShapeToString(in)));
       }
       MultiHeadAttentionLayer::Options o;
       o.width = in[2];
       o.heads = spec.params.Int("num_heads");
       o.key_dim = spec.params.Int("key_dim");
       if (o.key_dim == 0) {
         if (o.width % o.heads != 0) {
           return absl::InvalidArgumentError(absl::StrCat(
               "num_heads: ", o.heads, " does not divide the input width ",
               o.width, " (or set key_dim)"));
         }
         o.key_dim = o.width / o.heads;
       }
       o.use_bias = spec.params.Bool("use_bias");
       o.causal = spec.params.Bool("causal");
       o.dropout = spec.params.Float("dropout");
       o.index = b.type_index();
       return MultiHeadAttentionLayer::Create(b.name(), o, b);
     }});

}  // namespace mirrortrain::models
