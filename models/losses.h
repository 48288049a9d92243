// Losses scaled for synchronous data parallelism, selectable by name
// (config `loss.name`).
//
// Each loss is a LossType registered next to its code (MT_REGISTER, as
// layers are): a new loss is one file with its entry and its test rows.
// Thread contract: the registry is filled during static initialisation and
// read-only afterwards.
#ifndef MIRRORTRAIN_MODELS_LOSSES_H_
#define MIRRORTRAIN_MODELS_LOSSES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/params.h"
#include "tensor/registry.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"

namespace mirrortrain::models {

// Every loss is sum_i loss(logits_i, label_i) / global_labels: each replica
// divides its shard's sum by the GLOBAL count of labels, so the summed
// replica gradients equal the gradient of the global batch's mean
// (tf.nn.compute_average_loss). Labels are integers (i32: classes), or real
// values (f32: a regression's targets), one per example or several (a
// sequence's tokens, an example's binary labels or target values).
struct LossType {
  std::string name;
  std::string doc;
  // The activation that turns this loss's logits into probabilities
  // ("softmax", "sigmoid"). On the config's output layer it is Keras's
  // from_logits=False: the model's Call returns the logits before it, which
  // the loss reads, and Model::Probabilities applies it.
  std::string output_activation;
  // The loss's own keys (config `loss.<key>`, beside `loss.name`), as an
  // optimizer's: label_smoothing for the classification losses, Huber's
  // delta.
  ParamSchema params;
  // The model's output per example for labels of per-example shape `labels`
  // (empty: one label per example) in [0, classes), or real-valued labels
  // where `classes` is 0; InvalidArgument saying why the loss cannot read
  // them otherwise ("binary_crossentropy takes labels 0 and 1, ...").
  std::function<absl::StatusOr<Shape>(const Shape& labels, int64_t classes)>
      output_shape;
  // The loss of logits [b, output_shape...] against labels [b, labels...],
  // each label's weighted by `weights` (LabelWeights), summed and divided
  // by `global_labels` (> 0), under `params` (checked against `params`
  // already, defaults filled: Params::Defaults for none). Differentiable in
  // the logits.
  std::function<absl::StatusOr<Tensor>(
      const Tensor& logits, const Tensor& labels, const Tensor& weights,
      int64_t global_labels, const Params& params)>
      compute;
  // The metric evaluation reports beside the loss, as Keras's metrics name
  // it ("accuracy": the fraction of labels predicted right;
  // "mean_absolute_error"), and its sum over a batch's labels (evaluation
  // divides the split's sum by its count of labels); read on the host.
  // Each label weighted by `weights` (host or device; LabelWeights).
  std::string metric = "accuracy";
  std::function<absl::StatusOr<double>(
      const Tensor& logits, const Tensor& labels, const Tensor& weights)>
      metric_sum;
};
using LossRegistry = Registry<LossType>;

// Label weights (a model's output mask, Keras's loss masking): undefined
// for all 1; else m values, each weighing n / m consecutive labels of n (a
// mask [b, T] over labels [b, T], or [b, T, k]).
//
// sum_i w_i v_i for per-label values `per_label` (n of them, any shape).
absl::StatusOr<Tensor> WeightedSum(const Tensor& per_label,
                                   const Tensor& weights);
// The weights on the host as one value per label (all 1 for undefined
// weights), for metrics summed there; InvalidArgument unless m divides n.
absl::StatusOr<std::vector<double>> LabelWeights(const Tensor& weights,
                                                 int64_t labels);

// The loss of configs that name none.
inline constexpr char kDefaultLoss[] = "sparse_categorical_crossentropy";

// The loss named `name`; InvalidArgument listing the names otherwise.
absl::StatusOr<const LossType*> FindLoss(const std::string& name);
// The defaults of loss `name`'s keys (none for an unknown name).
Params DefaultLossParams(const std::string& name);

// For losses of one output per label (the binary and regression ones):
// InvalidArgument "<loss> takes one <output> per <label>, got <output>s
// [...] for <label>s [...]" unless logits and labels have the same rows and
// as many elements (logits [b, 1] for labels [b]).
absl::Status CheckOneOutputPerLabel(const std::string& loss,
                                    const Tensor& logits, const Tensor& labels,
                                    const std::string& output,
                                    const std::string& label);

// OK for a global count of labels (the divisor of every loss) above 0;
// else InvalidArgument saying so.
absl::Status CheckGlobalLabels(int64_t global_labels);

// A classification loss's refusal of real-valued labels (output_shape).
absl::Status RealLabelsRefused(const std::string& loss);

// The classification losses' `label_smoothing` key (e in [0, 1], default 0)
// and what it does to their targets (`targets`).
inline constexpr char kLabelSmoothing[] = "label_smoothing";
Param LabelSmoothingParam(const std::string& targets);
// `params`' label_smoothing, 0 where the loss has no such key.
double LabelSmoothingOf(const Params& params);

// sparse_categorical_crossentropy: logits [b, classes] with labels [b], or
// per token: logits [b, T, classes] with labels [b, T], where the sum runs
// over every token and `global_batch_size` counts the labels (tokens) of the
// global batch.
//
// With `label_smoothing` e in (0, 1] each label's target is one-hot * (1 -
// e) + e / classes, as Keras's CategoricalCrossentropy(label_smoothing=e)
// and PyTorch's CrossEntropyLoss(label_smoothing=e): the loss is
// (1 - e) * xent - e / classes * sum_k log softmax(logits)_k. With e = 0
// it is the plain cross-entropy, bit for bit.
absl::StatusOr<Tensor> SparseCategoricalCrossentropy(
    const Tensor& logits, const Tensor& labels, int64_t global_batch_size,
    double label_smoothing = 0, const Tensor& weights = Tensor());

// The labels (rows, or tokens of sequences) whose argmax equals the label,
// each counted by its weight (LabelWeights).
absl::StatusOr<double> CountCorrect(const Tensor& logits, const Tensor& labels,
                                    const Tensor& weights = Tensor());

// binary_crossentropy: one logit per label, each label 0 or 1 (Keras's
// BinaryCrossentropy(from_logits=True), tf.nn.sigmoid_cross_entropy_with_
// logits): logits [b, 1] with labels [b] (binary classification), or logits
// and labels [b, k] (k independent labels: multi-label classification).
// The loss of a logit x with target y is log(1 + e^x) - x y; with smoothing
// e the target is y (1 - e) + e / 2, as Keras smooths it. Keras means over
// an example's k labels and then over the batch: the same as this sum over
// every label divided by the global batch's count of them.
absl::StatusOr<Tensor> BinaryCrossentropy(const Tensor& logits,
                                          const Tensor& labels,
                                          int64_t global_labels,
                                          double label_smoothing = 0,
                                          const Tensor& weights = Tensor());

// Number of labels whose logit is on their side of 0 (probability above
// 0.5 for label 1, else label 0): Keras's BinaryAccuracy on the
// probabilities, which logits cannot be compared against 0.5 for. Each
// counted by its weight (LabelWeights).
absl::StatusOr<double> CountCorrectBinary(const Tensor& logits,
                                          const Tensor& labels,
                                          const Tensor& weights = Tensor());

// mean_squared_error and mean_absolute_error (Keras's MeanSquaredError and
// MeanAbsoluteError): one output per target value, labels real (f32) or
// integers (cast), logits [b, 1] with labels [b], or both [b, k]; the
// squared (absolute) difference summed over every target and divided by
// the global batch's count of them, which is Keras's mean over an
// example's k targets and then over the batch. Huber and LogCosh read the
// same way. Each target weighted by `weights` (LabelWeights).
absl::StatusOr<Tensor> MeanSquaredError(const Tensor& logits,
                                        const Tensor& labels,
                                        int64_t global_labels,
                                        const Tensor& weights = Tensor());
absl::StatusOr<Tensor> MeanAbsoluteError(const Tensor& logits,
                                         const Tensor& labels,
                                         int64_t global_labels,
                                         const Tensor& weights = Tensor());
// Keras's Huber(delta): 0.5 d^2 where |d| <= delta, else delta (|d| -
// 0.5 delta), for d = output - target (delta > 0).
absl::StatusOr<Tensor> Huber(const Tensor& logits, const Tensor& labels,
                             int64_t global_labels, double delta = 1.0,
                             const Tensor& weights = Tensor());
// Keras's LogCosh: log(cosh(d)), computed as d + softplus(-2 d) - log 2.
absl::StatusOr<Tensor> LogCosh(const Tensor& logits, const Tensor& labels,
                               int64_t global_labels,
                               const Tensor& weights = Tensor());
// sum w |logit - label| over every label, on the host.
absl::StatusOr<double> SumAbsoluteError(const Tensor& logits,
                                        const Tensor& labels,
                                        const Tensor& weights = Tensor());

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_LOSSES_H_
