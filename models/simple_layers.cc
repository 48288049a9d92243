#include "models/simple_layers.h"

#include "absl/strings/str_cat.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/window.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<Tensor> MaxPool2DLayer::Call(const Tensor& x,
                                            const ForwardContext&) {
  return ops::MaxPool2D(x, options());
}

absl::StatusOr<Tensor> AvgPool2DLayer::Call(const Tensor& x,
                                            const ForwardContext&) {
  return ops::AvgPool2D(x, options());
}

absl::StatusOr<Shape> Pool2DLayer::OutputShape(const Shape& input) const {
  MT_RETURN_IF_ERROR(CheckImageShape(input, name()));
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

absl::StatusOr<Tensor> ReshapeLayer::Call(const Tensor& x,
                                          const ForwardContext&) {
  // Explicit sizes, as Flatten.
  MT_ASSIGN_OR_RETURN(Shape shape, OutputShape(x.shape()));
  return ops::Reshape(x, shape);
}

absl::StatusOr<Shape> ReshapeLayer::OutputShape(const Shape& input) const {
  if (input.empty() || NumElements(absl::MakeConstSpan(input).subspan(1)) !=
                           NumElements(target_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": cannot reshape ", ShapeToString(input),
                     " to [batch] + ", ShapeToString(target_)));
  }
  Shape out = {input[0]};
  out.insert(out.end(), target_.begin(), target_.end());
  return out;
}

absl::StatusOr<Tensor> DropoutLayer::Call(const Tensor& x,
                                          const ForwardContext& ctx) {
  if (!ctx.training || rate_ == 0.0) return x;
  // The seed mixes the step and this layer; the offset places the shard in
  // the global batch.
  if (!channels_) {
    const int64_t row = x.dim(0) == 0 ? 0 : x.num_elements() / x.dim(0);
    return ctx.Dropout(x, rate_, static_cast<uint64_t>(index_), /*salt=*/0,
                       ctx.row_offset * row);
  }
  // The mask of [batch, 1, ..., channels] (dropout of ones), broadcast.
  Shape noise(x.rank(), 1);
  noise.front() = x.dim(0);
  noise.back() = x.dim(x.rank() - 1);
  MT_ASSIGN_OR_RETURN(const Tensor ones,
                      ops::Fill(x.dtype(), noise, 1.0, x.device()));
  MT_ASSIGN_OR_RETURN(const Tensor mask,
                      ctx.Dropout(ones, rate_, static_cast<uint64_t>(index_),
                                  salt_, ctx.row_offset * noise.back()));
  return ops::Mul(x, mask);
}

absl::StatusOr<Tensor> ActivationLayer::Call(const Tensor& x,
                                             const ForwardContext&) {
  return Activate(activation_, x);
}

namespace {

using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

// pool_size, strides and padding, as Keras's pooling layers.
ParamSchema PoolParams() {
  return {{Param::IntPair("pool_size")
               .Default(2)
               .Min(1)
               .Max(kMaxDimension)
               .Doc("window [height, width]; an integer: a square"),
           Param::IntPair("strides")
               .Nullable()
               .Min(1)
               .Max(kMaxDimension)
               .Doc("step [down, across]; an integer: both; null: "
                    "pool_size"),
           Param::String("padding")
               .Default("valid")
               .OneOf({"valid", "same"})
               .Doc("valid: windows inside the image; same: ceil(in / "
                    "strides) outputs")}};
}

template <typename PoolLayer>
LayerOr CreatePool(const LayerSpec& spec, LayerBuilder& b) {
  MT_RETURN_IF_ERROR(CheckImageShape(b.input_shape(), ""));
  const std::array<int64_t, 2> k = spec.params.IntPair("pool_size");
  const std::array<int64_t, 2> s =
      spec.params.OptionalIntPair("strides").value_or(k);
  const bool same = spec.params.String("padding") == "same";
  MT_RETURN_IF_ERROR(b.CheckWindow("pool_size", k, same));
  return std::make_unique<PoolLayer>(
      b.name(),
      ops::Pool2DOptions{k[0], k[1], s[0], s[1],
                         same ? ops::Padding::kSame : ops::Padding::kValid});
}

// Keras's Identity: its input, as it is (a branch of a `parallel` that
// passes the input on); the mask passes too.
class IdentityLayer final : public Layer {
 public:
  explicit IdentityLayer(std::string name) : Layer(std::move(name)) {}
  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    return x;
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }
  bool SupportsMasking() const override { return true; }
};

}  // namespace

MT_REGISTER(LayerType,
            {.name = "identity",
             .doc = "its input as it is (Keras Identity): a `parallel` "
                    "branch that passes the input on",
             .passes_values_on = true,
             .returns_input = true,
             .create = [](const LayerSpec&, LayerBuilder& b) -> LayerOr {
               return std::make_unique<IdentityLayer>(b.name());
             }});

MT_REGISTER(LayerType,
            {.name = "max_pooling2d",
             .doc = "maximum over windows, NHWC (Keras MaxPooling2D)",
             .params = PoolParams(),
             .create = CreatePool<MaxPool2DLayer>});
MT_REGISTER(LayerType,
            {.name = "average_pooling2d",
             .doc = "mean over windows, NHWC; padded cells are not counted "
                    "(Keras AveragePooling2D)",
             .params = PoolParams(),
             .create = CreatePool<AvgPool2DLayer>});

MT_REGISTER(LayerType,
            {.name = "flatten",
             .doc = "[batch, ...] -> [batch, product of the rest]",
             .passes_values_on = true,
             .create = [](const LayerSpec&, LayerBuilder& b) -> LayerOr {
               return std::make_unique<FlattenLayer>(b.name());
             }});

MT_REGISTER(
    LayerType,
    {.name = "reshape",
     .doc = "[batch, ...] -> [batch, target_shape...], the same elements "
            "(Keras Reshape)",
     .params = {{Param::IntList("target_shape")
                     .Min(1)
                     .Max(kMaxDimension)
                     .MinLength(1)
                     .Doc("one example's new shape (no -1)")}},
     .passes_values_on = true,
     .create = [](const LayerSpec& spec, LayerBuilder& b) -> LayerOr {
       auto layer = std::make_unique<ReshapeLayer>(
           b.name(), spec.params.IntList("target_shape"));
       // Checked here, so a bad shape names the layer's config path.
       if (!layer->OutputShape(b.input_shape()).ok()) {
         const Shape target = spec.params.IntList("target_shape");
         const Shape& in = b.input_shape();
         const Shape example(in.begin() + (in.empty() ? 0 : 1), in.end());
         return absl::InvalidArgumentError(absl::StrCat(
             "target_shape: ", ShapeToString(target), " holds ",
             NumElements(target), " elements but an input example ",
             ShapeToString(example), " holds ", NumElements(example)));
       }
       return LayerOr(std::move(layer));
     }});

MT_REGISTER(
    LayerType,
    {.name = "dropout",
     .doc = "inverted dropout while training, identity otherwise; the mask "
            "is a hash of (seed, step, layer, element of the global batch)",
     .params = {{Param::Float("rate").Min(0).Max(1, false).Doc(
         "fraction of inputs dropped")}},
     .passes_values_on = true,
     .create = [](const LayerSpec& spec, LayerBuilder& b) -> LayerOr {
       return std::make_unique<DropoutLayer>(
           b.name(), spec.params.Float("rate"), b.type_index());
     }});

// Keras's SpatialDropout1D, 2D and 3D: whole channels of sequences,
// images or volumes (clips).
LayerType SpatialDropout(const char* name, int rank, const char* what) {
  return {.name = name,
          .doc = absl::StrCat("drops whole channels of ", what,
                              " while training (Keras's SpatialDropout",
                              rank - 2, "D), identity otherwise"),
          .params = {{Param::Float("rate").Min(0).Max(1, false).Doc(
              "fraction of channels dropped, per example")}},
          .passes_values_on = true,
          .create = [rank](const LayerSpec& spec, LayerBuilder& b) -> LayerOr {
            if (rank == 5 && b.input_shape().size() != 5) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "expects [batch, d1, d2, d3, channels] input, got ",
                  ShapeToString(b.input_shape())));
            }
            MT_RETURN_IF_ERROR(rank == 3 ? b.CheckSequences()
                               : rank == 4
                                   ? CheckImageShape(b.input_shape(), "")
                                   : absl::OkStatus());
            // "spatial" and the rank: each kind's masks its own.
            return std::make_unique<DropoutLayer>(
                b.name(), spec.params.Float("rate"), b.type_index(),
                /*channels=*/true,
                0x7370617469616c00ULL + static_cast<uint64_t>(rank));
          }};
}

MT_REGISTER(LayerType, (SpatialDropout("spatial_dropout1d", 3,
                                       "sequences [batch, steps, channels]")));
MT_REGISTER(LayerType, (SpatialDropout("spatial_dropout2d", 4,
                                       "images [batch, h, w, c]")));
MT_REGISTER(LayerType,
            (SpatialDropout("spatial_dropout3d", 5,
                            "volumes or clips [batch, d1, d2, d3, c]")));

MT_REGISTER(LayerType,
            {.name = "activation",
             .doc = "an activation function on its own (Keras Activation)",
             .params = {{Param::String("activation")
                             .OneOf(ActivationNames())
                             .Doc("the function")}},
             .create = [](const LayerSpec& spec, LayerBuilder& b) -> LayerOr {
               MT_ASSIGN_OR_RETURN(
                   const ActivationDef* act,
                   FindActivation(spec.params.String("activation")));
               return std::make_unique<ActivationLayer>(b.name(), *act);
             }});

}  // namespace mirrortrain::models
