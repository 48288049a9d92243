// The elementwise functions, written once for the CPU kernels
// (ops/math_ops.cc) and their CUDA twins (cuda/elementwise_kernels.cu,
// cuda/broadcast_kernels.cu).
#ifndef MIRRORTRAIN_TENSOR_ELEMENTWISE_KIND_H_
#define MIRRORTRAIN_TENSOR_ELEMENTWISE_KIND_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/host_device.h"
#include "tensor/vector_math.h"

namespace mirrortrain {

enum class UnaryKind : uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kSquare,
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,       // x * Phi(x), Phi the standard normal CDF (erf form)
  kGeluTanh,   // the tanh approximation of Gelu
  kSilu,       // x * sigmoid(x) (swish)
  kElu,        // x > 0 ? x : expm1(x)
  kSelu,       // scale * (x > 0 ? x : alpha * expm1(x)), TF's constants
  kSoftplus,   // log(1 + exp(x)), without overflow
  kLeakyRelu,  // x > 0 ? x : 0.2 x (Keras 3's leaky_relu default slope)
  kRelu6,      // min(max(x, 0), 6) (MobileNet's)
};

// Binary functions of two same-shaped operands. The *Grad kinds take the
// upstream gradient and the forward output (relu, sigmoid, tanh) or input
// (the others), and give the input gradient.
enum class BinaryKind : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kReluGrad,       // g * (y > 0)
  kSigmoidGrad,    // g * y * (1 - y)
  kTanhGrad,       // g * (1 - y^2)
  kGeluGrad,       // (g, x) -> g * Gelu'(x)
  kGeluTanhGrad,   // (g, x) -> g * GeluTanh'(x)
  kSiluGrad,       // (g, x) -> g * s * (1 + x * (1 - s)), s = sigmoid(x)
  kEluGrad,        // (g, x) -> x < 0 ? g * (expm1(x) + 1) : g
  kSeluGrad,       // (g, x) -> x < 0 ? g * (sa * expm1(x) + sa) : g * scale
  kSoftplusGrad,   // (g, x) -> g * sigmoid(x)
  kLeakyReluGrad,  // (g, x) -> x > 0 ? g : 0.2 g
  kRelu6Grad,      // (g, x) -> 0 < x < 6 ? g : 0 (TensorFlow's Relu6Grad)
  kMaximum,        // max(a, b), NaN if either is (tf.maximum)
  kMinimum,        // min(a, b), NaN if either is
  kGreaterEqual,   // a >= b ? 1 : 0 (Maximum's gradient mask)
  kLessEqual,      // a <= b ? 1 : 0 (Minimum's)
  kNotEqual,       // a != b ? 1 : 0, 1 where either is NaN (Keras masks)
};

// SELU's constants (Klambauer et al.), as TensorFlow spells them: its
// negative side uses their product as one literal (the double product of
// the two is an ulp below it).
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;
inline constexpr double kSeluScaleAlpha = 1.7580993408473768599402175208123;
// Keras 3's leaky_relu(x) default negative slope, 0.2, as tf.nn.leaky_relu
// holds it: a float attribute, so 0.2f in float64 too.
inline constexpr double kLeakyReluSlope = 0.2f;

// Device code calls CUDA's overloads of the C math functions; host code
// std::'s. Either way one definition of each function below.
#if defined(__CUDA_ARCH__)
#define MT_MATH(fn) ::fn
#else
#define MT_MATH(fn) std::fn
#endif

// The standard normal CDF, the exact gelu's derivative, and tanh where only
// its absolute error matters (inside the gelu). Host float loops use
// vector_math.h's branch-free forms, so they vectorise; device code and double
// use the C library's.
template <typename T>
MT_HOST_DEVICE inline T NormalCdf(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return vmath::NormalCdf(x);
#endif
  return T(0.5) * (T(1) + MT_MATH(erf)(x * T(0.7071067811865476)));
}

// Phi(x) + x * phi(x), phi the standard normal density.
template <typename T>
MT_HOST_DEVICE inline T GeluDerivative(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return vmath::GeluDerivative(x);
#endif
  return NormalCdf(x) +
         x * (T(0.3989422804014327) * MT_MATH(exp)(T(-0.5) * x * x));
}

template <typename T>
MT_HOST_DEVICE inline T GeluTanhInner(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return vmath::TanhAbs(u);
#endif
  return MT_MATH(tanh)(u);
}

// The logistic function; host float loops use vector_math.h's exp, so they
// vectorise. ExpF saturates at e^88.3 (silu(-1e30) was -4.5e-9, not -0),
// so below -88.3 the float logistic is 0 on both sides (expf overflows
// only past 88.72: the GPU's would give subnormals in between).
template <typename T>
MT_HOST_DEVICE inline T Logistic(T x) {
  if constexpr (std::is_same_v<T, float>) {
#if !defined(__CUDA_ARCH__)
    const float y = 1.0f / (1.0f + vmath::ExpF(-x));
#else
    const float y = 1.0f / (1.0f + expf(-x));
#endif
    return x < -88.3f ? 0.0f : y;
  }
  return T(1) / (T(1) + MT_MATH(exp)(-x));
}

template <typename T>
MT_HOST_DEVICE inline T ApplyUnary(UnaryKind kind, T x) {
  switch (kind) {
    case UnaryKind::kNeg:
      return -x;
    case UnaryKind::kExp:
      return MT_MATH(exp)(x);
    case UnaryKind::kLog:
      return MT_MATH(log)(x);
    case UnaryKind::kSqrt:
      return MT_MATH(sqrt)(x);
    case UnaryKind::kSquare:
      return x * x;
    case UnaryKind::kRelu:
      return x > T(0) ? x : T(0);
    case UnaryKind::kSigmoid:
      return T(1) / (T(1) + MT_MATH(exp)(-x));
    case UnaryKind::kTanh:
      return MT_MATH(tanh)(x);
    case UnaryKind::kGelu:
      return x * NormalCdf(x);
    case UnaryKind::kGeluTanh:
      return T(0.5) * x * (T(1) + GeluTanhInner(x));
    case UnaryKind::kSilu:
      return x * Logistic(x);
    case UnaryKind::kElu:
      return x > T(0) ? x : MT_MATH(expm1)(x);
    case UnaryKind::kSelu:
      return x > T(0) ? T(kSeluScale) * x
                      : T(kSeluScaleAlpha) * MT_MATH(expm1)(x);
    case UnaryKind::kSoftplus: {
      // TensorFlow's three pieces, each monotone as computed (so a max
      // pool commutes with it): x above -t, exp(x) below t, log1p(exp(x))
      // between, t = log(epsilon) + 2 of T.
      const T t = std::is_same_v<T, float> ? T(-13.942385152878742)
                                           : T(-34.043653389117154);
      if (x > -t) return x;
      if (x < t) return MT_MATH(exp)(x);
      return MT_MATH(log1p)(MT_MATH(exp)(x));
    }
    case UnaryKind::kLeakyRelu:
      return x > T(0) ? x : T(kLeakyReluSlope) * x;
    case UnaryKind::kRelu6:
      return x > T(0) ? (x < T(6) ? x : T(6)) : T(0);
  }
  return x;
}

template <typename T>
MT_HOST_DEVICE inline T ApplyBinary(BinaryKind kind, T a, T b) {
  switch (kind) {
    case BinaryKind::kAdd:
      return a + b;
    case BinaryKind::kSub:
      return a - b;
    case BinaryKind::kMul:
      return a * b;
    case BinaryKind::kDiv:
      return a / b;
    case BinaryKind::kReluGrad:
      return b > T(0) ? a : T(0);
    case BinaryKind::kSigmoidGrad:
      return a * b * (T(1) - b);
    case BinaryKind::kTanhGrad:
      return a * (T(1) - b * b);
    case BinaryKind::kGeluGrad:
      return a * GeluDerivative(b);
    case BinaryKind::kGeluTanhGrad: {
      const T c = T(0.7978845608028654);
      const T t = GeluTanhInner(b);
      return a * (T(0.5) * (T(1) + t) + T(0.5) * b * (T(1) - t * t) * c *
                                            (T(1) + T(3 * 0.044715) * b * b));
    }
    case BinaryKind::kSiluGrad: {
      // TensorFlow's SiluGrad formula and order.
      const T s = Logistic(b);
      return a * (s * (T(1) + b * (T(1) - s)));
    }
    // TensorFlow's EluGrad and SeluGrad: from the output (exactly 0 where
    // it saturates), the linear side at 0.
    case BinaryKind::kEluGrad:
      return b < T(0) ? a * (MT_MATH(expm1)(b) + T(1)) : a;
    case BinaryKind::kSeluGrad:
      return b < T(0) ? a * (T(kSeluScaleAlpha) * MT_MATH(expm1)(b) +
                             T(kSeluScaleAlpha))
                      : a * T(kSeluScale);
    case BinaryKind::kSoftplusGrad:
      return a * Logistic(b);
    case BinaryKind::kLeakyReluGrad:
      return b > T(0) ? a : a * T(kLeakyReluSlope);
    case BinaryKind::kRelu6Grad:
      return b > T(0) && b < T(6) ? a : T(0);
    case BinaryKind::kMaximum:
      return a > b || a != a ? a : b;
    case BinaryKind::kMinimum:
      return a < b || a != a ? a : b;
    case BinaryKind::kGreaterEqual:
      return a >= b ? T(1) : T(0);
    case BinaryKind::kLessEqual:
      return a <= b ? T(1) : T(0);
    case BinaryKind::kNotEqual:
      return a != b ? T(1) : T(0);
  }
  return a;
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_ELEMENTWISE_KIND_H_
