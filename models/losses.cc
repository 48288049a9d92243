#include "models/losses.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/registry.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

struct FlatLabels {
  Tensor logits;  // [labels, classes]
  Tensor labels;  // [labels]
};

// Sequence logits [b, T, classes] and labels [b, T] as one row per label
// (Reshape is differentiable); rank-2 logits and rank-1 labels as they are.
absl::StatusOr<FlatLabels> Flatten(const Tensor& logits, const Tensor& labels) {
  if (logits.rank() <= 2) return FlatLabels{logits, labels};
  if (labels.rank() != logits.rank() - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits ", ShapeToString(logits.shape()), " and labels ",
                     ShapeToString(labels.shape()), " differ in rank by ",
                     logits.rank() - labels.rank(), ", not 1"));
  }
  const int64_t classes = logits.dim(logits.rank() - 1);
  const int64_t n = labels.num_elements();
  FlatLabels flat;
  MT_ASSIGN_OR_RETURN(flat.logits, ops::Reshape(logits, {n, classes}));
  MT_ASSIGN_OR_RETURN(flat.labels, ops::Reshape(labels, {n}));
  return flat;
}

}  // namespace

absl::StatusOr<Tensor> WeightedSum(const Tensor& per_label,
                                   const Tensor& weights) {
  if (!weights.defined()) return ops::ReduceSum(per_label);
  const int64_t n = per_label.num_elements(), m = weights.num_elements();
  if (m == 0 || n % m != 0) {
    if (n == 0) return ops::ReduceSum(per_label);
    return absl::InvalidArgumentError(
        absl::StrCat("label weights ", ShapeToString(weights.shape()),
                     " do not divide ", n, " labels"));
  }
  MT_ASSIGN_OR_RETURN(const Tensor values, ops::Reshape(per_label, {m, n / m}));
  MT_ASSIGN_OR_RETURN(Tensor w, ops::Reshape(weights, {m, 1}));
  if (w.dtype() != values.dtype()) {
    MT_ASSIGN_OR_RETURN(w, ops::Cast(w, values.dtype()));
  }
  if (w.device() != values.device()) {
    MT_ASSIGN_OR_RETURN(w, w.To(values.device()));
  }
  MT_ASSIGN_OR_RETURN(const Tensor weighted, ops::Mul(values, w));
  return ops::ReduceSum(weighted);
}

absl::StatusOr<std::vector<double>> LabelWeights(const Tensor& weights,
                                                 int64_t labels) {
  if (!weights.defined()) return std::vector<double>(labels, 1.0);
  const int64_t m = weights.num_elements();
  if (m == 0 ? labels != 0 : labels % m != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("label weights ", ShapeToString(weights.shape()),
                     " do not divide ", labels, " labels"));
  }
  MT_ASSIGN_OR_RETURN(const Tensor host, weights.To(Device::Cpu()));
  std::vector<double> out(static_cast<size_t>(labels));
  const int64_t per = m == 0 ? 1 : labels / m;
  for (int64_t i = 0; i < labels; ++i) {
    out[static_cast<size_t>(i)] = host.ScalarAt(i / per);
  }
  return out;
}

absl::StatusOr<Tensor> SparseCategoricalCrossentropy(const Tensor& logits,
                                                     const Tensor& labels,
                                                     int64_t global_batch_size,
                                                     double label_smoothing,
                                                     const Tensor& weights) {
  MT_RETURN_IF_ERROR(CheckGlobalLabels(global_batch_size));
  if (!(label_smoothing >= 0 && label_smoothing <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label smoothing must be in [0, 1], got ", label_smoothing));
  }
  MT_ASSIGN_OR_RETURN(const FlatLabels flat, Flatten(logits, labels));
  MT_ASSIGN_OR_RETURN(
      Tensor per_example,
      ops::SparseSoftmaxCrossEntropyWithLogits(flat.logits, flat.labels));
  MT_ASSIGN_OR_RETURN(Tensor sum, WeightedSum(per_example, weights));
  if (label_smoothing > 0) {
    // Only the batch's sum is needed: the uniform part is a sum of every
    // log-probability, each row's first (fewer terms in any one running
    // sum: an evaluation batch of text holds 8192 x 256).
    const double classes = static_cast<double>(flat.logits.dim(1));
    MT_ASSIGN_OR_RETURN(Tensor log_probs, ops::LogSoftmax(flat.logits));
    MT_ASSIGN_OR_RETURN(Tensor rows, ops::ReduceSum(log_probs, {1}));
    MT_ASSIGN_OR_RETURN(Tensor uniform, WeightedSum(rows, weights));
    MT_ASSIGN_OR_RETURN(sum, ops::Scale(sum, 1 - label_smoothing));
    MT_ASSIGN_OR_RETURN(uniform,
                        ops::Scale(uniform, -label_smoothing / classes));
    MT_ASSIGN_OR_RETURN(sum, ops::Add(sum, uniform));
  }
  return ops::Scale(sum, 1.0 / static_cast<double>(global_batch_size));
}

absl::StatusOr<double> CountCorrect(const Tensor& logits, const Tensor& labels,
                                    const Tensor& weights) {
  MT_ASSIGN_OR_RETURN(const FlatLabels flat, Flatten(logits, labels));
  MT_ASSIGN_OR_RETURN(Tensor predicted, ops::ArgMax(flat.logits, -1));
  if (predicted.num_elements() != labels.num_elements()) {
    return absl::InvalidArgumentError("CountCorrect: batch sizes differ");
  }
  // The count is read on the host: GPU predictions and labels (one int per
  // row) are copied over.
  MT_ASSIGN_OR_RETURN(Tensor host_predicted, predicted.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(Tensor host_labels, flat.labels.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const std::vector<double> w,
                      LabelWeights(weights, host_labels.num_elements()));
  double correct = 0;
  const int64_t* p = host_predicted.data<int64_t>();
  for (int64_t i = 0; i < host_labels.num_elements(); ++i) {
    if (p[i] != ops::internal::IndexAt(host_labels, i)) continue;
    correct += w[static_cast<size_t>(i)];
  }
  return correct;
}

absl::Status CheckOneOutputPerLabel(const std::string& loss,
                                    const Tensor& logits, const Tensor& labels,
                                    const std::string& output,
                                    const std::string& label) {
  if (logits.rank() >= 1 && labels.rank() >= 1 &&
      logits.dim(0) == labels.dim(0) &&
      logits.num_elements() == labels.num_elements()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(loss, " takes one ", output, " per ", label, ", got ",
                   output, "s ", ShapeToString(logits.shape()), " for ", label,
                   "s ", ShapeToString(labels.shape())));
}

absl::Status CheckGlobalLabels(int64_t global_labels) {
  if (global_labels > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the global batch's count of labels must be > 0, got ", global_labels));
}

absl::Status RealLabelsRefused(const std::string& loss) {
  // The regression losses: those without an output activation.
  std::vector<std::string> regression;
  for (const LossType* l : LossRegistry::Global().Entries()) {
    if (l->output_activation.empty()) regression.push_back(l->name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      loss,
      " takes class labels (integers), but the data's labels are real "
      "values (a float y: class labels stored as floats want "
      "y.astype(np.int64), one-hot rows y.argmax(-1); regression targets "
      "want a regression loss: loss.name ",
      absl::StrJoin(regression, ", "), ")"));
}

Param LabelSmoothingParam(const std::string& targets) {
  return Param::Float(kLabelSmoothing)
      .Default(0.0)
      .Min(0)
      .Max(1)
      .Doc(absl::StrCat("e: each label's target is ", targets,
                        "; the loss both splits log is this objective, the "
                        "metrics are not smoothed"));
}

double LabelSmoothingOf(const Params& params) {
  return params.Has(kLabelSmoothing) ? params.Float(kLabelSmoothing) : 0.0;
}

absl::StatusOr<const LossType*> FindLoss(const std::string& name) {
  if (const LossType* loss = LossRegistry::Global().Find(name)) return loss;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown loss '", name, "' (expected one of ",
                   LossRegistry::Global().NameList(), ")"));
}

Params DefaultLossParams(const std::string& name) {
  const LossType* loss = LossRegistry::Global().Find(name);
  return loss != nullptr ? Params::Defaults(loss->params) : Params();
}

MT_REGISTER(
    LossType,
    {.name = "sparse_categorical_crossentropy",
     .doc = "Keras's SparseCategoricalCrossentropy(from_logits=True): one "
            "logit per class for each integer label (an example's, or each "
            "token's of a sequence)",
     .output_activation = "softmax",
     .params = {{LabelSmoothingParam(
         "one-hot * (1 - e) + e / classes (Keras's CategoricalCrossentropy "
         "label_smoothing, PyTorch's CrossEntropyLoss)")}},
     .output_shape = [](const Shape& labels,
                        int64_t classes) -> absl::StatusOr<Shape> {
       if (classes < 1) return RealLabelsRefused(kDefaultLoss);
       Shape out = labels;
       out.push_back(classes);
       return out;
     },
     .compute =
         [](const Tensor& logits, const Tensor& labels, const Tensor& weights,
            int64_t global_labels, const Params& params) {
           return SparseCategoricalCrossentropy(logits, labels, global_labels,
                                                LabelSmoothingOf(params),
                                                weights);
         },
     .metric_sum = CountCorrect});

}  // namespace mirrortrain::models
