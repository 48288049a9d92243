// `up_sampling2d` (Keras UpSampling2D, nearest: each pixel repeated size[0]
// x size[1] times), NHWC, without variables.
//
// Built from recorded ops, so its gradient and GPU path are those ops':
// it multiplies x [n, h, 1, w, 1, c] by ones [sh, 1, sw, 1] (broadcasting;
// the gradient sums each block).
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
    MT_RETURN_IF_ERROR(CheckImageShape(input, name()));
    return Shape{input[0], input[1] * size_[0], input[2] * size_[1], input[3]};
  }

 private:
  std::array<int64_t, 2> size_;
  Tensor ones_;  // [sh, 1, sw, 1] of ones, on the layer's device.
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
       MT_RETURN_IF_ERROR(CheckImageShape(b.input_shape(), ""));
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

}  // namespace mirrortrain::models
