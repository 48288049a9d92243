#include "models/simple_layers.h"

#include "absl/strings/str_cat.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<Tensor> MaxPool2DLayer::Call(const Tensor& x,
                                            const ForwardContext&) {
  return ops::MaxPool2D(x, options_);
}

absl::StatusOr<Shape> MaxPool2DLayer::OutputShape(const Shape& input) const {
  if (input.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": expects NHWC input, got ", ShapeToString(input)));
  }
  ops::Window1D wy = ops::ComputeWindow(input[1], options_.ksize_h,
                                        options_.stride_h, options_.padding);
  ops::Window1D wx = ops::ComputeWindow(input[2], options_.ksize_w,
                                        options_.stride_w, options_.padding);
  return Shape{input[0], wy.out, wx.out, input[3]};
}

absl::StatusOr<Tensor> FlattenLayer::Call(const Tensor& x,
                                          const ForwardContext&) {
  // Explicit sizes, not -1: an empty replica shard has 0 rows, and -1 is
  // ambiguous for 0 elements.
  MT_ASSIGN_OR_RETURN(Shape shape, OutputShape(x.shape()));
  return ops::Reshape(x, shape);
}

absl::StatusOr<Shape> FlattenLayer::OutputShape(const Shape& input) const {
  if (input.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": scalar input"));
  }
  int64_t rest = 1;
  for (size_t i = 1; i < input.size(); ++i) rest *= input[i];
  return Shape{input[0], rest};
}

absl::StatusOr<Tensor> DropoutLayer::Call(const Tensor& x,
                                          const ForwardContext& ctx) {
  if (!ctx.training || rate_ == 0.0) return x;
  // The seed mixes the step and this layer; the offset places the shard in
  // the global batch.
  const uint64_t seed =
      ctx.step_seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(index_);
  const int64_t row = x.dim(0) == 0 ? 0 : x.num_elements() / x.dim(0);
  return ops::Dropout(x, rate_, seed, ctx.row_offset * row);
}

}  // namespace mirrortrain::models
