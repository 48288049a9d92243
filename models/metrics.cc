#include "models/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<const MetricType*> FindMetric(const std::string& name) {
  if (const MetricType* m = MetricRegistry::Global().Find(name)) return m;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown metric '", name, "' (expected one of ",
                   MetricRegistry::Global().NameList(), ")"));
}

absl::StatusOr<double> CountInTopK(const Tensor& logits, const Tensor& labels,
                                   int64_t k, const Tensor& weights) {
  const int64_t n = labels.num_elements();
  // Logits have the labels' axes and one of classes.
  const Shape& l = logits.shape();
  const bool rows =
      logits.rank() == labels.rank() + 1 &&
      std::equal(labels.shape().begin(), labels.shape().end(), l.begin());
  if (!rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("top-k accuracy: logits ", ShapeToString(logits.shape()),
                     " do not hold a row of classes for each of labels ",
                     ShapeToString(labels.shape())));
  }
  if (n == 0) return 0.0;
  const int64_t classes = logits.num_elements() / n;
  MT_ASSIGN_OR_RETURN(const Tensor host_logits, logits.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const Tensor host_labels, labels.To(Device::Cpu()));
  MT_ASSIGN_OR_RETURN(const std::vector<double> w, LabelWeights(weights, n));
  double in_top = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = ops::internal::IndexAt(host_labels, i);
    if (label < 0 || label >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("top-k accuracy: label ", label, " at index ", i,
                       " is outside [0, ", classes, ")"));
    }
    const double mine = host_logits.ScalarAt(i * classes + label);
    bool finite = true;
    int64_t above = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = host_logits.ScalarAt(i * classes + c);
      finite = finite && std::isfinite(v);
      above += v > mine;
    }
    if (finite && above < k) {
      in_top += w[static_cast<size_t>(i)];
    }
  }
  return in_top;
}

MT_REGISTER(
    MetricType,
    {.name = "sparse_top_k_categorical_accuracy",
     .doc = "Keras's SparseTopKCategoricalAccuracy: the fraction of labels "
            "whose class is among the k largest logits (ties with the k-th "
            "count; a row with a non-finite logit does not), under "
            "sparse_categorical_crossentropy",
     .params = {{Param::Int("k").Default(5).Min(1).Doc(
         "how many of the largest logits a label may be among")}},
     .maximize = true,
     .check = [](const LossType& loss) -> absl::Status {
       if (loss.name == kDefaultLoss) return absl::OkStatus();
       return absl::InvalidArgumentError(absl::StrCat(
           "reads one logit per class, which loss.name ", loss.name,
           " does not train (", kDefaultLoss, " does)"));
     },
     .sum = [](const Tensor& logits, const Tensor& labels,
               const Tensor& weights,
               const Params& params) -> absl::StatusOr<double> {
       return CountInTopK(logits, labels, params.Int("k"), weights);
     }});

}  // namespace mirrortrain::models
