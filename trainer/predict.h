// Predictions of a trained model for the examples of a NumPy file
// (`mirrortrain predict`), as Keras's Model.predict: the model's outputs in
// inference mode (dropout off, batch norm on its moving statistics), batch
// by batch. A classifier's outputs are its logits, or its probabilities
// where the output layer applies the loss's activation (a softmax, or a
// sigmoid under binary_crossentropy: Model::Probabilities).
//
// The input is streamed: a batch of examples is read, converted, run and
// handed on before the next is read, so memory holds one batch whatever
// the file's size (its outputs stream to the output file alike).
//
// Thread contract: no state beyond a PredictInputs' file position; the
// model is used from the calling thread.
#ifndef MIRRORTRAIN_TRAINER_PREDICT_H_
#define MIRRORTRAIN_TRAINER_PREDICT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/model.h"
#include "tensor/device.h"
#include "tensor/tensor.h"
#include "trainer/data/gz_file.h"
#include "trainer/data/normalize.h"
#include "trainer/data/npy.h"

namespace mirrortrain::trainer {

// The examples of a .npy file (raw or gzip-compressed; trainer/data/
// npy_examples.h: uint8 or float32; [n, features], [n, h, w] or NHWC),
// read in order, batch by batch, as host f32 [count, ...input_shape].
// Token ids (`token_ids`: a model whose input reaches an embedding, or one
// trained on the text source's bytes) are uint8 values as they are or
// float32 integers >= 0, and below `id_limit` when it is > 0 (a byte
// model's 256); other inputs are uint8 pixels scaled to [0, 1] or float32
// values, normalised as training normalised its data (the config's
// data.normalize). Errors are InvalidArgument naming the file: not such an
// array, examples that are not `input_shape`, or (where they are read) an
// element that is not finite or not a token id, and a file shorter or
// longer than its header says (a raw file's at Open, a compressed one's
// where its data ends).
//
// Ownership: owns its file. One thread at a time.
class PredictInputs {
 public:
  static absl::StatusOr<PredictInputs> Open(const std::string& path,
                                            const Shape& input_shape,
                                            bool token_ids, int64_t id_limit,
                                            const NormalizeOptions& normalize);

  int64_t size() const { return header_.shape[0]; }  // Examples.
  int64_t left() const { return size() - next_; }
  const Shape& example_shape() const { return input_shape_; }
  // The next min(count, left()) examples, count >= 1.
  absl::StatusOr<Tensor> Next(int64_t count);
  // After the last example: "trailing bytes" when data follows it.
  absl::Status CheckEnd();

 private:
  PredictInputs(GzFile file, NpyHeader header, std::string path,
                Shape input_shape, bool token_ids, int64_t id_limit,
                NormalizeOptions normalize)
      : file_(std::move(file)),
        header_(std::move(header)),
        path_(std::move(path)),
        input_shape_(std::move(input_shape)),
        token_ids_(token_ids),
        id_limit_(id_limit),
        normalize_(std::move(normalize)) {}

  GzFile file_;
  NpyHeader header_;
  std::string path_;
  Shape input_shape_;
  bool token_ids_;
  int64_t id_limit_;
  NormalizeOptions normalize_;
  int64_t next_ = 0;  // The next example to read.
};

// The outputs of `model` (on `device`) for every example of `inputs`, in
// batches of at most 1000 examples and about 8192 output rows (a text
// model's windows give one row of logits per token), as evaluations run:
// each batch's host f32 [count, ...output shape] goes to `sink` in order.
// The first error (of the inputs, the model or the sink) ends it.
absl::Status Predict(models::Model& model, Device device, PredictInputs& inputs,
                     const std::function<absl::Status(const Tensor&)>& sink);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_PREDICT_H_
