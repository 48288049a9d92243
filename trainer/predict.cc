#include "trainer/predict.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/shape.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/data/gz_file.h"
#include "trainer/data/npy.h"
#include "trainer/data/npy_examples.h"

namespace mirrortrain::trainer {

namespace {

// Batches of at most this many examples, and as many as give about kMaxRows
// rows of outputs (one per token of a sequence), the size of an
// evaluation's batch of sequences; all on one device.
constexpr int64_t kMaxBatch = 1000;
constexpr int64_t kMaxRows = 8192;

}  // namespace

absl::StatusOr<Tensor> ReadPredictInputs(const std::string& path,
                                         const Shape& input_shape,
                                         bool token_ids, int64_t id_limit,
                                         const NormalizeOptions& normalize) {
  MT_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  MT_ASSIGN_OR_RETURN(const NpyArray x, ParseNpy(std::move(bytes), path));
  MT_ASSIGN_OR_RETURN(Tensor inputs,
                      NpyExamples(x, path, token_ids, input_shape));
  const Shape example(inputs.shape().begin() + 1, inputs.shape().end());
  if (example != input_shape) {
    return BadData(
        path,
        absl::StrCat("examples of shape ", ShapeToString(example),
                     " (from the array's ", x.header.ShapeString(),
                     "), but the model takes ", ShapeToString(input_shape)));
  }
  if (token_ids) {
    const float* v = inputs.data<float>();
    for (int64_t i = 0; i < inputs.num_elements(); ++i) {
      if (v[i] < 0 || v[i] != std::floor(v[i]) ||
          (id_limit > 0 && v[i] >= static_cast<float>(id_limit))) {
        return BadData(
            path,
            absl::StrCat("element ", i, " is ", v[i],
                         ", not a token id (an integer >= 0",
                         id_limit > 0 ? absl::StrCat(", below ", id_limit) : "",
                         ")"));
      }
    }
  } else if (normalize.enabled()) {
    MT_RETURN_IF_ERROR(NormalizeChannels(normalize, inputs));
  }
  return inputs;
}

absl::StatusOr<Tensor> Predict(models::Model& model, Device device,
                               const Tensor& inputs) {
  const int64_t n = inputs.dim(0);
  Shape shape = {n};
  const Shape& out = model.output_shape();
  shape.insert(shape.end(), out.begin(), out.end());
  MT_ASSIGN_OR_RETURN(Tensor outputs, Tensor::Empty(DType::kF32, shape));
  // One example's outputs, and its rows (all but the last dimension: a
  // sequence's tokens).
  const int64_t row = NumElements(out);
  const int64_t rows =
      out.empty() ? 1
                  : NumElements(absl::MakeConstSpan(out).first(out.size() - 1));
  const int64_t batch =
      std::clamp<int64_t>(kMaxRows / std::max<int64_t>(rows, 1), 1, kMaxBatch);
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t count = std::min(batch, n - begin);
    MT_ASSIGN_OR_RETURN(Tensor x, inputs.SliceRows(begin, count));
    MT_ASSIGN_OR_RETURN(x, x.To(device));
    MT_ASSIGN_OR_RETURN(Tensor y, model.Call(x, {}));
    MT_ASSIGN_OR_RETURN(y, model.Probabilities(y));
    MT_ASSIGN_OR_RETURN(y, y.To(Device::Cpu()));
    if (y.dtype() != DType::kF32 || y.num_elements() != count * row) {
      return absl::InternalError(absl::StrCat(
          "predict: the model gave ", y.DebugString(), " for ", count,
          " examples, not f32 ", ShapeToString(out), " each"));
    }
    std::memcpy(outputs.data<float>() + begin * row, y.data<float>(),
                static_cast<size_t>(count * row) * sizeof(float));
  }
  return outputs;
}

absl::Status WriteNpy(const std::string& path, const Tensor& values) {
  MT_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Create(path));
  MT_RETURN_IF_ERROR(file.Append(NpyHeaderBytes("<f4", values.shape())));
  MT_RETURN_IF_ERROR(file.Append(absl::string_view(
      static_cast<const char*>(values.raw_data()),
      static_cast<size_t>(values.num_elements()) * sizeof(float))));
  return file.Commit();
}

}  // namespace mirrortrain::trainer
