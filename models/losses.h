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
//
// With `label_smoothing` e in (0, 1] each label's target is one-hot * (1 -
// e) + e / classes, as Keras's CategoricalCrossentropy(label_smoothing=e)
// and PyTorch's CrossEntropyLoss(label_smoothing=e): the loss is
// (1 - e) * xent - e / classes * sum_k log softmax(logits)_k. With e = 0
// it is the plain cross-entropy, bit for bit.
absl::StatusOr<Tensor> SparseCategoricalCrossentropy(
    const Tensor& logits, const Tensor& labels, int64_t global_batch_size,
    double label_smoothing = 0);

// Number of labels (rows, or tokens of sequences) whose argmax equals the
// label.
absl::StatusOr<int64_t> CountCorrect(const Tensor& logits,
                                     const Tensor& labels);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_LOSSES_H_
