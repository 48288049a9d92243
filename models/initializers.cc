#include "models/initializers.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "tensor/vector_math.h"

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

namespace {

// t[i] = v in t's float dtype.
void Store(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kF32) {
    t.data<float>()[i] = static_cast<float>(v);
  } else {
    t.data<double>()[i] = v;
  }
}

// `fans`, else the shape's as Keras computes them.
Fans FansOf(const Shape& shape, std::optional<Fans> fans) {
  if (fans.has_value()) return *fans;
  Fans out;
  ComputeFans(shape, &out.in, &out.out);
  return out;
}

}  // namespace

absl::StatusOr<Tensor> RandomUniform(const Shape& shape, uint64_t seed,
                                     double limit, DType dtype) {
  MT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dtype, shape));
  // mt19937_64's sequence is fixed by the standard; the conversion to [0,1)
  // is done here (not by a distribution) so it is the same everywhere.
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    Store(t, i, (2.0 * u - 1.0) * limit);
  }
  return t;
}

absl::StatusOr<Tensor> GlorotUniform(const Shape& shape, uint64_t seed,
                                     DType dtype, std::optional<Fans> fans) {
  const Fans f = FansOf(shape, fans);
  const double limit = std::sqrt(6.0 / std::max(1.0, f.in + f.out));
  return RandomUniform(shape, seed, limit, dtype);
}

namespace {

// A standard normal truncated at +-`bound` by rejection from U(-bound,
// bound) under the density's shape, from arithmetic alone (vmath::ExpF,
// not libm's exp, log or cos, whose last bits differ between C libraries),
// so every host draws the same numbers.
double NormalDraw(std::mt19937_64& rng, double bound) {
  auto uniform = [&rng] {
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
  };
  for (;;) {
    const double z = 2.0 * bound * uniform() - bound;
    const double accept = uniform();
    if (accept < vmath::ExpF(static_cast<float>(-0.5 * z * z))) return z;
  }
}

}  // namespace

absl::StatusOr<Tensor> TruncatedNormal(const Shape& shape, uint64_t seed,
                                       double stddev, DType dtype) {
  MT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dtype, shape));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    Store(t, i, NormalDraw(rng, 2.0) * stddev);
  }
  return t;
}

absl::StatusOr<Tensor> Orthogonal(const Shape& shape, uint64_t seed) {
  if (shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "orthogonal: needs a shape of rank >= 2, got ", ShapeToString(shape)));
  }
  const int64_t cols = shape.back();
  const int64_t rows = NumElements(shape) / std::max<int64_t>(cols, 1);
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  MT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(DType::kF32, shape));
  if (n == 0) return t;
  // A Gaussian m x n matrix (truncated at 8 sigma, which no draw of a
  // weight matrix tells apart), column-major.
  std::mt19937_64 rng(seed);
  std::vector<double> q(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) q[j * m + i] = NormalDraw(rng, 8.0);
  }
  // Its Q factor with R's diagonal positive (Keras's q * sign(diag(r)),
  // the one Q that has it) by Gram-Schmidt with a second pass: additions,
  // products and sqrt alone, so the same bits on every host (LAPACK's
  // kernels round differently per CPU).
  for (int64_t j = 0; j < n; ++j) {
    double* col = &q[j * m];
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = 0; k < j; ++k) {
        const double* prev = &q[k * m];
        double dot = 0;
        for (int64_t i = 0; i < m; ++i) dot += prev[i] * col[i];
        for (int64_t i = 0; i < m; ++i) col[i] -= dot * prev[i];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += col[i] * col[i];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < m; ++i) col[i] /= norm;
  }
  // [rows, cols]: Q itself where rows >= cols, else its transpose.
  float* out = t.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] =
          static_cast<float>(rows >= cols ? q[c * m + r] : q[r * m + c]);
    }
  }
  return t;
}

namespace {

// keras.initializers.VarianceScaling's parameters of a named initialiser.
struct VarianceScaling {
  double scale;
  bool fan_in_only;  // fan_in; else fan_avg.
  bool uniform;      // uniform; else truncated_normal.
};

struct NamedInitializer {
  const char* name;
  std::optional<VarianceScaling> scaling;  // Absent: the constant.
  double constant = 0;
};

constexpr double kTruncatedStddevCorrection = 0.87962566103423978;

constexpr NamedInitializer kInitializers[] = {
    {"glorot_uniform", VarianceScaling{1, false, true}},
    {"glorot_normal", VarianceScaling{1, false, false}},
    {"he_uniform", VarianceScaling{2, true, true}},
    {"he_normal", VarianceScaling{2, true, false}},
    {"lecun_uniform", VarianceScaling{1, true, true}},
    {"lecun_normal", VarianceScaling{1, true, false}},
    {"zeros", std::nullopt, 0},
    {"ones", std::nullopt, 1},
};

// Keeps a layer's kernel stream (its seed) as it was before biases could
// be random: the bias draws from another.
uint64_t BiasSeed(uint64_t seed) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<std::string> InitializerNames() {
  std::vector<std::string> out;
  for (const NamedInitializer& i : kInitializers) out.push_back(i.name);
  out.push_back("orthogonal");
  return out;
}

absl::StatusOr<Tensor> Initialize(const std::string& name, const Shape& shape,
                                  uint64_t seed, std::optional<Fans> fans) {
  // The default keeps its own function, and its numbers.
  if (name == "glorot_uniform") {
    return GlorotUniform(shape, seed, DType::kF32, fans);
  }
  if (name == "orthogonal") return Orthogonal(shape, seed);
  for (const NamedInitializer& i : kInitializers) {
    if (name != i.name) continue;
    if (!i.scaling.has_value()) {
      MT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(DType::kF32, shape));
      std::fill_n(t.data<float>(), t.num_elements(),
                  static_cast<float>(i.constant));
      return t;
    }
    const Fans f = FansOf(shape, fans);
    const double n =
        std::max(1.0, i.scaling->fan_in_only ? f.in : (f.in + f.out) / 2.0);
    const double variance = i.scaling->scale / n;
    if (i.scaling->uniform) {
      return RandomUniform(shape, seed, std::sqrt(3.0 * variance));
    }
    return TruncatedNormal(shape, seed,
                           std::sqrt(variance) / kTruncatedStddevCorrection);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown initializer '", name, "' (expected one of ",
                   absl::StrJoin(InitializerNames(), ", "), ")"));
}

std::vector<Param> WithInitializerParams(std::vector<Param> params,
                                         const std::string& kernel_key) {
  params.push_back(Param::String(kernel_key)
                       .Default("glorot_uniform")
                       .OneOf(InitializerNames())
                       .Doc("the kernel's initial values (Keras's names: "
                            "variance scaling over fan_avg (glorot) or "
                            "fan_in (he: scale 2; lecun), uniform or "
                            "truncated normal; or orthogonal)"));
  // Orthogonal needs a matrix and a bias is a vector (but for the GRU's [2,
  // 3 units], which Keras would orthogonalise): not offered for biases.
  std::vector<std::string> bias_names = InitializerNames();
  std::erase(bias_names, "orthogonal");
  params.push_back(Param::String("bias_initializer")
                       .Default("zeros")
                       .OneOf(std::move(bias_names))
                       .Doc("the bias's initial values"));
  return params;
}

WeightInitializers ReadInitializers(const Params& params,
                                    const std::string& kernel_key) {
  return {params.String(kernel_key), params.String("bias_initializer")};
}

absl::StatusOr<Variable> VariableOn(const std::string& name,
                                    const Tensor& initial, Device device) {
  MT_ASSIGN_OR_RETURN(Tensor on_device, initial.To(device));
  return Variable::Create(name, on_device);
}

absl::StatusOr<KernelAndBias> MakeKernelAndBias(
    const std::string& layer, const Shape& kernel_shape,
    const Shape& bias_shape, bool use_bias, uint64_t seed, Device device,
    std::optional<Fans> fans, const WeightInitializers& init,
    const std::string& kernel_name) {
  MT_ASSIGN_OR_RETURN(Tensor initial,
                      Initialize(init.kernel, kernel_shape, seed, fans));
  MT_ASSIGN_OR_RETURN(
      Variable kernel,
      VariableOn(absl::StrCat(layer, "/", kernel_name), initial, device));
  KernelAndBias w{std::move(kernel), std::nullopt};
  if (use_bias && init.bias == "zeros") {
    MT_ASSIGN_OR_RETURN(Tensor b,
                        Tensor::Zeros(DType::kF32, bias_shape, device));
    MT_ASSIGN_OR_RETURN(w.bias,
                        Variable::Create(absl::StrCat(layer, "/bias"), b));
  } else if (use_bias) {
    MT_ASSIGN_OR_RETURN(Tensor b,
                        Initialize(init.bias, bias_shape, BiasSeed(seed)));
    MT_ASSIGN_OR_RETURN(w.bias,
                        VariableOn(absl::StrCat(layer, "/bias"), b, device));
  }
  return w;
}

}  // namespace mirrortrain::models
