// Activation functions selectable by name (Keras's `activation` argument).
//
// One table in activation.cc: a new activation is one row there (and, for
// a new op, the op itself).
#ifndef MIRRORTRAIN_MODELS_ACTIVATION_H_
#define MIRRORTRAIN_MODELS_ACTIVATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/params.h"
#include "tensor/tensor.h"

namespace mirrortrain::models {

struct ActivationDef {
  const char* name;
  // nullptr: the identity ("linear").
  absl::StatusOr<Tensor> (*apply)(const Tensor& x);
  // Elementwise and non-decreasing: max pooling commutes with it, so a conv
  // layer may pool before its bias and activation (conv2d_layer.h).
  bool non_decreasing;
};

// The activation named `name` ("" means linear); InvalidArgument listing
// the known names otherwise.
absl::StatusOr<const ActivationDef*> FindActivation(const std::string& name);
// Every name, for config schemas.
std::vector<std::string> ActivationNames();
// The `activation` key of a layer type or preset.
Param ActivationParam(const std::string& default_value, std::string doc);

absl::StatusOr<Tensor> Activate(const ActivationDef& activation,
                                const Tensor& x);
// activation(x + bias): a layer's epilogue, one fused op for relu.
absl::StatusOr<Tensor> BiasActivate(const ActivationDef& activation,
                                    const Tensor& x, const Tensor& bias);
// activation(x @ kernel + bias) for dense layers: the bias accumulated by
// the product (ops::MatMulBias), or, for relu, one ops::MatMulBiasRelu
// (bias and relu in the GEMM's epilogue on GPUs).
absl::StatusOr<Tensor> ProductBiasActivate(const ActivationDef& activation,
                                           const Tensor& x,
                                           const Tensor& kernel,
                                           const Tensor& bias);
// activation(conv2d(x, kernel) + bias) for conv layers: for relu one
// ops::Conv2DBiasRelu (bias and relu in the GEMMs' epilogue on GPUs), else
// the convolution then BiasActivate.
absl::StatusOr<Tensor> ConvBiasActivate(const ActivationDef& activation,
                                        const Tensor& x, const Tensor& kernel,
                                        const Tensor& bias,
                                        const ops::Conv2DOptions& options);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_ACTIVATION_H_
