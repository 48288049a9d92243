#include "models/initializers.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

void ComputeFans(const Shape& shape, double* fan_in, double* fan_out) {
  if (shape.empty()) {
    *fan_in = *fan_out = 1;
  } else if (shape.size() == 1) {
    *fan_in = *fan_out = static_cast<double>(shape[0]);
  } else {
    double receptive = 1;
    for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= shape[i];
    *fan_in = shape[shape.size() - 2] * receptive;
    *fan_out = shape[shape.size() - 1] * receptive;
  }
}

absl::StatusOr<Tensor> RandomUniform(const Shape& shape, uint64_t seed,
                                     double limit, DType dtype) {
  MT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dtype, shape));
  // mt19937_64's sequence is fixed by the standard; the conversion to [0,1)
  // is done here (not by a distribution) so it is the same everywhere.
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    double v = (2.0 * u - 1.0) * limit;
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(v);
    } else {
      t.data<double>()[i] = v;
    }
  }
  return t;
}

absl::StatusOr<Tensor> GlorotUniform(const Shape& shape, uint64_t seed,
                                     DType dtype, std::optional<Fans> fans) {
  double fan_in, fan_out;
  if (fans.has_value()) {
    fan_in = fans->in;
    fan_out = fans->out;
  } else {
    ComputeFans(shape, &fan_in, &fan_out);
  }
  const double limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
  return RandomUniform(shape, seed, limit, dtype);
}

absl::StatusOr<Variable> VariableOn(const std::string& name,
                                    const Tensor& initial, Device device) {
  MT_ASSIGN_OR_RETURN(Tensor on_device, initial.To(device));
  return Variable::Create(name, on_device);
}

absl::StatusOr<KernelAndBias> MakeKernelAndBias(const std::string& layer,
                                                const Shape& kernel_shape,
                                                const Shape& bias_shape,
                                                bool use_bias, uint64_t seed,
                                                Device device,
                                                std::optional<Fans> fans) {
  MT_ASSIGN_OR_RETURN(Tensor initial,
                      GlorotUniform(kernel_shape, seed, DType::kF32, fans));
  MT_ASSIGN_OR_RETURN(
      Variable kernel,
      VariableOn(absl::StrCat(layer, "/kernel"), initial, device));
  KernelAndBias w{std::move(kernel), std::nullopt};
  if (use_bias) {
    MT_ASSIGN_OR_RETURN(Tensor b,
                        Tensor::Zeros(DType::kF32, bias_shape, device));
    MT_ASSIGN_OR_RETURN(w.bias,
                        Variable::Create(absl::StrCat(layer, "/bias"), b));
  }
  return w;
}

}  // namespace mirrortrain::models
