// Keras's noise layers, active while training only (the identity
// otherwise), each passing masks on (supports_masking):
//   * gaussian_noise (GaussianNoise): x + stddev n;
//   * gaussian_dropout (GaussianDropout): x (1 + sqrt(rate / (1 - rate)) n);
//   * alpha_dropout (AlphaDropout, for selu networks): dropped elements set
//     to selu's negative saturation -alpha scale, then a x + b keeping the
//     mean and variance (Keras's a and b).
// n is standard normal noise, and the kept elements a dropout's draws, both
// counter-based and keyed by step, layer and element of the global batch
// (ForwardContext::Normal, Dropout), so a replica's shard draws the whole
// batch's; not Keras's random stream.
#include <cmath>
#include <memory>
#include <string>

#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/dropout_mask.h"
#include "tensor/elementwise_kind.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

enum class Noise { kAdditive, kMultiplicative, kAlpha };

// Each kind's draws apart from the others' and from dropout's (large salts:
// streams count per type).
uint64_t NoiseSalt(Noise kind) {
  return DropoutMix(0x6e6f697365000000ULL + static_cast<uint64_t>(kind));
}

class NoiseLayer final : public Layer {
 public:
  NoiseLayer(std::string name, Noise kind, double amount, int index)
      : Layer(std::move(name)), kind_(kind), amount_(amount), index_(index) {}

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    if (!ctx.training || amount_ == 0) return x;
    const int64_t per_row = x.dim(0) > 0 ? x.num_elements() / x.dim(0) : 0;
    const int64_t offset = ctx.row_offset * per_row;
    const uint64_t stream = static_cast<uint64_t>(index_);
    if (kind_ == Noise::kAlpha) return AlphaDropout(x, ctx, stream, offset);
    MT_ASSIGN_OR_RETURN(const Tensor n,
                        ctx.Normal(x, stream, NoiseSalt(kind_), offset));
    if (kind_ == Noise::kAdditive) {
      MT_ASSIGN_OR_RETURN(const Tensor scaled, ops::Scale(n, amount_));
      return ops::Add(x, scaled);
    }
    // Keras's normal(mean 1, stddev): 1 + stddev n.
    MT_ASSIGN_OR_RETURN(Tensor factor,
                        ops::Scale(n, std::sqrt(amount_ / (1 - amount_))));
    MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(x, 1.0));
    MT_ASSIGN_OR_RETURN(factor, ops::Add(factor, one));
    return ops::Mul(x, factor);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }
  bool SupportsMasking() const override { return true; }

 private:
  absl::StatusOr<Tensor> AlphaDropout(const Tensor& x,
                                      const ForwardContext& ctx,
                                      uint64_t stream, int64_t offset) const {
    const double rate = amount_;
    const double alpha_p = -kSeluScaleAlpha;  // -alpha scale
    MT_ASSIGN_OR_RETURN(const Tensor ones, ops::OnesLike(x));
    MT_ASSIGN_OR_RETURN(
        const Tensor drawn,
        ctx.Dropout(ones, rate, stream, NoiseSalt(kind_), offset));
    MT_ASSIGN_OR_RETURN(const Tensor kept, NotEqualMask(drawn, 0));
    MT_ASSIGN_OR_RETURN(const Tensor saturated,
                        ops::internal::ScalarLike(x, alpha_p));
    MT_ASSIGN_OR_RETURN(const Tensor selected, MaskSelect(kept, x, saturated));
    const double a =
        std::pow((1 - rate) * (1 + rate * alpha_p * alpha_p), -0.5);
    const double b = -a * alpha_p * rate;
    MT_ASSIGN_OR_RETURN(const Tensor scaled, ops::Scale(selected, a));
    MT_ASSIGN_OR_RETURN(const Tensor shift, ops::internal::ScalarLike(x, b));
    return ops::Add(scaled, shift);
  }

  Noise kind_;
  double amount_;  // stddev, or rate.
  int index_;
};

template <Noise kKind>
absl::StatusOr<std::unique_ptr<Layer>> CreateNoise(const LayerSpec& spec,
                                                   LayerBuilder& b) {
  const double amount =
      spec.params.Float(kKind == Noise::kAdditive ? "stddev" : "rate");
  return std::make_unique<NoiseLayer>(b.name(), kKind, amount, b.type_index());
}

Param RateParam(const char* what) {
  return Param::Float("rate").Min(0).Max(1, false).Doc(what);
}

}  // namespace

MT_REGISTER(LayerType,
            {.name = "gaussian_noise",
             .doc = "adds normal noise of mean 0 and `stddev` while "
                    "training, the identity otherwise (Keras GaussianNoise)",
             .params = {{Param::Float("stddev").Min(0).Max(1).Doc(
                 "the noise's standard deviation (Keras's range)")}},
             .create = CreateNoise<Noise::kAdditive>});
MT_REGISTER(LayerType,
            {.name = "gaussian_dropout",
             .doc = "multiplies by normal noise of mean 1 and standard "
                    "deviation sqrt(rate / (1 - rate)) while training, the "
                    "identity otherwise (Keras GaussianDropout)",
             .params = {{RateParam("the dropout rate it stands for")}},
             .create = CreateNoise<Noise::kMultiplicative>});
MT_REGISTER(LayerType,
            {.name = "alpha_dropout",
             .doc = "while training, sets dropped elements to selu's "
                    "saturation and keeps the mean and variance (Keras "
                    "AlphaDropout, for selu networks); the identity otherwise",
             .params = {{RateParam("the probability of dropping an element")}},
             .create = CreateNoise<Noise::kAlpha>});

}  // namespace mirrortrain::models
