// Layers that add zeros around, or cut cells off, the steps of sequences
// [batch, steps, channels] or the rows and columns of NHWC images, each
// side by its own count (Keras names and defaults): `zero_padding1d`,
// `zero_padding2d` (ZeroPadding1D/2D) and `cropping1d`, `cropping2d`
// (Cropping1D/2D). MobileNetV2's and EfficientNet's asymmetric padding
// before a strided valid convolution, U-Net's crop of a skip connection.
//
// Built from recorded ops (padding concatenates zero blocks, cropping is a
// Slice per axis), so their gradients and GPU paths are those ops'.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// Cells before and after one spatial axis.
struct Sides {
  int64_t before = 0, after = 0;
};

class EdgesLayer final : public Layer {
 public:
  // `sides` for axes 1, 2, ...: zeros added, or (`crop`) cells removed.
  EdgesLayer(std::string name, bool crop, std::vector<Sides> sides)
      : Layer(std::move(name)), crop_(crop), sides_(std::move(sides)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    Tensor y = x;
    for (size_t i = 0; i < sides_.size(); ++i) {
      const int axis = static_cast<int>(i) + 1;
      const Sides& s = sides_[i];
      if (s.before == 0 && s.after == 0) continue;
      if (crop_) {
        MT_ASSIGN_OR_RETURN(
            y, ops::Slice(y, axis, s.before, y.dim(axis) - s.before - s.after));
        continue;
      }
      MT_ASSIGN_OR_RETURN(y, ops::PadZeros(y, axis, s.before, s.after));
    }
    return y;
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() != sides_.size() + 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects ",
                       sides_.size() == 1 ? "[batch, steps, channels]" : "NHWC",
                       " input, got ", ShapeToString(input)));
    }
    Shape out = input;
    for (size_t i = 0; i < sides_.size(); ++i) {
      const int64_t cells = sides_[i].before + sides_[i].after;
      if (!crop_) {
        out[i + 1] += cells;
        if (out[i + 1] > kMaxDimension) {
          return absl::InvalidArgumentError(absl::StrCat(
              name(), ": padding ", ShapeToString(input), " by ", cells,
              " is more than ", kMaxDimension, " cells in axis ", i + 1));
        }
        continue;
      }
      if (cells >= input[i + 1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            name(), ": cropping ", sides_[i].before, " and ", sides_[i].after,
            " leaves none of the ", input[i + 1], " cells of axis ", i + 1,
            " of ", ShapeToString(input)));
      }
      out[i + 1] -= cells;
    }
    return out;
  }

 private:
  bool crop_;
  std::vector<Sides> sides_;
};

// The factory of a 1-D (`key` an IntPair: [left, right]) or 2-D (an
// IntBox: [top, bottom, left, right]) layer.
decltype(LayerType::create) EdgesFactory(const char* key, bool crop, int dims) {
  return [=](const LayerSpec& spec,
             LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
    std::vector<Sides> sides;
    if (dims == 1) {
      MT_RETURN_IF_ERROR(b.CheckSequences());
      const std::array<int64_t, 2> lr = spec.params.IntPair(key);
      sides = {{lr[0], lr[1]}};
    } else {
      MT_RETURN_IF_ERROR(CheckImageShape(b.input_shape(), ""));
      const std::array<int64_t, 4> box = spec.params.IntBox(key);
      sides = {{box[0], box[1]}, {box[2], box[3]}};
    }
    // The builder checks the output (a crop leaving cells) with the path.
    return std::unique_ptr<Layer>(
        std::make_unique<EdgesLayer>(b.name(), crop, std::move(sides)));
  };
}

constexpr int64_t kMaxEdge = 1 << 20;

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "zero_padding1d",
     .doc = "steps of zeros before and after each sequence, [batch, "
            "steps, channels] (Keras ZeroPadding1D)",
     .params = {{Param::IntPair("padding").Default(1).Min(0).Max(kMaxEdge).Doc(
         "[before, after]; an integer: both")}},
     .create = EdgesFactory("padding", false, 1)});

MT_REGISTER(
    LayerType,
    {.name = "zero_padding2d",
     .doc = "rows and columns of zeros around the image, NHWC (Keras "
            "ZeroPadding2D)",
     .params = {{Param::IntBox("padding").Default(1).Min(0).Max(kMaxEdge).Doc(
         "[[top, bottom], [left, right]]; [rows above and "
         "below, columns left and right]; an integer: all "
         "four")}},
     .create = EdgesFactory("padding", false, 2)});

MT_REGISTER(LayerType,
            {.name = "cropping1d",
             .doc = "cuts steps off the start and end of each sequence, "
                    "[batch, steps, channels] (Keras Cropping1D)",
             .params = {{Param::IntPair("cropping")
                             .Default(1)
                             .Min(0)
                             .Max(kMaxEdge)
                             .Doc("[start, end] steps cut; an integer: "
                                  "both")}},
             // Its output holds some of its input's values.
             .passes_values_on = true,
             .create = EdgesFactory("cropping", true, 1)});

MT_REGISTER(
    LayerType,
    {.name = "cropping2d",
     .doc = "cuts rows and columns off the image's edges, NHWC (Keras "
            "Cropping2D; U-Net crops a skip connection to the upsampled "
            "size)",
     .params = {{Param::IntBox("cropping")
                     .Default(0)
                     .Min(0)
                     .Max(kMaxEdge)
                     .Doc("[[top, bottom], [left, right]]; [rows off top and "
                          "bottom, columns off each side]; an integer: all "
                          "four")}},
     .passes_values_on = true,
     .create = EdgesFactory("cropping", true, 2)});

}  // namespace mirrortrain::models
