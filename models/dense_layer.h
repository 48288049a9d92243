// Dense (fully connected) layer: activation(x @ kernel + bias), with the
// kernel [in, out] and names `<name>/kernel`, `<name>/bias` as Keras
// (glorot_uniform kernel, zero bias). Config type `dense`.
#ifndef MIRRORTRAIN_MODELS_DENSE_LAYER_H_
#define MIRRORTRAIN_MODELS_DENSE_LAYER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "models/activation.h"
#include "models/initializers.h"
#include "models/kernel_bias_layer.h"
#include "models/layer.h"

namespace mirrortrain::models {

class DenseLayer final : public KernelBiasLayer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  // glorot_uniform kernel from `seed`, zero bias, on `device`.
  static absl::StatusOr<std::unique_ptr<DenseLayer>> Create(
      std::string name, int64_t in, int64_t units,
      const ActivationDef& activation, bool use_bias, uint64_t seed,
      Device device, const WeightInitializers& init = {});

  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  bool InputFeedsProduct() const override { return true; }
  bool InputOnlyFeedsProducts() const override { return true; }
  // Linear (MatMul, MatMulBias: no gradient reads y) or relu with a bias
  // (MatMulBiasRelu: its mask reads y's halves when it has them).
  bool OutputNeedsOnlyHalves() const override;

 private:
  DenseLayer(std::string name, KernelAndBias w, const ActivationDef& activation)
      : KernelBiasLayer(std::move(name), std::move(w)),
        activation_(activation) {}
  const ActivationDef& activation_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_DENSE_LAYER_H_
