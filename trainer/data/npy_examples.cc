#include "trainer/data/npy_examples.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/data/dataset.h"
#include "trainer/data/gz_file.h"

namespace mirrortrain::trainer {

absl::StatusOr<Shape> NpyExampleShape(const NpyHeader& x,
                                      const std::string& where,
                                      const Shape& model_example) {
  const std::vector<int64_t>& s = x.shape;
  // Beyond images (clips [n, frames, h, w, c]) where the model's examples
  // have that rank (model.input_shape).
  const bool model_rank = s.size() > 4 && s.size() == model_example.size() + 1;
  if (s.size() < 2 || (s.size() > 4 && !model_rank)) {
    return BadData(where, absl::StrCat("shape ", x.ShapeString(),
                                       " is not [n, features], [n, h, w] or "
                                       "[n, h, w, c] (or [n, ...] of "
                                       "model.input_shape's rank)"));
  }
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] == 0) {
      return BadData(where, absl::StrCat("shape ", x.ShapeString(),
                                         " has empty examples"));
    }
  }
  const Shape example(s.begin() + 1, s.end());
  // A model of [h, w] examples reads sequences (any [h, w]: a mismatch is
  // then named as the array holds it, not with a channel it lacks).
  if (s.size() == 3 && model_example.size() != 2) return Shape{s[1], s[2], 1};
  return example;
}

absl::Status CheckExampleDtype(const NpyHeader& x, const std::string& where) {
  if ((x.kind == 'u' && x.item_bytes == 1) ||
      (x.kind == 'f' && x.item_bytes == 4)) {
    return absl::OkStatus();
  }
  return BadData(where,
                 absl::StrCat("dtype '", x.descr,
                              "' is neither uint8 (pixels, scaled to [0, 1]) "
                              "nor float32 (convert with "
                              "x.astype(np.float32))"));
}

absl::StatusOr<Tensor> NpyExamples(const NpyArray& x, const std::string& where,
                                   bool bytes_are_ids,
                                   const Shape& model_example) {
  MT_RETURN_IF_ERROR(CheckExampleDtype(x.header, where));
  MT_ASSIGN_OR_RETURN(Shape example,
                      NpyExampleShape(x.header, where, model_example));
  const int64_t n = x.header.shape[0];
  if (n == 0) return BadData(where, "holds no examples");
  Shape shape = {n};
  shape.insert(shape.end(), example.begin(), example.end());
  MT_ASSIGN_OR_RETURN(Tensor images, Tensor::Empty(DType::kF32, shape));
  MT_RETURN_IF_ERROR(NpyElementsToF32(x.header, x.data(), 0,
                                      x.header.num_elements(), where,
                                      bytes_are_ids, images.data<float>()));
  return images;
}

absl::Status NpyElementsToF32(const NpyHeader& x, const char* data,
                              int64_t first, int64_t count,
                              const std::string& where, bool bytes_are_ids,
                              float* out) {
  if (x.kind == 'u') {
    const std::array<float, 256>& scale = ByteToUnitTable();
    const auto* in = reinterpret_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < count; ++i) {
      out[i] = bytes_are_ids ? static_cast<float>(in[i]) : scale[in[i]];
    }
    return absl::OkStatus();
  }
  std::memcpy(out, data, count * sizeof(float));
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(out[i])) {
      return BadData(where, absl::StrCat("element ", first + i, " is ", out[i],
                                         " (inputs must be finite)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
