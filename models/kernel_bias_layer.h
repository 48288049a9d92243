// The base of the layers whose variables are one kernel and an optional
// bias (dense, conv2d, conv1d, the transposed and depthwise convolutions).
#ifndef MIRRORTRAIN_MODELS_KERNEL_BIAS_LAYER_H_
#define MIRRORTRAIN_MODELS_KERNEL_BIAS_LAYER_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/initializers.h"
#include "models/layer.h"
#include "tensor/variable.h"

namespace mirrortrain::models {

// A layer whose variables are one kernel and an optional bias
// (MakeKernelAndBias's): they are listed in Keras's order, kernel first.
class KernelBiasLayer : public Layer {
 public:
  std::vector<Variable*> variables() override {
    if (!bias_.has_value()) return {&kernel_};
    return {&kernel_, &*bias_};
  }

 protected:
  KernelBiasLayer(std::string name, KernelAndBias w)
      : Layer(std::move(name)),
        kernel_(std::move(w.kernel)),
        bias_(std::move(w.bias)) {}

  Variable kernel_;
  std::optional<Variable> bias_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_KERNEL_BIAS_LAYER_H_
