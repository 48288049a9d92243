// Branch-free float exp and standard normal CDF for host loops.
//
// glibc's expf/erff are scalar calls, so a loop that calls them does not
// vectorise: the exact gelu and its gradient took 28% of the fortunes_gpt
// step on the CPU. These are plain arithmetic (a clamp, a polynomial, an
// exponent built from bits, selects), so GCC/Clang vectorise the loops
// around them (GCC needs -fno-trapping-math for the selects, set in the top
// CMakeLists.txt), and a scalar tail computes the same bits as the vector
// body (no FMA is contracted without -march). Host code only; CUDA has fast
// erff/expf.
//
// Accuracy (tests/tensor/vector_math_test.cc): ExpF within 2.5e-7 relative
// of exp; NormalCdf within 3e-7 absolute and its lower tail within 1e-6
// relative of the exact Phi.
#ifndef MIRRORTRAIN_TENSOR_VECTOR_MATH_H_
#define MIRRORTRAIN_TENSOR_VECTOR_MATH_H_

#include <bit>
#include <cstdint>

namespace mirrortrain::vmath {

// e^x. Arguments below -87.3 give 0, above 88.3 give e^88.3 (its users,
// the gelu, its gradient and the float softmax, pass arguments <= 0 or
// saturate, as tanh does); NaN stays NaN.
inline float ExpF(float x) {
  // Clamped so that the exponent always converts to an int: NaN fails both
  // comparisons, becomes -87.3 here and is given back at the end.
  const float in = x;
  x = x > -87.3f ? x : -87.3f;
  x = x < 88.3f ? x : 88.3f;
  // x = n ln2 + r with |r| <= ln2/2; n by the add-and-subtract rounding
  // trick (round to nearest without a rounding instruction SSE2 lacks).
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  const float n = (x * 1.44269504f + kShift) - kShift;
  // ln2 in two parts so that n * kLn2Hi is exact for |n| <= 128.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  // Taylor to degree 7: truncation below 1e-8 relative on |r| <= 0.35.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale =
      std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float y = p * scale;
  return in < -87.3f ? 0.0f : (in == in ? y : in);
}

// Phi(-a) = exp(-a^2/2) H(a) for a >= 0, with H a polynomial in
// t = 1/(1 + 0.4a) fitted by scripts/fit/normal_tail.py (max relative error
// 7.5e-8 on [0, 14]; float evaluation adds a few ulp).
inline float NormalTailFactor(float a) {
  const float t = 1.0f / (1.0f + 0.4f * a);
  float h = -1.084029369e-03f;
  h = h * t - 3.455204060e-02f;
  h = h * t + 1.905609865e-01f;
  h = h * t - 3.625328988e-01f;
  h = h * t + 2.433778234e-01f;
  h = h * t - 9.104848082e-03f;
  h = h * t + 1.575202363e-01f;
  h = h * t + 1.559356994e-01f;
  h = h * t + 1.598904928e-01f;
  h = h * t - 1.145807981e-05f;
  return h;
}

// |x| clamped to 14, beyond which the tail is below 1e-44.
inline float ClampedAbs(float x) {
  const float a = x < 0.0f ? -x : x;
  return a > 14.0f ? 14.0f : a;
}

// Phi(x), the standard normal CDF. The lower tail is computed directly, not
// as 1 + erf(x) - 1, so it keeps its relative accuracy for negative x.
inline float NormalCdf(float x) {
  const float a = ClampedAbs(x);
  const float tail = ExpF(-0.5f * a * a) * NormalTailFactor(a);
  return x < 0.0f ? tail : 1.0f - tail;
}

// phi(x), the standard normal density.
inline float NormalPdf(float x) {
  return 0.3989422804014327f * ExpF(-0.5f * x * x);
}

// Phi(x) + x phi(x), the exact gelu's derivative, with one exp for both.
inline float GeluDerivative(float x) {
  const float a = ClampedAbs(x);
  const float e = ExpF(-0.5f * a * a);  // 0 where |x| > 13.2
  const float tail = e * NormalTailFactor(a);
  return (x < 0.0f ? tail : 1.0f - tail) + x * (0.3989422804014327f * e);
}

// tanh(x) for the gelu tanh approximation: absolute error a few 1e-8, but
// not relative near 0 (use std::tanh where that matters).
inline float TanhAbs(float x) { return 1.0f - 2.0f / (ExpF(2.0f * x) + 1.0f); }

}  // namespace mirrortrain::vmath

#endif  // MIRRORTRAIN_TENSOR_VECTOR_MATH_H_
