// Keras-default weight initialisers, seeded and platform-independent.
#ifndef MIRRORTRAIN_MODELS_INITIALIZERS_H_
#define MIRRORTRAIN_MODELS_INITIALIZERS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "tensor/device.h"
#include "tensor/tensor.h"
#include "tensor/variable.h"

namespace mirrortrain::models {

// A kernel's fans when its shape alone does not give them: an einsum
// kernel's are the products of its input and of its output axes (Keras
// 3.15's EinsumDense hands those to its initializer).
struct Fans {
  double in = 0;
  double out = 0;
};

// U(-limit, limit) with limit = sqrt(6 / (fan_in + fan_out)), as
// keras.initializers.GlorotUniform. Without `fans`, for a kernel
// [..., in, out] the fans are in * receptive field and out * receptive
// field (receptive field = product of the leading dims). The stream of
// numbers depends only on `seed`. A shape larger than the machine's memory
// is InvalidArgument; one that does not fit what is free now,
// ResourceExhausted.
absl::StatusOr<Tensor> GlorotUniform(const Shape& shape, uint64_t seed,
                                     DType dtype = DType::kF32,
                                     std::optional<Fans> fans = std::nullopt);

// U(-limit, limit), as keras.initializers.RandomUniform(-limit, limit)
// (Embedding's default has limit 0.05); the stream of numbers depends only
// on `seed`. GlorotUniform is this with its limit.
absl::StatusOr<Tensor> RandomUniform(const Shape& shape, uint64_t seed,
                                     double limit, DType dtype = DType::kF32);

// Fan-in and fan-out of a kernel shape, as Keras computes them.
void ComputeFans(const Shape& shape, double* fan_in, double* fan_out);

// Variable `name` holding `initial` (drawn on the host) on `device`.
absl::StatusOr<Variable> VariableOn(const std::string& name,
                                    const Tensor& initial, Device device);

// A layer's weights as Keras builds them: "<layer>/kernel" glorot_uniform
// of `kernel_shape` (the stream of `seed`; `fans` as GlorotUniform's) and,
// with `use_bias`, "<layer>/bias" zeros of `bias_shape`, on `device`.
struct KernelAndBias {
  Variable kernel;
  std::optional<Variable> bias;
};
absl::StatusOr<KernelAndBias> MakeKernelAndBias(
    const std::string& layer, const Shape& kernel_shape,
    const Shape& bias_shape, bool use_bias, uint64_t seed, Device device,
    std::optional<Fans> fans = std::nullopt);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_INITIALIZERS_H_
