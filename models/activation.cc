#include "models/activation.h"

#include "absl/strings/str_cat.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<Activation> ParseActivation(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "linear" || name.empty()) return Activation::kLinear;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown activation '", name,
                   "' (expected relu, tanh, sigmoid, linear)"));
}

absl::StatusOr<Tensor> Activate(Activation activation, const Tensor& x) {
  switch (activation) {
    case Activation::kRelu:
      return ops::Relu(x);
    case Activation::kTanh:
      return ops::Tanh(x);
    case Activation::kSigmoid:
      return ops::Sigmoid(x);
    case Activation::kLinear:
      return x;
  }
  return x;
}

absl::StatusOr<Tensor> BiasActivate(Activation activation, const Tensor& x,
                                    const Tensor& bias) {
  if (activation == Activation::kRelu) return ops::BiasAddRelu(x, bias);
  MT_ASSIGN_OR_RETURN(Tensor z, ops::BiasAdd(x, bias));
  return Activate(activation, z);
}

}  // namespace mirrortrain::models
