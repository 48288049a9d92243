// Dense (fully connected) layer: activation(x @ kernel + bias), with the
// kernel [in, out] and names `<name>/kernel`, `<name>/bias` as Keras.
#ifndef MIRRORTRAIN_MODELS_DENSE_LAYER_H_
#define MIRRORTRAIN_MODELS_DENSE_LAYER_H_

#include <memory>

#include "models/activation.h"
#include "models/layer.h"

namespace mirrortrain::models {

class DenseLayer final : public Layer {
 public:
  // glorot_uniform kernel from `seed`, zero bias, on `device`.
  static absl::StatusOr<std::unique_ptr<DenseLayer>> Create(
      std::string name, int64_t in, int64_t units, Activation activation,
      uint64_t seed, Device device);

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  std::vector<Variable*> variables() override { return {&kernel_, &bias_}; }

 private:
  DenseLayer(std::string name, Variable kernel, Variable bias,
             Activation activation)
      : Layer(std::move(name)),
        kernel_(std::move(kernel)),
        bias_(std::move(bias)),
        activation_(activation) {}
  Variable kernel_;
  Variable bias_;
  Activation activation_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_DENSE_LAYER_H_
