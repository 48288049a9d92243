// Metrics evaluation reports beside the loss and its own metric (config
// `metrics`, Keras's compile(metrics=...)), selectable by name.
//
// Each is a MetricType registered next to its code (MT_REGISTER, as layers
// and losses are): a new metric is one entry and its test rows. Thread
// contract: the registry is filled during static initialisation and
// read-only afterwards.
#ifndef MIRRORTRAIN_MODELS_METRICS_H_
#define MIRRORTRAIN_MODELS_METRICS_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/losses.h"
#include "tensor/params.h"
#include "tensor/registry.h"
#include "tensor/tensor.h"

namespace mirrortrain::models {

struct MetricType {
  std::string name;  // Keras's function name; what evaluation reports.
  std::string doc;
  ParamSchema params;  // Its keys beside `name` (top-k's k).
  // Whether it improves as it rises (an accuracy) or falls (an error), for
  // early stopping: every metric says which (Keras refuses to guess).
  std::optional<bool> maximize;
  // OK when the metric reads the outputs `loss` trains (top-k reads
  // classes' logits); else InvalidArgument saying why.
  std::function<absl::Status(const LossType& loss)> check;
  // Its sum over a batch's labels, each weighted by `weights` (undefined:
  // all 1; LabelWeights), under `params` (checked, defaults filled);
  // evaluation divides the split's sum by its count of labels. Read on the
  // host.
  std::function<absl::StatusOr<double>(
      const Tensor& logits, const Tensor& labels, const Tensor& weights,
      const Params& params)>
      sum;
};
using MetricRegistry = Registry<MetricType>;

// The metric named `name`; InvalidArgument listing the names otherwise.
absl::StatusOr<const MetricType*> FindMetric(const std::string& name);

// Keras's sparse_top_k_categorical_accuracy (tf.math.in_top_k): the labels
// whose class is among the k largest logits of its row, ties with the k-th
// included; a row holding a non-finite logit counts as wrong. Logits [n,
// classes] for labels [n], or [b, T, classes] for [b, T]; each counted by
// its weight.
absl::StatusOr<double> CountInTopK(const Tensor& logits, const Tensor& labels,
                                   int64_t k, const Tensor& weights = Tensor());

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_METRICS_H_
