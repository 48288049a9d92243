#include "models/activation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

constexpr ActivationDef kActivations[] = {
    {"linear", nullptr, true},
    {"relu", ops::Relu, true},
    {"tanh", ops::Tanh, true},
    {"sigmoid", ops::Sigmoid, true},
    // Not monotone (a dip before rising): never pooled inside a conv layer.
    {"gelu", [](const Tensor& x) { return ops::Gelu(x, false); }, false},
    {"gelu_tanh", [](const Tensor& x) { return ops::Gelu(x, true); }, false},
    // Also not monotone; `swish` is Keras's other name for it.
    {"silu", ops::Silu, false},
    {"swish", ops::Silu, false},
    // Non-decreasing as computed, as relu (values below 0 are no bar: a max
    // pool commutes with any non-decreasing function).
    {"elu", ops::Elu, true},
    {"selu", ops::Selu, true},
    {"softplus", ops::Softplus, true},
    {"leaky_relu", ops::LeakyRelu, true},
    {"relu6", ops::Relu6, true},
    // Over the last axis, as Keras; not elementwise.
    {"softmax", ops::Softmax, false},
};

}  // namespace

absl::StatusOr<const ActivationDef*> FindActivation(const std::string& name) {
  for (const ActivationDef& a : kActivations) {
    if (name == a.name || (name.empty() && a.apply == nullptr)) return &a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown activation '", name, "' (expected one of ",
                   absl::StrJoin(ActivationNames(), ", "), ")"));
}

std::vector<std::string> ActivationNames() {
  std::vector<std::string> out;
  for (const ActivationDef& a : kActivations) out.push_back(a.name);
  return out;
}

Param ActivationParam(const std::string& default_value, std::string doc) {
  return Param::String("activation")
      .Default(ParamValue(default_value))
      .OneOf(ActivationNames())
      .Doc(std::move(doc));
}

absl::StatusOr<Tensor> Activate(const ActivationDef& activation,
                                const Tensor& x) {
  if (activation.apply == nullptr) return x;
  return activation.apply(x);
}

absl::StatusOr<Tensor> BiasActivate(const ActivationDef& activation,
                                    const Tensor& x, const Tensor& bias) {
  if (activation.apply == ops::Relu) return ops::BiasAddRelu(x, bias);
  MT_ASSIGN_OR_RETURN(Tensor z, ops::BiasAdd(x, bias));
  return Activate(activation, z);
}

absl::StatusOr<Tensor> ProductBiasActivate(const ActivationDef& activation,
                                           const Tensor& x,
                                           const Tensor& kernel,
                                           const Tensor& bias) {
  if (activation.apply == ops::Relu) {
    return ops::MatMulBiasRelu(x, kernel, bias);
  }
  MT_ASSIGN_OR_RETURN(Tensor z, ops::MatMulBias(x, kernel, bias));
  return Activate(activation, z);
}

absl::StatusOr<Tensor> ConvBiasActivate(const ActivationDef& activation,
                                        const Tensor& x, const Tensor& kernel,
                                        const Tensor& bias,
                                        const ops::Conv2DOptions& options) {
  if (activation.apply == ops::Relu) {
    return ops::Conv2DBiasRelu(x, kernel, bias, options);
  }
  MT_ASSIGN_OR_RETURN(Tensor y, ops::Conv2D(x, kernel, options));
  return BiasActivate(activation, y, bias);
}

}  // namespace mirrortrain::models
