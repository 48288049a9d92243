// GlobalAveragePooling2D (config type `global_average_pooling2d`): the mean
// over the spatial dimensions of NHWC input, [n, h, w, c] -> [n, c] (or
// [n, 1, 1, c] with keepdims), as Keras.
#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/reduction_ops.h"

namespace mirrortrain::models {
namespace {

class GlobalAveragePooling2DLayer final : public Layer {
 public:
  GlobalAveragePooling2DLayer(std::string name, bool keepdims)
      : Layer(std::move(name)), keepdims_(keepdims) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    return ops::ReduceMean(x, {1, 2}, keepdims_);
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": expects NHWC input, got ", ShapeToString(input)));
    }
    if (keepdims_) return Shape{input[0], 1, 1, input[3]};
    return Shape{input[0], input[3]};
  }

 private:
  bool keepdims_;
};

}  // namespace

MT_REGISTER(LayerType,
            {.name = "global_average_pooling2d",
             .doc = "mean over height and width of NHWC input (Keras "
                    "GlobalAveragePooling2D)",
             .params = {{Param::Bool("keepdims")
                             .Default(false)
                             .Doc("keep the spatial dimensions as size 1")}},
             .create = [](const LayerSpec& spec, LayerBuilder& b)
                 -> absl::StatusOr<std::unique_ptr<Layer>> {
               if (b.input_shape().size() != 4) {
                 return absl::InvalidArgumentError(
                     absl::StrCat("expects NHWC input, got ",
                                  ShapeToString(b.input_shape())));
               }
               return std::make_unique<GlobalAveragePooling2DLayer>(
                   b.name(), spec.params.Bool("keepdims"));
             }});

}  // namespace mirrortrain::models
