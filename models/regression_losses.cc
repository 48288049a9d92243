// mean_squared_error and mean_absolute_error (losses.h): one output per
// real-valued target.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/losses.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/registry.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// logits - labels, flat: one output per target (logits [b, 1] for labels
// [b]), the labels cast to the logits' dtype.
absl::StatusOr<Tensor> Differences(const char* loss, const Tensor& logits,
                                   const Tensor& labels, int64_t global_labels,
                                   double label_smoothing) {
  if (global_labels <= 0) {
    return absl::InvalidArgumentError("global label count must be > 0");
  }
  if (label_smoothing != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(loss, " takes no label smoothing, got ", label_smoothing));
  }
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
                                 int64_t global_labels) {
  MT_ASSIGN_OR_RETURN(const Tensor sum, ops::ReduceSum(per_target));
  return ops::Scale(sum, 1.0 / static_cast<double>(global_labels));
}

absl::StatusOr<Shape> OneOutputPerTarget(const Shape& labels, int64_t) {
  return labels.empty() ? Shape{1} : labels;
}

}  // namespace

absl::StatusOr<Tensor> MeanSquaredError(const Tensor& logits,
                                        const Tensor& labels,
                                        int64_t global_labels,
                                        double label_smoothing) {
  MT_ASSIGN_OR_RETURN(const Tensor d,
                      Differences("mean_squared_error", logits, labels,
                                  global_labels, label_smoothing));
  MT_ASSIGN_OR_RETURN(const Tensor squared, ops::Square(d));
  return MeanOfSum(squared, global_labels);
}

absl::StatusOr<Tensor> MeanAbsoluteError(const Tensor& logits,
                                         const Tensor& labels,
                                         int64_t global_labels,
                                         double label_smoothing) {
  MT_ASSIGN_OR_RETURN(const Tensor d,
                      Differences("mean_absolute_error", logits, labels,
                                  global_labels, label_smoothing));
  // |d| as relu(d) + relu(-d): its gradient at 0 is 0, TensorFlow's sign(0).
  MT_ASSIGN_OR_RETURN(const Tensor above, ops::Relu(d));
  MT_ASSIGN_OR_RETURN(const Tensor neg, ops::Neg(d));
  MT_ASSIGN_OR_RETURN(const Tensor below, ops::Relu(neg));
  MT_ASSIGN_OR_RETURN(const Tensor absolute, ops::Add(above, below));
  return MeanOfSum(absolute, global_labels);
}

absl::StatusOr<double> SumAbsoluteError(const Tensor& logits,
                                        const Tensor& labels) {
  if (logits.num_elements() != labels.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SumAbsoluteError: outputs ", ShapeToString(logits.shape()),
        " for targets ", ShapeToString(labels.shape())));
  }
  MT_ASSIGN_OR_RETURN(const Tensor x, logits.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const Tensor y, labels.To(Device::Cpu()));
  double sum = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    sum += std::abs(x.ScalarAt(i) - y.ScalarAt(i));
  }
  return sum;
}

MT_REGISTER(LossType,
            {.name = "mean_squared_error",
             .doc = "Keras's MeanSquaredError: (output - target)^2 for each "
                    "real-valued target (integer labels are cast), one "
                    "output per target; evaluation reports the mean "
                    "absolute error beside it",
             .output_activation = "",
             .output_shape = OneOutputPerTarget,
             .compute = MeanSquaredError,
             .metric = "mean_absolute_error",
             .metric_sum = SumAbsoluteError,
             .smooths = false});

MT_REGISTER(LossType,
            {.name = "mean_absolute_error",
             .doc = "Keras's MeanAbsoluteError: |output - target| for each "
                    "real-valued target (integer labels are cast), one "
                    "output per target; evaluation reports it as "
                    "mean_absolute_error too",
             .output_activation = "",
             .output_shape = OneOutputPerTarget,
             .compute = MeanAbsoluteError,
             .metric = "mean_absolute_error",
             .metric_sum = SumAbsoluteError,
             .smooths = false});

}  // namespace mirrortrain::models
