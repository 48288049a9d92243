// `up_sampling2d` (Keras UpSampling2D: nearest, each pixel repeated size[0]
// x size[1] times, or bilinear), NHWC, without variables.
//
// Built from recorded ops, so its gradient and GPU path are those ops':
// nearest multiplies x [n, h, 1, w, 1, c] by ones [sh, 1, sw, 1]
// (broadcasting; the gradient sums each block). Bilinear is
// tf.image.resize's (half-pixel centers, no antialiasing), one axis after
// the other, columns first as TensorFlow's kernel: with an integer factor s
// the output cell s * i + r lies a fixed fraction t_r of a cell from cell
// i, so each phase r is a + (b - a) * lerp of x and x shifted by one cell
// (the edge cell repeated), TensorFlow's arithmetic with its float32 lerp,
// and the s phases are interleaved (Concat, Reshape): O(output) work.
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// x up-sampled `s` times along `axis` (1 or 2 of NHWC) by bilinear
// interpolation, as tf.image.resize computes it.
absl::StatusOr<Tensor> BilinearAlong(const Tensor& x, int axis, int64_t s) {
  if (s == 1) return x;
  const int64_t n = x.dim(axis);
  // x's neighbours toward the start and the end, the edge cells repeated
  // (TensorFlow clamps the interpolated cells to the image).
  Tensor prev = x, next = x;
  if (n > 1) {
    MT_ASSIGN_OR_RETURN(const Tensor first, ops::Slice(x, axis, 0, 1));
    MT_ASSIGN_OR_RETURN(const Tensor last, ops::Slice(x, axis, n - 1, 1));
    MT_ASSIGN_OR_RETURN(const Tensor head, ops::Slice(x, axis, 0, n - 1));
    MT_ASSIGN_OR_RETURN(const Tensor tail, ops::Slice(x, axis, 1, n - 1));
    MT_ASSIGN_OR_RETURN(prev, ops::Concat({first, head}, axis));
    MT_ASSIGN_OR_RETURN(next, ops::Concat({tail, last}, axis));
  }
  MT_ASSIGN_OR_RETURN(const Tensor to_prev, ops::Sub(x, prev));
  MT_ASSIGN_OR_RETURN(const Tensor to_next, ops::Sub(next, x));
  Shape phase_shape = x.shape();
  phase_shape.insert(phase_shape.begin() + axis + 1, 1);
  std::vector<Tensor> phases;
  const float scale = 1.0f / static_cast<float>(s);  // in / out, in f32.
  for (int64_t r = 0; r < s; ++r) {
    // The cell's source position relative to cell i, as TensorFlow's
    // HalfPixelScaler computes it (exact for a factor of two's power).
    const float at = (static_cast<float>(r) + 0.5f) * scale - 0.5f;
    Tensor phase;
    if (at < 0) {
      // Between cells i - 1 and i: prev + (x - prev) * (1 + at).
      MT_ASSIGN_OR_RETURN(const Tensor step, ops::Scale(to_prev, 1.0f + at));
      MT_ASSIGN_OR_RETURN(phase, ops::Add(prev, step));
    } else {
      MT_ASSIGN_OR_RETURN(const Tensor step, ops::Scale(to_next, at));
      MT_ASSIGN_OR_RETURN(phase, ops::Add(x, step));
    }
    MT_ASSIGN_OR_RETURN(phase, ops::Reshape(phase, phase_shape));
    phases.push_back(std::move(phase));
  }
  MT_ASSIGN_OR_RETURN(const Tensor interleaved, ops::Concat(phases, axis + 1));
  Shape out = x.shape();
  out[axis] *= s;
  return ops::Reshape(interleaved, out);
}

class UpSampling2DLayer final : public Layer {
 public:
  // `ones` (nearest only): [sh, 1, sw, 1] of ones.
  UpSampling2DLayer(std::string name, std::array<int64_t, 2> size,
                    bool bilinear, Tensor ones)
      : Layer(std::move(name)),
        size_(size),
        bilinear_(bilinear),
        ones_(std::move(ones)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    if (bilinear_) {
      MT_ASSIGN_OR_RETURN(const Tensor wide, BilinearAlong(x, 2, size_[1]));
      return BilinearAlong(wide, 1, size_[0]);
    }
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
  bool bilinear_;
  Tensor ones_;  // [sh, 1, sw, 1] of ones, on the layer's device.
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "up_sampling2d",
     .doc = "each pixel becomes size[0] x size[1] pixels, NHWC (Keras "
            "UpSampling2D): repeated (nearest) or interpolated (bilinear)",
     .params = {{Param::IntPair("size").Default(2).Min(1).Max(1024).Doc(
                     "[rows, columns] each pixel becomes; an integer: both"),
                 Param::String("interpolation")
                     .Default("nearest")
                     .OneOf({"nearest", "bilinear"})
                     .Doc("nearest: each pixel repeated (Keras's default); "
                          "bilinear: tf.image.resize's, half-pixel centers")}},
     // Its output holds its input's values (repeated, or mixed: a
     // probability's still): looked past for the output layer, so an
     // output softmax before it is refused as before a reshape.
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
       const bool bilinear = spec.params.String("interpolation") == "bilinear";
       Tensor ones;
       if (!bilinear) {
         MT_ASSIGN_OR_RETURN(
             ones, Tensor::HostFull(DType::kF32, {size[0], 1, size[1], 1}, 1.0)
                       .To(b.device()));
       }
       return std::unique_ptr<Layer>(
           new UpSampling2DLayer(b.name(), size, bilinear, std::move(ones)));
     }});

}  // namespace mirrortrain::models
