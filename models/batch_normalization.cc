// BatchNormalization (config type `batch_normalization`), Keras semantics
// over the last axis: training normalises with the batch's mean and
// variance and moves moving_mean/moving_variance towards them by
// `momentum`; inference uses the moving ones.
//
// The statistics are the sufficient statistics of Keras's synchronized
// moments: mean = sum / n, variance = max(sum_sq / n - mean^2, 0). With
// `synchronized: true` the sums and n are those of the global batch (one
// all-reduce of the sums forward, one of their gradients backward), so
// every replica normalises with the same numbers and the result does not
// depend on the number of replicas. Without it each replica uses its own
// shard, and the moving statistics move towards the mean over the
// replicas of their shard statistics (what Keras 2's ON_READ MEAN variables
// read), which keeps them identical on every replica. Over a masked input
// (Keras masking) the statistics are Keras's masked moments, of the
// unmasked steps only (MaskedCall).
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "models/normalization_params.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/collective_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/normalization_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// keras.backend.epsilon(): what Keras adds to a masked count.
constexpr double kKerasEpsilon = 1e-7;

struct BatchNormOptions {
  double momentum, epsilon;
  bool center, scale, synchronized;
};

class BatchNormalizationLayer final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Layer>> Create(
      std::string name, int64_t channels, const BatchNormOptions& options,
      Device device) {
    // Keras's order: gamma, beta, moving_mean, moving_variance.
    MT_ASSIGN_OR_RETURN(
        NormalizationParams params,
        NormalizationParams::Create(name, channels, options.scale,
                                    options.center, device));
    MT_ASSIGN_OR_RETURN(Variable moving_mean,
                        ChannelVariable(name, "moving_mean", channels, 0,
                                        /*trainable=*/false, device));
    MT_ASSIGN_OR_RETURN(Variable moving_variance,
                        ChannelVariable(name, "moving_variance", channels, 1,
                                        /*trainable=*/false, device));
    return std::unique_ptr<Layer>(new BatchNormalizationLayer(
        std::move(name), options, std::move(params), std::move(moving_mean),
        std::move(moving_variance)));
  }

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    const Tensor& scale = params_.gamma();
    const Tensor& offset = params_.beta();
    if (!ctx.training || frozen()) {
      return ops::BatchNormalization(x, moving_mean_.value(),
                                     moving_variance_.value(), offset, scale,
                                     options_.epsilon);
    }
    const bool sync = options_.synchronized && ctx.all_reduce_sum != nullptr;
    if (ctx.mask.defined()) return MaskedCall(x, ctx, sync);
    MT_ASSIGN_OR_RETURN(ops::ChannelSumsResult sums, ops::ChannelSums(x));
    // Elements per channel in one row of the batch (h * w for images).
    int64_t per_row = 1;
    for (int i = 1; i + 1 < x.rank(); ++i) per_row *= x.dim(i);
    int64_t count = x.dim(0) * per_row;
    if (sync) {
      // Every replica knows the global batch, so only the sums travel.
      if (ctx.global_batch <= 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(name(),
                         ": synchronized statistics need the global batch size "
                         "(ForwardContext::global_batch)"));
      }
      MT_ASSIGN_OR_RETURN(
          std::vector<Tensor> global,
          ops::CrossReplicaSum({sums.sum, sums.sum_sq}, *ctx.all_reduce_sum));
      sums = {global[0], global[1]};
      count = ctx.global_batch * per_row;
    }
    // mean = sum / n, variance = max(sum_sq / n - mean^2, 0) (0 for a shard
    // of no rows, which has no output), from float64 sums in double: in
    // float32, E[x^2] - E[x]^2 would lose the variance of inputs whose mean
    // is large against their spread, which Keras's two-pass moments keep.
    MT_ASSIGN_OR_RETURN(ops::MomentsResult moments,
                        ops::MomentsFromSums(sums, count, x.dtype()));
    const Tensor& mean = moments.mean;
    const Tensor& variance = moments.variance;
    MT_ASSIGN_OR_RETURN(
        Tensor y, ops::BatchNormalization(x, mean, variance, offset, scale,
                                          options_.epsilon));
    MT_RETURN_IF_ERROR(UpdateMovingStatistics(
        mean, variance, count > 0, sync ? nullptr : ctx.all_reduce_sum));
    return y;
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return NormalizedOutputShape(name(), input, moving_mean_.shape()[0]);
  }

  // Keras's: the mask passes on, and weighs the batch statistics.
  bool SupportsMasking() const override { return true; }

  std::vector<Variable*> variables() override {
    std::vector<Variable*> out;
    params_.AppendVariables(out);
    out.push_back(&moving_mean_);
    out.push_back(&moving_variance_);
    return out;
  }

 private:
  BatchNormalizationLayer(std::string name, const BatchNormOptions& options,
                          NormalizationParams params, Variable moving_mean,
                          Variable moving_variance)
      : Layer(std::move(name)),
        options_(options),
        params_(std::move(params)),
        moving_mean_(std::move(moving_mean)),
        moving_variance_(std::move(moving_variance)) {}

  // A training step over a masked input: Keras's masked moments
  // (BatchNormalization._moments with a mask), the unmasked elements' mean
  // and then their squared deviations' mean, each divided by their count
  // + 1e-7 (Keras's epsilon) in the input's dtype. Synchronized, the sums
  // and the count are the global batch's (Keras ignores synchronized under
  // a mask: each replica's own); else each replica's, the moving
  // statistics averaged over the replicas as unmasked.
  absl::StatusOr<Tensor> MaskedCall(const Tensor& x, const ForwardContext& ctx,
                                    bool sync) {
    MT_RETURN_IF_ERROR(CheckMask(x, ctx.mask, name()));
    std::vector<int> axes(static_cast<size_t>(x.rank() - 1));
    std::iota(axes.begin(), axes.end(), 0);
    MT_ASSIGN_OR_RETURN(const Tensor weights, MaskOverFeatures(ctx.mask, x));
    MT_ASSIGN_OR_RETURN(const Tensor kept, ops::Mul(x, weights));
    MT_ASSIGN_OR_RETURN(Tensor sum, ops::ReduceSum(kept, axes));
    MT_ASSIGN_OR_RETURN(Tensor count, ops::ReduceSum(ctx.mask));
    MT_ASSIGN_OR_RETURN(count, ops::Reshape(count, {1}));
    if (count.dtype() != x.dtype()) {
      MT_ASSIGN_OR_RETURN(count, ops::Cast(count, x.dtype()));
    }
    if (sync) {
      MT_ASSIGN_OR_RETURN(
          std::vector<Tensor> global,
          ops::CrossReplicaSum({sum, count}, *ctx.all_reduce_sum));
      sum = global[0];
      count = global[1];
    }
    MT_ASSIGN_OR_RETURN(const Tensor epsilon,
                        ops::internal::ScalarLike(count, kKerasEpsilon));
    MT_ASSIGN_OR_RETURN(const Tensor denominator, ops::Add(count, epsilon));
    MT_ASSIGN_OR_RETURN(const Tensor mean, ops::Div(sum, denominator));
    MT_ASSIGN_OR_RETURN(Tensor deviation, ops::Sub(x, mean));
    MT_ASSIGN_OR_RETURN(deviation, ops::Mul(deviation, weights));
    MT_ASSIGN_OR_RETURN(const Tensor squared, ops::Square(deviation));
    MT_ASSIGN_OR_RETURN(Tensor sum_sq, ops::ReduceSum(squared, axes));
    if (sync) {
      MT_ASSIGN_OR_RETURN(std::vector<Tensor> global,
                          ops::CrossReplicaSum({sum_sq}, *ctx.all_reduce_sum));
      sum_sq = global[0];
    }
    MT_ASSIGN_OR_RETURN(const Tensor variance, ops::Div(sum_sq, denominator));
    MT_ASSIGN_OR_RETURN(
        Tensor y, ops::BatchNormalization(x, mean, variance, params_.beta(),
                                          params_.gamma(), options_.epsilon));
    MT_RETURN_IF_ERROR(UpdateMovingStatistics(
        mean, variance, x.dim(0) > 0, sync ? nullptr : ctx.all_reduce_sum));
    return y;
  }

  // moving = moving * momentum + batch * (1 - momentum), Keras's update.
  // `average` (unsynchronized replicas) first replaces the batch
  // statistics by their mean over the replicas that had rows.
  absl::Status UpdateMovingStatistics(const Tensor& mean,
                                      const Tensor& variance, bool has_rows,
                                      const ops::AllReduceSumFn* average) {
    // Not part of the model's function: no gradient flows through it.
    MT_ASSIGN_OR_RETURN(Tensor m, ops::StopGradient(mean));
    MT_ASSIGN_OR_RETURN(Tensor v, ops::StopGradient(variance));
    if (average != nullptr) {
      MT_ASSIGN_OR_RETURN(
          Tensor one, ops::Fill(m.dtype(), {1}, has_rows ? 1 : 0, m.device()));
      MT_ASSIGN_OR_RETURN(Tensor packed, ops::Concat({m, v, one}, 0));
      Tensor parts[] = {packed};
      MT_RETURN_IF_ERROR((*average)(absl::MakeSpan(parts)));
      // Divided on the device: no host synchronisation. Some replica has
      // rows in a training step, so the count is at least 1.
      const int64_t c = m.num_elements();
      MT_ASSIGN_OR_RETURN(Tensor replicas, packed.SliceRows(2 * c, 1));
      MT_ASSIGN_OR_RETURN(packed, ops::Div(packed, replicas));
      MT_ASSIGN_OR_RETURN(m, packed.SliceRows(0, c));
      MT_ASSIGN_OR_RETURN(v, packed.SliceRows(c, c));
    }
    MT_RETURN_IF_ERROR(MoveTowards(moving_mean_, m));
    return MoveTowards(moving_variance_, v);
  }

  absl::Status MoveTowards(Variable& moving, const Tensor& batch) {
    MT_ASSIGN_OR_RETURN(Tensor kept,
                        ops::Scale(moving.value(), options_.momentum));
    MT_ASSIGN_OR_RETURN(Tensor moved,
                        ops::Scale(batch, 1.0 - options_.momentum));
    MT_ASSIGN_OR_RETURN(Tensor next, ops::Add(kept, moved));
    return moving.Assign(next);
  }

  BatchNormOptions options_;
  NormalizationParams params_;
  Variable moving_mean_, moving_variance_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "batch_normalization",
     .doc = "normalises each channel (last axis) with the batch's statistics "
            "while training and the moving ones otherwise (Keras "
            "BatchNormalization)",
     .params =
         {{Param::Float("momentum")
               .Default(0.99)
               .Min(0)
               .Max(1)
               .Doc("moving statistics: moving * momentum + batch * (1 - "
                    "momentum)"),
           Param::Float("epsilon").Default(0.001).Min(0, false).InFloat32().Doc(
               "added to the variance"),
           Param::Bool("center").Default(true).Doc("learn an offset (beta)"),
           Param::Bool("scale").Default(true).Doc("learn a scale (gamma)"),
           Param::Bool("synchronized")
               .Default(false)
               .Doc("statistics over the global batch of all replicas, not "
                    "each replica's shard")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_ASSIGN_OR_RETURN(const int64_t channels,
                           NormalizedAxis(b.input_shape(), "channels"));
       const Params& p = spec.params;
       return BatchNormalizationLayer::Create(
           b.name(), channels,
           {p.Float("momentum"), p.Float("epsilon"), p.Bool("center"),
            p.Bool("scale"), p.Bool("synchronized")},
           b.device());
     }});

}  // namespace mirrortrain::models
