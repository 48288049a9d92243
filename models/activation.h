// Activation functions selectable by name.
#ifndef MIRRORTRAIN_MODELS_ACTIVATION_H_
#define MIRRORTRAIN_MODELS_ACTIVATION_H_

#include <string>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::models {

enum class Activation { kLinear, kRelu, kTanh, kSigmoid };

absl::StatusOr<Activation> ParseActivation(const std::string& name);
absl::StatusOr<Tensor> Activate(Activation activation, const Tensor& x);
// activation(x + bias): a layer's epilogue, one fused op for relu.
absl::StatusOr<Tensor> BiasActivate(Activation activation, const Tensor& x,
                                    const Tensor& bias);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_ACTIVATION_H_
