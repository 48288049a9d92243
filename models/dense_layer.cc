#include "models/dense_layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<std::unique_ptr<DenseLayer>> DenseLayer::Create(
    std::string name, int64_t in, int64_t units,
    const ActivationDef& activation, bool use_bias, uint64_t seed,
    Device device, const WeightInitializers& init) {
  MT_ASSIGN_OR_RETURN(KernelAndBias w,
                      MakeKernelAndBias(name, {in, units}, {units}, use_bias,
                                        seed, device, std::nullopt, init));
  return std::unique_ptr<DenseLayer>(
      new DenseLayer(std::move(name), std::move(w), activation));
}

absl::StatusOr<Tensor> DenseLayer::Call(const Tensor& x,
                                        const ForwardContext& ctx) {
  if (x.rank() > 2) {
    // [..., in] -> [rows, in] -> [rows, units] -> [..., units]: one product
    // over every position (Keras Dense on the last axis).
    const int64_t in = x.dim(x.rank() - 1);
    MT_ASSIGN_OR_RETURN(
        Tensor rows,
        ops::Reshape(x, {x.num_elements() / std::max<int64_t>(in, 1), in}));
    MT_ASSIGN_OR_RETURN(Tensor y, Call(rows, ctx));
    Shape out = x.shape();
    out.back() = kernel_.shape()[1];
    return ops::Reshape(y, out);
  }
  if (bias_.has_value()) {
    return ProductBiasActivate(activation_, x, kernel_.value(), bias_->value());
  }
  MT_ASSIGN_OR_RETURN(Tensor h, ops::MatMul(x, kernel_.value()));
  return Activate(activation_, h);
}

bool DenseLayer::OutputNeedsOnlyHalves() const {
  return activation_.apply == nullptr ||
         (activation_.apply == ops::Relu && bias_.has_value());
}

absl::StatusOr<Shape> DenseLayer::OutputShape(const Shape& input) const {
  if (input.size() < 2 || input.back() != kernel_.shape()[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": expects input [batch, ..., ",
                     kernel_.shape()[0], "], got ", ShapeToString(input)));
  }
  Shape out = input;
  out.back() = kernel_.shape()[1];
  return out;
}

MT_REGISTER(
    LayerType,
    {.name = "dense",
     .doc = "activation(x @ kernel + bias) over the last axis (Keras Dense; "
            "inputs [batch, ..., features])",
     .params = {WithInitializerParams(
         {Param::Int("units").Min(1).Max(kMaxDimension).Doc("output width"),
          ActivationParam("linear", "applied after the bias"), UseBiasParam()},
         "kernel_initializer")},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       // Any rank, as Keras: a dense layer on [batch, H, W, C] is a 1x1
       // convolution (ConvNeXt's and MLP-Mixer's pointwise layers). A
       // classifier left without its flatten is named by the trainer's
       // check of the model's output.
       if (b.input_shape().size() < 2) {
         return absl::InvalidArgumentError(
             absl::StrCat("expects [batch, ..., features] input, got ",
                          ShapeToString(b.input_shape())));
       }
       MT_ASSIGN_OR_RETURN(const ActivationDef* act,
                           FindActivation(spec.params.String("activation")));
       return DenseLayer::Create(
           b.name(), b.input_shape().back(), spec.params.Int("units"), *act,
           spec.params.Bool("use_bias"), b.NextSeed(), b.device(),
           ReadInitializers(spec.params, "kernel_initializer"));
     }});

}  // namespace mirrortrain::models
