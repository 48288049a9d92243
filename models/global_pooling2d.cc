// GlobalAveragePooling2D and GlobalMaxPooling2D (config types
// `global_average_pooling2d`, `global_max_pooling2d`): the mean or the
// maximum over the spatial dimensions of NHWC input, [n, h, w, c] -> [n, c]
// (or [n, 1, 1, c] with keepdims), as Keras.
#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class GlobalPooling2DLayer final : public Layer {
 public:
  GlobalPooling2DLayer(std::string name, bool max, bool keepdims)
      : Layer(std::move(name)), max_(max), keepdims_(keepdims) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    if (x.rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects NHWC input, got ", x.DebugString()));
    }
    if (!max_) return ops::ReduceMean(x, {1, 2}, keepdims_);
    // One window over the whole image: max pooling's kernels and gradient
    // (the first maximum of each channel takes it, TensorFlow's CPU rule
    // for pools; tf.reduce_max would split it between exact ties).
    const int64_t h = x.dim(1), w = x.dim(2);
    MT_ASSIGN_OR_RETURN(Tensor y,
                        ops::MaxPool2D(x, {h, w, h, w, ops::Padding::kValid}));
    if (keepdims_) return y;
    return ops::Reshape(y, {x.dim(0), x.dim(3)});
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_RETURN_IF_ERROR(CheckImageShape(input, name()));
    if (keepdims_) return Shape{input[0], 1, 1, input[3]};
    return Shape{input[0], input[3]};
  }

 private:
  bool max_;
  bool keepdims_;
};

template <bool kMax>
absl::StatusOr<std::unique_ptr<Layer>> CreateGlobalPooling(
    const LayerSpec& spec, LayerBuilder& b) {
  const Shape& in = b.input_shape();
  MT_RETURN_IF_ERROR(CheckImageShape(in, ""));
  if (kMax && (in[1] == 0 || in[2] == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("an empty image has no maximum, got ", ShapeToString(in)));
  }
  return std::make_unique<GlobalPooling2DLayer>(b.name(), kMax,
                                                spec.params.Bool("keepdims"));
}

ParamSchema GlobalPoolingParams() {
  return {{Param::Bool("keepdims")
               .Default(false)
               .Doc("keep the spatial dimensions as size 1")}};
}

}  // namespace

MT_REGISTER(LayerType, {.name = "global_average_pooling2d",
                        .doc = "mean over height and width of NHWC input "
                               "(Keras GlobalAveragePooling2D)",
                        .params = GlobalPoolingParams(),
                        .create = CreateGlobalPooling<false>});

MT_REGISTER(LayerType, {.name = "global_max_pooling2d",
                        .doc = "maximum over height and width of NHWC input "
                               "(Keras GlobalMaxPooling2D)",
                        .params = GlobalPoolingParams(),
                        .create = CreateGlobalPooling<true>});

}  // namespace mirrortrain::models
