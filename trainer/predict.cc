#include "trainer/predict.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "tensor/shape.h"
#include "tensor/status_macros.h"
#include "trainer/data/npy_examples.h"

namespace mirrortrain::trainer {

namespace {

// Batches of at most this many examples, and as many as give about kMaxRows
// rows of outputs (one per token of a sequence), the size of an
// evaluation's batch of sequences, and at most kMaxInputValues input
// values (64 MB of f32: large images or clips); all on one device.
constexpr int64_t kMaxBatch = 1000;
constexpr int64_t kMaxRows = 8192;
constexpr int64_t kMaxInputValues = int64_t{1} << 24;

}  // namespace

absl::StatusOr<PredictInputs> PredictInputs::Open(
    const std::string& path, const Shape& input_shape, bool token_ids,
    int64_t id_limit, const NormalizeOptions& normalize) {
  MT_ASSIGN_OR_RETURN(GzFile file, GzFile::Open(path));
  MT_ASSIGN_OR_RETURN(NpyHeader header, ReadNpyHeader(file));
  MT_RETURN_IF_ERROR(CheckExampleDtype(header, path));
  MT_ASSIGN_OR_RETURN(const Shape example,
                      NpyExampleShape(header, path, input_shape));
  if (example != input_shape) {
    return BadData(
        path,
        absl::StrCat("examples of shape ", ShapeToString(example),
                     " (from the array's ", header.ShapeString(),
                     "), but the model takes ", ShapeToString(input_shape)));
  }
  if (header.shape[0] == 0) return BadData(path, "holds no examples");
  // A raw file's size tells a short or long one before any work (a gzip
  // file's says nothing of the array's).
  MT_ASSIGN_OR_RETURN(const bool compressed, IsGzipFile(file.file()));
  if (!compressed) {
    MT_RETURN_IF_ERROR(
        CheckNpyPayload(header, file.file().size - header.data_offset, path));
  }
  return PredictInputs(std::move(file), std::move(header), path, input_shape,
                       token_ids, id_limit, normalize);
}

absl::StatusOr<Tensor> PredictInputs::Next(int64_t count) {
  count = std::min(count, left());
  const int64_t row = NumElements(input_shape_);
  Shape shape = {count};
  shape.insert(shape.end(), input_shape_.begin(), input_shape_.end());
  const size_t bytes = static_cast<size_t>(count * row * header_.item_bytes);
  std::string data(bytes, '\0');
  MT_ASSIGN_OR_RETURN(const size_t got, file_.Read(data.data(), bytes));
  data.resize(got);
  if (data.size() < bytes) {
    // The stream ended early: as many bytes as were read in all.
    const uint64_t have =
        static_cast<uint64_t>(next_ * row * header_.item_bytes) + data.size();
    absl::Status short_file = CheckNpyPayload(header_, have, path_);
    return absl::InvalidArgumentError(
        absl::StrCat(short_file.message(), file_.StreamErrorSuffix()));
  }
  // A stream that failed without ending early (its data inflated whole).
  MT_RETURN_IF_ERROR(CheckGzStream(
      file_, header_.data_offset + static_cast<uint64_t>((next_ + count) * row *
                                                         header_.item_bytes)));
  MT_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty(DType::kF32, shape));
  const int64_t first = next_ * row;
  float* v = x.data<float>();
  MT_RETURN_IF_ERROR(NpyElementsToF32(header_, data.data(), first, count * row,
                                      path_, token_ids_, v));
  next_ += count;
  if (token_ids_) {
    for (int64_t i = 0; i < count * row; ++i) {
      if (v[i] < 0 || v[i] != std::floor(v[i]) ||
          (id_limit_ > 0 && v[i] >= static_cast<float>(id_limit_))) {
        return BadData(
            path_,
            absl::StrCat(
                "element ", first + i, " is ", v[i],
                ", not a token id (an integer >= 0",
                id_limit_ > 0 ? absl::StrCat(", below ", id_limit_) : "", ")"));
      }
    }
  } else if (normalize_.enabled()) {
    MT_RETURN_IF_ERROR(NormalizeChannels(normalize_, x, next_ - count));
  }
  return x;
}

absl::Status PredictInputs::CheckEnd() {
  // Reading on to the end also runs the gzip trailer's checks (its CRC and
  // length), which zlib makes only after the data.
  MT_ASSIGN_OR_RETURN(const uint64_t rest, file_.CountRest());
  const uint64_t need =
      static_cast<uint64_t>(header_.num_elements()) * header_.item_bytes;
  MT_RETURN_IF_ERROR(CheckGzStream(file_, header_.data_offset + need + rest));
  if (rest == 0) return absl::OkStatus();
  return CheckNpyPayload(header_, need + rest, path_);
}

absl::Status Predict(models::Model& model, Device device, PredictInputs& inputs,
                     const std::function<absl::Status(const Tensor&)>& sink) {
  const Shape& out = model.output_shape();
  // One example's outputs, and its rows (all but the last dimension: a
  // sequence's tokens).
  const int64_t row = NumElements(out);
  const int64_t rows =
      out.empty() ? 1
                  : NumElements(absl::MakeConstSpan(out).first(out.size() - 1));
  const int64_t per_example =
      std::max<int64_t>(NumElements(inputs.example_shape()), 1);
  const int64_t batch =
      std::clamp<int64_t>(std::min(kMaxRows / std::max<int64_t>(rows, 1),
                                   kMaxInputValues / per_example),
                          1, kMaxBatch);
  while (inputs.left() > 0) {
    MT_ASSIGN_OR_RETURN(Tensor x, inputs.Next(batch));
    const int64_t count = x.dim(0);
    MT_ASSIGN_OR_RETURN(x, x.To(device));
    MT_ASSIGN_OR_RETURN(Tensor y, model.Call(x, {}));
    MT_ASSIGN_OR_RETURN(y, model.Probabilities(y));
    MT_ASSIGN_OR_RETURN(y, y.To(Device::Cpu()));
    if (y.dtype() != DType::kF32 || y.num_elements() != count * row) {
      return absl::InternalError(absl::StrCat(
          "predict: the model gave ", y.DebugString(), " for ", count,
          " examples, not f32 ", ShapeToString(out), " each"));
    }
    MT_RETURN_IF_ERROR(sink(y));
  }
  return inputs.CheckEnd();
}

}  // namespace mirrortrain::trainer
