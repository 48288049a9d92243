// Layers that resize images without variables (Keras names and defaults):
// `up_sampling2d` (UpSampling2D, nearest: each pixel repeated size[0] x
// size[1] times) and `zero_padding2d` (ZeroPadding2D: rows and columns of
// zeros around the image), NHWC.
//
// Both are built from recorded ops, so their gradients and GPU paths are
// those ops': up-sampling multiplies x [n, h, 1, w, 1, c] by ones [sh, 1,
// sw, 1] (broadcasting; the gradient sums each block), padding
// concatenates zero blocks.
#include <array>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

absl::Status CheckImages(const Shape& input, const std::string& layer) {
  if (input.size() == 4) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(layer.empty() ? "" : layer + ": ",
                   "expects NHWC input, got ", ShapeToString(input)));
}

class UpSampling2DLayer final : public Layer {
 public:
  UpSampling2DLayer(std::string name, std::array<int64_t, 2> size, Tensor ones)
      : Layer(std::move(name)), size_(size), ones_(std::move(ones)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    MT_ASSIGN_OR_RETURN(
        const Tensor spread,
        ops::Reshape(x, {x.dim(0), x.dim(1), 1, x.dim(2), 1, x.dim(3)}));
    Tensor ones = ones_;
    if (ones.dtype() != x.dtype() || ones.device() != x.device()) {
      MT_ASSIGN_OR_RETURN(ones, ops::Cast(ones_, x.dtype()));
      MT_ASSIGN_OR_RETURN(ones, ones.To(x.device()));
    }
    MT_ASSIGN_OR_RETURN(const Tensor repeated, ops::Mul(spread, ones));
    return ops::Reshape(repeated, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_RETURN_IF_ERROR(CheckImages(input, name()));
    return Shape{input[0], input[1] * size_[0], input[2] * size_[1], input[3]};
  }

 private:
  std::array<int64_t, 2> size_;
  Tensor ones_;  // [sh, 1, sw, 1] of ones, on the layer's device.
};

class ZeroPadding2DLayer final : public Layer {
 public:
  ZeroPadding2DLayer(std::string name, std::array<int64_t, 2> padding)
      : Layer(std::move(name)), padding_(padding) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    Tensor y = x;
    for (int axis : {1, 2}) {
      const int64_t pad = padding_[axis - 1];
      if (pad == 0) continue;
      Shape block = y.shape();
      block[axis] = pad;
      MT_ASSIGN_OR_RETURN(const Tensor zeros,
                          Tensor::Zeros(y.dtype(), block, y.device()));
      MT_ASSIGN_OR_RETURN(y, ops::Concat({zeros, y, zeros}, axis));
    }
    return y;
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_RETURN_IF_ERROR(CheckImages(input, name()));
    return Shape{input[0], input[1] + 2 * padding_[0],
                 input[2] + 2 * padding_[1], input[3]};
  }

 private:
  std::array<int64_t, 2> padding_;  // Rows above and below, columns beside.
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "up_sampling2d",
     .doc = "repeats each pixel size[0] x size[1] times, NHWC (Keras "
            "UpSampling2D, interpolation nearest)",
     .params = {{Param::IntPair("size").Default(2).Min(1).Max(1024).Doc(
                     "[rows, columns] each pixel becomes; an integer: both"),
                 Param::String("interpolation")
                     .Default("nearest")
                     .OneOf({"nearest"})
                     .Doc("nearest (Keras's default; bilinear is not built)")}},
     // Its output holds its input's values (repeated): looked past for the
     // output layer, so an output softmax before it is refused as before a
     // reshape.
     .passes_values_on = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(CheckImages(b.input_shape(), ""));
       const std::array<int64_t, 2> size = spec.params.IntPair("size");
       const Shape& in = b.input_shape();
       if (in[1] > kMaxDimension / size[0] || in[2] > kMaxDimension / size[1]) {
         return absl::InvalidArgumentError(absl::StrCat(
             "size: ", in[1], "x", in[2], " up-sampled by ", size[0], "x",
             size[1], " is more than ", kMaxDimension, " in a dimension"));
       }
       MT_ASSIGN_OR_RETURN(
           Tensor ones,
           Tensor::HostFull(DType::kF32, {size[0], 1, size[1], 1}, 1.0)
               .To(b.device()));
       return std::unique_ptr<Layer>(
           new UpSampling2DLayer(b.name(), size, std::move(ones)));
     }});

MT_REGISTER(
    LayerType,
    {.name = "zero_padding2d",
     .doc = "rows and columns of zeros around the image, NHWC (Keras "
            "ZeroPadding2D, symmetric)",
     .params = {{Param::IntPair("padding").Default(1).Min(0).Max(1 << 20).Doc(
         "[rows above and below, columns left and right]; an integer: "
         "both")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(CheckImages(b.input_shape(), ""));
       return std::unique_ptr<Layer>(
           new ZeroPadding2DLayer(b.name(), spec.params.IntPair("padding")));
     }});

}  // namespace mirrortrain::models
