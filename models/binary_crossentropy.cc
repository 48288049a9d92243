// binary_crossentropy (losses.h): one logit per 0/1 label.
#include "absl/strings/str_cat.h"
#include "models/losses.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/registry.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// Logits shaped as the labels (or [b, 1] for labels [b]): one per label;
// labels integers, and (where they are on the host: the trainer's data
// sources check theirs when they load) each 0 or 1.
absl::Status CheckOneLogitPerLabel(const Tensor& logits, const Tensor& labels) {
  MT_RETURN_IF_ERROR(CheckOneOutputPerLabel("binary_crossentropy", logits,
                                            labels, "logit", "label"));
  if (labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("binary_crossentropy takes integer labels (0 or 1), got ",
                     DTypeName(labels.dtype())));
  }
  if (labels.device().is_cuda()) return absl::OkStatus();
  for (int64_t i = 0; i < labels.num_elements(); ++i) {
    if (const int64_t v = ops::internal::IndexAt(labels, i); v != 0 && v != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("binary_crossentropy takes labels 0 and 1, got ", v,
                       " at index ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> BinaryCrossentropy(const Tensor& logits,
                                          const Tensor& labels,
                                          int64_t global_labels,
                                          double label_smoothing,
                                          const Tensor& weights) {
  MT_RETURN_IF_ERROR(CheckGlobalLabels(global_labels));
  if (!(label_smoothing >= 0 && label_smoothing <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label smoothing must be in [0, 1], got ", label_smoothing));
  }
  MT_RETURN_IF_ERROR(CheckOneLogitPerLabel(logits, labels));
  const int64_t n = labels.num_elements();
  MT_ASSIGN_OR_RETURN(const Tensor x, ops::Reshape(logits, {n}));
  MT_ASSIGN_OR_RETURN(Tensor flat_labels, ops::Reshape(labels, {n}));
  MT_ASSIGN_OR_RETURN(const Tensor y, ops::Cast(flat_labels, logits.dtype()));
  // log(1 + e^x) - x y' is y' log(1 + e^-x) + (1 - y') log(1 + e^x): two
  // terms >= 0, so a confident logit loses no digits to the cancellation
  // of the first form, and the gradient sigmoid(x) - y' is smooth at 0.
  // Targets y' = y (1 - e) + e / 2 and 1 - y' = (1 - y) (1 - e) + e / 2
  // (exactly y and 1 - y without smoothing).
  const double keep = 1 - label_smoothing, half = label_smoothing / 2;
  MT_ASSIGN_OR_RETURN(Tensor on, ops::Scale(y, keep));
  MT_ASSIGN_OR_RETURN(Tensor half_e, ops::internal::ScalarLike(y, half));
  MT_ASSIGN_OR_RETURN(on, ops::Add(on, half_e));
  MT_ASSIGN_OR_RETURN(Tensor off, ops::Scale(y, -keep));
  MT_ASSIGN_OR_RETURN(Tensor rest, ops::internal::ScalarLike(y, 1 - half));
  MT_ASSIGN_OR_RETURN(off, ops::Add(off, rest));
  MT_ASSIGN_OR_RETURN(const Tensor neg_x, ops::Neg(x));
  MT_ASSIGN_OR_RETURN(const Tensor if_one, ops::Softplus(neg_x));
  MT_ASSIGN_OR_RETURN(const Tensor if_zero, ops::Softplus(x));
  MT_ASSIGN_OR_RETURN(Tensor per_label, ops::Mul(on, if_one));
  MT_ASSIGN_OR_RETURN(Tensor zero_part, ops::Mul(off, if_zero));
  MT_ASSIGN_OR_RETURN(per_label, ops::Add(per_label, zero_part));
  MT_ASSIGN_OR_RETURN(const Tensor sum, WeightedSum(per_label, weights));
  return ops::Scale(sum, 1.0 / static_cast<double>(global_labels));
}

absl::StatusOr<double> CountCorrectBinary(const Tensor& logits,
                                          const Tensor& labels,
                                          const Tensor& weights) {
  MT_RETURN_IF_ERROR(CheckOneLogitPerLabel(logits, labels));
  MT_ASSIGN_OR_RETURN(const Tensor host_logits, logits.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const Tensor host_labels, labels.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const std::vector<double> w,
                      LabelWeights(weights, host_labels.num_elements()));
  double correct = 0;
  for (int64_t i = 0; i < host_labels.num_elements(); ++i) {
    const bool one = host_logits.ScalarAt(i) > 0;
    if (one != (ops::internal::IndexAt(host_labels, i) == 1)) continue;
    correct += w[static_cast<size_t>(i)];
  }
  return correct;
}

MT_REGISTER(
    LossType,
    {.name = "binary_crossentropy",
     .doc = "Keras's BinaryCrossentropy(from_logits=True): one logit per "
            "label, each 0 or 1; labels [n] take a last dense layer of 1 "
            "unit, labels [n, k] (multi-label) one of k; accuracy counts "
            "labels whose logit is on their side of 0 (Keras's "
            "BinaryAccuracy of the probabilities)",
     .output_activation = "sigmoid",
     .params = {{LabelSmoothingParam(
         "y * (1 - e) + e / 2 (Keras's BinaryCrossentropy label_smoothing)")}},
     .output_shape = [](const Shape& labels,
                        int64_t classes) -> absl::StatusOr<Shape> {
       if (classes < 1) return RealLabelsRefused("binary_crossentropy");
       if (classes > 2) {
         return absl::InvalidArgumentError(absl::StrCat(
             "binary_crossentropy takes labels 0 and 1, but the data has ",
             classes,
             " classes (sparse_categorical_crossentropy reads one "
             "label of many classes)"));
       }
       return labels.empty() ? Shape{1} : labels;
     },
     .compute =
         [](const Tensor& logits, const Tensor& labels, const Tensor& weights,
            int64_t global_labels, const Params& params) {
           return BinaryCrossentropy(logits, labels, global_labels,
                                     LabelSmoothingOf(params), weights);
         },
     .metric_sum = CountCorrectBinary});

}  // namespace mirrortrain::models
