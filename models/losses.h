// Losses scaled for synchronous data parallelism.
#ifndef MIRRORTRAIN_MODELS_LOSSES_H_
#define MIRRORTRAIN_MODELS_LOSSES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::models {

// sum_i xent(logits_i, label_i) / global_batch_size: each replica divides
// its shard's sum by the GLOBAL batch, so the summed replica gradients equal
// the gradient of the global-batch mean (tf.nn.compute_average_loss).
// Logits [b, classes] with labels [b], or per token: logits [b, T, classes]
// with labels [b, T], where the sum runs over every token and
// `global_batch_size` counts the labels (tokens) of the global batch.
absl::StatusOr<Tensor> SparseCategoricalCrossentropy(const Tensor& logits,
                                                     const Tensor& labels,
                                                     int64_t global_batch_size);

// Number of labels (rows, or tokens of sequences) whose argmax equals the
// label.
absl::StatusOr<int64_t> CountCorrect(const Tensor& logits,
                                     const Tensor& labels);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_LOSSES_H_
