// vector_math.h's branch-free float functions against the C library in
// double, over their whole range: exp's relative error, the normal CDF's
// absolute error and its lower tail's relative error, the tanh used inside
// the gelu, and the gelu and its gradient as the CPU kernels compute them
// (elementwise_kind.h) against the exact formula.
#include "tensor/vector_math.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/elementwise_kind.h"
#include "tensor/ops/math_ops.h"
#include "tensor/tensor.h"

namespace mirrortrain {
namespace {

// Walks [lo, hi] in `steps` equal steps.
template <typename F>
void Sweep(double lo, double hi, int steps, F f) {
  for (int i = 0; i <= steps; ++i) {
    f(static_cast<float>(lo + (hi - lo) * i / steps));
  }
}

double PhiExact(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(VectorMathTest, ExpIsWithinAFewUlpOverItsRange) {
  double worst = 0;
  Sweep(-87.0, 88.0, 400000, [&](float x) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(vmath::ExpF(x) - exact) / exact);
  });
  EXPECT_LT(worst, 2.5e-7);
  EXPECT_EQ(vmath::ExpF(0.0f), 1.0f);
  EXPECT_EQ(vmath::ExpF(-100.0f), 0.0f);
  EXPECT_EQ(vmath::ExpF(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isfinite(vmath::ExpF(1000.0f)));
  EXPECT_TRUE(std::isnan(vmath::ExpF(std::nanf(""))));
}

TEST(VectorMathTest, NormalCdfIsAccurateAndItsLowerTailRelativelySo) {
  double worst_abs = 0, worst_tail = 0;
  Sweep(-13.0, 13.0, 400000, [&](float x) {
    const double exact = PhiExact(x);
    worst_abs = std::max(worst_abs, std::abs(vmath::NormalCdf(x) - exact));
    // Further out, rounding x^2/2 in float alone costs more than 1e-6 of
    // exp(-x^2/2) (measured 4e-6 at -13); float 1 + erf(x) has lost every
    // digit from about -5.5 on.
    if (x < 0 && x > -6) {
      worst_tail =
          std::max(worst_tail, std::abs(vmath::NormalCdf(x) - exact) / exact);
    }
  });
  EXPECT_LT(worst_abs, 3e-7);
  EXPECT_LT(worst_tail, 2e-6);  // measured 1.1e-6
  EXPECT_EQ(vmath::NormalCdf(40.0f), 1.0f);
  EXPECT_LT(vmath::NormalCdf(-40.0f), 1e-38f);
  EXPECT_TRUE(std::isnan(vmath::NormalCdf(std::nanf(""))));
}

TEST(VectorMathTest, NormalPdfAndTanhAreAccurate) {
  double worst_pdf = 0, worst_tanh = 0;
  Sweep(-12.0, 12.0, 200000, [&](float x) {
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    worst_pdf = std::max(worst_pdf, std::abs(vmath::NormalPdf(x) - pdf));
    worst_tanh = std::max(worst_tanh,
                          std::abs(vmath::TanhAbs(x) - std::tanh(double{x})));
  });
  EXPECT_LT(worst_pdf, 1e-7);
  EXPECT_LT(worst_tanh, 2e-7);
  EXPECT_EQ(vmath::TanhAbs(100.0f), 1.0f);
  EXPECT_EQ(vmath::TanhAbs(-100.0f), -1.0f);
}

// The CPU kernels' float gelu and gradient (both forms) against the exact
// formulas in double. The error is absolute, scaled by max(1, |x|): every
// form multiplies an O(1) quantity computed to ~1e-7 absolute by x, so this
// is what float evaluation allows (glibc's erff/tanhf/expf give 1.0e-7,
// 1.3e-7, 1.3e-7 and 1.2e-7 here; these measured 1.0e-7, 1.1e-7, 1.9e-7
// and 4.0e-7).
TEST(VectorMathTest, FloatGeluAndGradientMatchDouble) {
  double worst[4] = {0, 0, 0, 0};
  const auto err = [](float x, double got, double exact) {
    return std::abs(got - exact) / std::max(1.0, std::abs(double{x}));
  };
  Sweep(-10.0, 10.0, 200000, [&](float x) {
    const double xd = x;
    const double u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
    const double t = std::tanh(u);
    const double pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    const double exact[4] = {
        xd * PhiExact(xd), 0.5 * xd * (1 + t), PhiExact(xd) + xd * pdf,
        0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * 0.7978845608028654 *
                            (1 + 3 * 0.044715 * xd * xd)};
    const float got[4] = {ApplyUnary(UnaryKind::kGelu, x),
                          ApplyUnary(UnaryKind::kGeluTanh, x),
                          ApplyBinary(BinaryKind::kGeluGrad, 1.0f, x),
                          ApplyBinary(BinaryKind::kGeluTanhGrad, 1.0f, x)};
    for (int k = 0; k < 4; ++k) {
      worst[k] = std::max(worst[k], err(x, got[k], exact[k]));
    }
  });
  EXPECT_LT(worst[0], 2e-7) << "gelu";
  EXPECT_LT(worst[1], 2e-7) << "gelu (tanh)";
  EXPECT_LT(worst[2], 3e-7) << "gelu gradient";
  EXPECT_LT(worst[3], 6e-7) << "gelu (tanh) gradient";
}

// The CPU kernels are compiled twice, for AVX2 and baseline x86-64
// (vector_clones.h), and run whichever this CPU supports: either must give
// the bits of the functions evaluated one by one in this (baseline) file,
// so results do not depend on the machine.
TEST(VectorMathTest, CpuKernelsComputeTheBitsOfTheScalarFunctions) {
  std::vector<float> xs = {0.0f, -0.0f, 1e-30f, -1e-30f, 40.0f, -40.0f};
  for (int i = 0; i <= 10007; ++i) xs.push_back(-14.0f + 28.0f * i / 10007);
  std::vector<float> gs(xs.size());
  for (size_t i = 0; i < gs.size(); ++i) gs[i] = std::sin(0.37f * i);
  const Shape shape = {static_cast<int64_t>(xs.size())};
  const Tensor x = Tensor::FromVector(xs, shape);
  const Tensor g = Tensor::FromVector(gs, shape);
  const auto same_bits = [&](const Tensor& got, auto expected, const char* f) {
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got.data<float>()[i]),
                std::bit_cast<uint32_t>(expected(i)))
          << f << " at x = " << xs[i];
    }
  };
  for (UnaryKind kind : {UnaryKind::kGelu, UnaryKind::kGeluTanh,
                         UnaryKind::kSigmoid, UnaryKind::kExp}) {
    auto y = ops::internal::UnaryKernel("Unary", kind, x);
    ASSERT_TRUE(y.ok()) << y.status();
    same_bits(
        *y, [&](size_t i) { return ApplyUnary(kind, xs[i]); }, "unary");
  }
  for (BinaryKind kind : {BinaryKind::kGeluGrad, BinaryKind::kGeluTanhGrad,
                          BinaryKind::kMul, BinaryKind::kDiv}) {
    auto y = ops::internal::BinaryKernel("Binary", kind, g, x);
    ASSERT_TRUE(y.ok()) << y.status();
    same_bits(
        *y, [&](size_t i) { return ApplyBinary(kind, gs[i], xs[i]); },
        "binary");
  }
}

}  // namespace
}  // namespace mirrortrain
