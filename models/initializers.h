// Keras's weight initialisers, seeded and platform-independent: the
// defaults (glorot_uniform kernels, zero biases) and the rest of what a
// layer's `kernel_initializer` / `bias_initializer` may name.
#ifndef MIRRORTRAIN_MODELS_INITIALIZERS_H_
#define MIRRORTRAIN_MODELS_INITIALIZERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/device.h"
#include "tensor/params.h"
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

// N(0, stddev) truncated at two standard deviations, as
// keras.initializers.TruncatedNormal; the stream depends only on `seed`
// (rejection sampling over mt19937_64 in arithmetic alone: the same bits on
// every host and C library).
absl::StatusOr<Tensor> TruncatedNormal(const Shape& shape, uint64_t seed,
                                       double stddev,
                                       DType dtype = DType::kF32);

// keras.initializers.Orthogonal (gain 1): for a shape [..., cols] read as
// rows x cols, the Q factor (R's diagonal positive) of a Gaussian
// max x min matrix, transposed where rows < cols, so its rows or its
// columns are orthonormal. Seeded, the same bits on every host.
// InvalidArgument below rank 2.
absl::StatusOr<Tensor> Orthogonal(const Shape& shape, uint64_t seed);

// The initialisers a config may name, Keras's (keras.initializers.get):
// glorot_uniform, glorot_normal, he_uniform, he_normal, lecun_uniform,
// lecun_normal (VarianceScaling: scale 1 or 2 over fan_avg or fan_in, a
// uniform or a truncated normal of that variance), zeros, ones, orthogonal.
std::vector<std::string> InitializerNames();
// `name`'s values for a variable of `shape` (fans: as GlorotUniform's),
// drawn from `seed`. glorot_uniform is GlorotUniform bit for bit.
// InvalidArgument for an unknown name.
absl::StatusOr<Tensor> Initialize(const std::string& name, const Shape& shape,
                                  uint64_t seed,
                                  std::optional<Fans> fans = std::nullopt);

// What a layer's kernel and bias start from (its config keys).
struct WeightInitializers {
  std::string kernel = "glorot_uniform";
  std::string bias = "zeros";
};
// `params`, then the keys `kernel_key` (kernel_initializer;
// depthwise_initializer for depthwise_conv2d) and bias_initializer, with
// Keras's defaults.
std::vector<Param> WithInitializerParams(std::vector<Param> params,
                                         const std::string& kernel_key);
// Their values in `params`.
WeightInitializers ReadInitializers(const Params& params,
                                    const std::string& kernel_key);

// Variable `name` holding `initial` (drawn on the host) on `device`.
absl::StatusOr<Variable> VariableOn(const std::string& name,
                                    const Tensor& initial, Device device);

// A layer's weights as Keras builds them: "<layer>/kernel" of
// `kernel_shape` from `init.kernel` (glorot_uniform by default; the stream
// of `seed`; `fans` as GlorotUniform's) and, with `use_bias`,
// "<layer>/bias" of `bias_shape` from `init.bias` (zeros by default; a
// random one draws from a stream derived from `seed`), on `device`.
struct KernelAndBias {
  Variable kernel;
  std::optional<Variable> bias;
};
// `kernel_name` names the kernel inside the layer (Keras's
// SeparableConv2D has a depthwise_kernel and a pointwise_kernel).
absl::StatusOr<KernelAndBias> MakeKernelAndBias(
    const std::string& layer, const Shape& kernel_shape,
    const Shape& bias_shape, bool use_bias, uint64_t seed, Device device,
    std::optional<Fans> fans = std::nullopt,
    const WeightInitializers& init = {},
    const std::string& kernel_name = "kernel");

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_INITIALIZERS_H_
