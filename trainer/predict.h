// Predictions of a trained model for the examples of a NumPy file
// (`mirrortrain predict`), as Keras's Model.predict: the model's outputs in
// inference mode (dropout off, batch norm on its moving statistics), batch
// by batch. A classifier's outputs are its logits, or its probabilities
// where the output layer applies the loss's activation (a softmax, or a
// sigmoid under binary_crossentropy: Model::Probabilities).
//
// Thread contract: no state; the model is used from the calling thread.
#ifndef MIRRORTRAIN_TRAINER_PREDICT_H_
#define MIRRORTRAIN_TRAINER_PREDICT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/model.h"
#include "tensor/device.h"
#include "tensor/tensor.h"
#include "trainer/data/normalize.h"

namespace mirrortrain::trainer {

// The examples of the .npy file `path` (trainer/data/npy_examples.h:
// uint8 or float32; [n, features], [n, h, w] or NHWC) as host f32
// [n, ...input_shape]. Token ids (`token_ids`: a model whose input reaches
// an embedding, or one trained on the text source's bytes) are uint8
// values as they are or float32 integers >= 0, and below `id_limit` when
// it is > 0 (a byte model's 256); other inputs are uint8
// pixels scaled to [0, 1] or float32 values, normalised as training
// normalised its data (the config's data.normalize). InvalidArgument
// naming the file when it is not such an array or its examples are not
// `input_shape`.
absl::StatusOr<Tensor> ReadPredictInputs(const std::string& path,
                                         const Shape& input_shape,
                                         bool token_ids, int64_t id_limit,
                                         const NormalizeOptions& normalize);

// The outputs of `model` (on `device`) for host `inputs` [n, ...input
// shape]: host f32 [n, ...output shape]. In batches of at most 1000
// examples and about 8192 output rows (a text model's windows give one row
// of logits per token), as evaluations run.
absl::StatusOr<Tensor> Predict(models::Model& model, Device device,
                               const Tensor& inputs);

// Writes host f32 `values` to `path` as a .npy array (float32, C order),
// atomically: a file already at `path` stays whole until the new one is.
absl::Status WriteNpy(const std::string& path, const Tensor& values);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_PREDICT_H_
