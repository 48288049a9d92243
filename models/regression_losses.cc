// The regression losses (losses.h): mean_squared_error,
// mean_absolute_error, huber, log_cosh; one output per real-valued target.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/losses.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/registry.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// logits - labels, flat: one output per target (logits [b, 1] for labels
// [b]), the labels cast to the logits' dtype.
absl::StatusOr<Tensor> Differences(const char* loss, const Tensor& logits,
                                   const Tensor& labels,
                                   int64_t global_labels) {
  MT_RETURN_IF_ERROR(CheckGlobalLabels(global_labels));
  MT_RETURN_IF_ERROR(
      CheckOneOutputPerLabel(loss, logits, labels, "output", "target"));
  const int64_t n = labels.num_elements();
  MT_ASSIGN_OR_RETURN(const Tensor x, ops::Reshape(logits, {n}));
  MT_ASSIGN_OR_RETURN(Tensor y, ops::Reshape(labels, {n}));
  if (y.dtype() != x.dtype()) {
    MT_ASSIGN_OR_RETURN(y, ops::Cast(y, x.dtype()));
  }
  return ops::Sub(x, y);
}

absl::StatusOr<Tensor> MeanOfSum(const Tensor& per_target,
                                 int64_t global_labels, const Tensor& weights) {
  MT_ASSIGN_OR_RETURN(const Tensor sum, WeightedSum(per_target, weights));
  return ops::Scale(sum, 1.0 / static_cast<double>(global_labels));
}

// What every regression loss shares: one output per target, no output
// activation, the mean absolute error reported beside the loss.
LossType RegressionLoss(std::string name, std::string doc,
                        decltype(LossType::compute) compute,
                        ParamSchema params = {}) {
  return {.name = std::move(name),
          .doc = std::move(doc),
          .output_activation = "",
          .params = std::move(params),
          .output_shape = [](const Shape& labels,
                             int64_t) -> absl::StatusOr<Shape> {
            return labels.empty() ? Shape{1} : labels;
          },
          .compute = std::move(compute),
          .metric = "mean_absolute_error",
          .metric_sum = SumAbsoluteError};
}

// A regression loss without keys of its own.
using KeylessLoss = absl::StatusOr<Tensor> (*)(const Tensor& logits,
                                               const Tensor& labels,
                                               int64_t global_labels,
                                               const Tensor& weights);
LossType RegressionLoss(std::string name, std::string doc, KeylessLoss loss) {
  return RegressionLoss(
      std::move(name), std::move(doc),
      [loss](const Tensor& logits, const Tensor& labels, const Tensor& weights,
             int64_t global_labels, const Params&) {
        return loss(logits, labels, global_labels, weights);
      });
}

}  // namespace

absl::StatusOr<Tensor> MeanSquaredError(const Tensor& logits,
                                        const Tensor& labels,
                                        int64_t global_labels,
                                        const Tensor& weights) {
  MT_ASSIGN_OR_RETURN(const Tensor d, Differences("mean_squared_error", logits,
                                                  labels, global_labels));
  MT_ASSIGN_OR_RETURN(const Tensor squared, ops::Square(d));
  return MeanOfSum(squared, global_labels, weights);
}

absl::StatusOr<Tensor> MeanAbsoluteError(const Tensor& logits,
                                         const Tensor& labels,
                                         int64_t global_labels,
                                         const Tensor& weights) {
  MT_ASSIGN_OR_RETURN(const Tensor d, Differences("mean_absolute_error", logits,
                                                  labels, global_labels));
  // |d| as relu(d) + relu(-d): its gradient at 0 is 0, TensorFlow's sign(0).
  MT_ASSIGN_OR_RETURN(const Tensor above, ops::Relu(d));
  MT_ASSIGN_OR_RETURN(const Tensor neg, ops::Neg(d));
  MT_ASSIGN_OR_RETURN(const Tensor below, ops::Relu(neg));
  MT_ASSIGN_OR_RETURN(const Tensor absolute, ops::Add(above, below));
  return MeanOfSum(absolute, global_labels, weights);
}

absl::StatusOr<Tensor> Huber(const Tensor& logits, const Tensor& labels,
                             int64_t global_labels, double delta,
                             const Tensor& weights) {
  if (!(delta > 0 && std::isfinite(delta))) {
    return absl::InvalidArgumentError(
        absl::StrCat("huber: delta must be > 0 and finite, got ", delta));
  }
  MT_ASSIGN_OR_RETURN(const Tensor d,
                      Differences("huber", logits, labels, global_labels));
  // With c = clip(d, -delta, delta): c d - c^2 / 2 is d^2 / 2 inside and
  // delta |d| - delta^2 / 2 outside, the same roundings as Keras's two
  // branches; its gradient c + c' (d - c) is d inside and delta sign(d)
  // outside (delta at the edge from both sides).
  MT_ASSIGN_OR_RETURN(const Tensor c, ops::ClipByValue(d, -delta, delta));
  MT_ASSIGN_OR_RETURN(const Tensor cd, ops::Mul(c, d));
  MT_ASSIGN_OR_RETURN(const Tensor c2, ops::Square(c));
  MT_ASSIGN_OR_RETURN(const Tensor half_c2, ops::Scale(c2, 0.5));
  MT_ASSIGN_OR_RETURN(const Tensor per_target, ops::Sub(cd, half_c2));
  return MeanOfSum(per_target, global_labels, weights);
}

absl::StatusOr<Tensor> LogCosh(const Tensor& logits, const Tensor& labels,
                               int64_t global_labels, const Tensor& weights) {
  MT_ASSIGN_OR_RETURN(const Tensor d,
                      Differences("log_cosh", logits, labels, global_labels));
  // Keras's form: no overflow of cosh for large |d| (log cosh d -> |d| -
  // log 2), and the same roundings.
  MT_ASSIGN_OR_RETURN(const Tensor minus_2d, ops::Scale(d, -2.0));
  MT_ASSIGN_OR_RETURN(const Tensor soft, ops::Softplus(minus_2d));
  MT_ASSIGN_OR_RETURN(const Tensor sum, ops::Add(d, soft));
  MT_ASSIGN_OR_RETURN(const Tensor log2,
                      ops::internal::ScalarLike(sum, std::log(2.0)));
  MT_ASSIGN_OR_RETURN(const Tensor per_target, ops::Sub(sum, log2));
  return MeanOfSum(per_target, global_labels, weights);
}

absl::StatusOr<double> SumAbsoluteError(const Tensor& logits,
                                        const Tensor& labels,
                                        const Tensor& weights) {
  if (logits.num_elements() != labels.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SumAbsoluteError: outputs ", ShapeToString(logits.shape()),
        " for targets ", ShapeToString(labels.shape())));
  }
  MT_ASSIGN_OR_RETURN(const Tensor x, logits.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const Tensor y, labels.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const std::vector<double> w,
                      LabelWeights(weights, y.num_elements()));
  double sum = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    // Weighted as Keras weighs (values * sample_weight), as the losses do.
    sum += w[static_cast<size_t>(i)] * std::abs(x.ScalarAt(i) - y.ScalarAt(i));
  }
  return sum;
}

// `params` hold each loss's own keys, checked against its schema already.
MT_REGISTER(
    LossType,
    (RegressionLoss("mean_squared_error",
                    "Keras's MeanSquaredError: (output - target)^2 for each "
                    "real-valued target (integer labels are cast), one output "
                    "per target; evaluation reports the mean absolute error "
                    "beside it",
                    MeanSquaredError)));

MT_REGISTER(
    LossType,
    (RegressionLoss("mean_absolute_error",
                    "Keras's MeanAbsoluteError: |output - target| for each "
                    "real-valued target (integer labels are cast), one output "
                    "per target; evaluation reports it as mean_absolute_error "
                    "too",
                    MeanAbsoluteError)));

MT_REGISTER(LossType,
            (RegressionLoss(
                "huber",
                "Keras's Huber(delta): (output - target)^2 / 2 within delta "
                "of the target, delta (|output - target| - delta / 2) "
                "beyond (squared error's gradient near the target, absolute "
                "error's far from it: outliers pull no harder than delta); "
                "one output per real-valued target; evaluation reports the "
                "mean absolute error beside it",
                [](const Tensor& logits, const Tensor& labels,
                   const Tensor& weights, int64_t global_labels,
                   const Params& params) {
                  return Huber(logits, labels, global_labels,
                               params.Float("delta"), weights);
                },
                {{Param::Float("delta")
                      .Default(1.0)
                      .Min(0, /*inclusive=*/false)
                      .InFloat32()
                      .Doc("where the loss turns from quadratic to linear "
                           "(Keras's delta)")}})));

MT_REGISTER(LossType,
            (RegressionLoss(
                "log_cosh",
                "Keras's LogCosh: log(cosh(output - target)), about half "
                "the squared error near the target and the absolute error "
                "less log 2 far from it (smooth everywhere); one output per "
                "real-valued target; evaluation reports the mean absolute "
                "error beside it",
                LogCosh)));

}  // namespace mirrortrain::models
