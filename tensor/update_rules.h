// The per-element arithmetic of the optimizer and moving-average updates,
// shared by the CPU loops (ops/training_ops.cc) and the CUDA kernels
// (cuda/training_kernels.cu), so both run the same operations in the same
// order. They mirror TensorFlow's CPU functors in training_ops.cc; every
// hyperparameter is rounded to T on the host first (UpdateParams), so f32
// results round the way TensorFlow's do.
#ifndef MIRRORTRAIN_TENSOR_UPDATE_RULES_H_
#define MIRRORTRAIN_TENSOR_UPDATE_RULES_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/host_device.h"

namespace mirrortrain {

// TensorFlow's ResourceApply* ops (Adagrad is AdagradV2: epsilon outside
// the square root), and Keras 3's AdamW, Adamax, Lion and Nadam (no TF
// training ops: Keras's own float ops, see UpdateElement). Slots:
// momentum/nesterov {accumulator}, adagrad {accumulator}, adam and adamw
// {m, v}, rmsprop {ms, mom}, adamax {m, u}, lion {m}, nadam {m, v}.
enum class UpdateRule {
  kGradientDescent,
  kMomentum,
  kNesterovMomentum,
  kAdagradV2,
  kAdam,
  kRMSProp,
  kAdamW,
  kAdamax,
  kLion,
  kNadam,
};

// Most terms one update's gradient may be the sum of
// (ops::UpdateTarget::more_grads): the logical replicas of one device whose
// gradients an update can sum (the CUDA kernel's operands are bounded).
inline constexpr int kMaxGradientTerms = 8;

// Hyperparameters as the host computes them (float64), before rounding.
struct UpdateHyperparams {
  double lr = 0;
  double momentum = 0;     // momentum, nesterov, rmsprop
  double epsilon = 0;      // adagrad, adam, adamw, rmsprop, adamax
  double beta1 = 0;        // adam, adamw, adamax, lion
  double beta2 = 0;        // adam, adamw, adamax, lion
  double beta1_power = 0;  // adam, adamw, adamax: beta1^t, update t (1-based)
  double beta2_power = 0;  // adam, adamw
  double rho = 0;          // rmsprop
  // adamw: the decoupled decay rate; 0 for a variable excluded from decay.
  double weight_decay = 0;
  // nadam (Keras 3), each already formed in the variable's dtype by the
  // optimizer: u_{t+1}, 1 - u_t, 1 - prod_{i<=t} u_i, 1 - prod_{i<=t+1} u_i
  // for u_i = beta1 (1 - 0.5 * 0.96^i).
  double nadam_u_next = 0;
  double nadam_one_minus_u = 0;
  double nadam_one_minus_product = 0;
  double nadam_one_minus_product_next = 0;
};

// Calls f(std::integral_constant<UpdateRule, R>()) for the rule R that
// `rule` names: the one switch over rules, shared by the CPU loops and the
// CUDA launchers (each instantiates its loop or kernel per rule, so the
// switch stays out of the elementwise loop). A new rule is a case here, one
// in UpdateRuleSlots and its branch in UpdateElement.
template <typename F>
inline void DispatchUpdateRule(UpdateRule rule, F&& f) {
  using R = UpdateRule;
  switch (rule) {
    case R::kGradientDescent:
      return f(std::integral_constant<R, R::kGradientDescent>());
    case R::kMomentum:
      return f(std::integral_constant<R, R::kMomentum>());
    case R::kNesterovMomentum:
      return f(std::integral_constant<R, R::kNesterovMomentum>());
    case R::kAdagradV2:
      return f(std::integral_constant<R, R::kAdagradV2>());
    case R::kAdam:
      return f(std::integral_constant<R, R::kAdam>());
    case R::kRMSProp:
      return f(std::integral_constant<R, R::kRMSProp>());
    case R::kAdamW:
      return f(std::integral_constant<R, R::kAdamW>());
    case R::kAdamax:
      return f(std::integral_constant<R, R::kAdamax>());
    case R::kLion:
      return f(std::integral_constant<R, R::kLion>());
    case R::kNadam:
      return f(std::integral_constant<R, R::kNadam>());
  }
}

inline int UpdateRuleSlots(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kGradientDescent:
      return 0;
    case UpdateRule::kMomentum:
    case UpdateRule::kNesterovMomentum:
    case UpdateRule::kAdagradV2:
    case UpdateRule::kLion:
      return 1;
    case UpdateRule::kAdam:
    case UpdateRule::kRMSProp:
    case UpdateRule::kAdamW:
    case UpdateRule::kAdamax:
    case UpdateRule::kNadam:
      return 2;
  }
  return 0;
}

// The hyperparameters rounded to T, and the per-update constants TensorFlow
// forms in T before its elementwise loop.
//
// Kernels read it from memory (ops::ApplyUpdate's `params` tensor: kCount
// elements of T), so it is nothing but T fields.
template <typename T>
struct UpdateParams {
  static constexpr int kCount = 18;
  T lr, momentum, epsilon, alpha, one_minus_beta1, one_minus_beta2,
      one_minus_rho;
  // AdamW and Adamax (Keras): 1 - beta formed in float64 and then rounded
  // (Keras multiplies by the Python float `1 - self.beta_1`), where ApplyAdam
  // forms 1 - T(beta); f32: 0.1f against 0.100000024f for beta 0.9.
  T keras_one_minus_beta1, keras_one_minus_beta2, weight_decay;
  // Adamax and Lion (Keras): the betas in T, and Adamax's 1 - beta1^t
  // formed in T from the power the optimizer computes in T.
  T beta1, beta2, one_minus_beta1_power;
  // Nadam (Keras): its per-step constants (UpdateHyperparams), and 1 -
  // beta2^t formed in T.
  T nadam_u_next, nadam_one_minus_u, nadam_one_minus_product,
      nadam_one_minus_product_next, one_minus_beta2_power;

  static UpdateParams From(const UpdateHyperparams& h) {
    UpdateParams p{};
    p.lr = static_cast<T>(h.lr);
    p.momentum = static_cast<T>(h.momentum);
    p.epsilon = static_cast<T>(h.epsilon);
    const T beta1_power = static_cast<T>(h.beta1_power);
    const T beta2_power = static_cast<T>(h.beta2_power);
    p.alpha = p.lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
    p.one_minus_beta1 = T(1) - static_cast<T>(h.beta1);
    p.one_minus_beta2 = T(1) - static_cast<T>(h.beta2);
    p.one_minus_rho = T(1) - static_cast<T>(h.rho);
    p.keras_one_minus_beta1 = static_cast<T>(1.0 - h.beta1);
    p.keras_one_minus_beta2 = static_cast<T>(1.0 - h.beta2);
    p.weight_decay = static_cast<T>(h.weight_decay);
    p.beta1 = static_cast<T>(h.beta1);
    p.beta2 = static_cast<T>(h.beta2);
    p.one_minus_beta1_power = T(1) - beta1_power;
    p.nadam_u_next = static_cast<T>(h.nadam_u_next);
    p.nadam_one_minus_u = static_cast<T>(h.nadam_one_minus_u);
    p.nadam_one_minus_product = static_cast<T>(h.nadam_one_minus_product);
    p.nadam_one_minus_product_next =
        static_cast<T>(h.nadam_one_minus_product_next);
    p.one_minus_beta2_power = T(1) - beta2_power;
    return p;
  }
};

template <typename T>
MT_HOST_DEVICE inline T UpdateSqrt(T x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);  // IEEE-rounded (nvcc's default -prec-sqrt=true).
#else
  return std::sqrt(x);
#endif
}

// One element of one update: w is the variable, s0/s1 its slots.
template <UpdateRule R, typename T>
MT_HOST_DEVICE inline void UpdateElement(const UpdateParams<T>& p, T g, T& w,
                                         T& s0, T& s1) {
  if constexpr (R == UpdateRule::kGradientDescent) {
    w -= g * p.lr;
  } else if constexpr (R == UpdateRule::kMomentum) {
    s0 = s0 * p.momentum + g;
    w -= s0 * p.lr;
  } else if constexpr (R == UpdateRule::kNesterovMomentum) {
    s0 = s0 * p.momentum + g;
    w -= g * p.lr + s0 * p.momentum * p.lr;
  } else if constexpr (R == UpdateRule::kAdagradV2) {
    s0 += g * g;
    w -= g * p.lr / (UpdateSqrt(s0) + p.epsilon);
  } else if constexpr (R == UpdateRule::kAdam) {
    s0 += (g - s0) * p.one_minus_beta1;
    s1 += (g * g - s1) * p.one_minus_beta2;
    w -= (s0 * p.alpha) / (UpdateSqrt(s1) + p.epsilon);
  } else if constexpr (R == UpdateRule::kRMSProp) {
    s0 += (g * g - s0) * p.one_minus_rho;
    s1 = s1 * p.momentum + (g * p.lr) / UpdateSqrt(s0 + p.epsilon);
    w -= s1;
  } else if constexpr (R == UpdateRule::kAdamW) {
    // Keras 3: BaseOptimizer._apply_weight_decay, w - w*wd*lr (skipped for
    // an excluded variable, which gets weight_decay 0), then
    // Adam.update_step. alpha is formed as for kAdam, from beta powers the
    // optimizer computes in T (Keras's ops.power in the variable dtype).
    if (p.weight_decay != T(0)) w -= w * p.weight_decay * p.lr;
    s0 += (g - s0) * p.keras_one_minus_beta1;
    s1 += (g * g - s1) * p.keras_one_minus_beta2;
    w -= (s0 * p.alpha) / (UpdateSqrt(s1) + p.epsilon);
  } else if constexpr (R == UpdateRule::kAdamax) {
    // Keras 3 Adamax.update_step: m, then u = max(beta2 * u, |g|), then
    // w -= lr * m / ((1 - beta1^t) * (u + eps)).
    s0 += (g - s0) * p.keras_one_minus_beta1;
    const T decayed = p.beta2 * s1, magnitude = g < T(0) ? -g : g;
    s1 = decayed > magnitude ? decayed : magnitude;
    w -= (p.lr * s0) / (p.one_minus_beta1_power * (s1 + p.epsilon));
  } else if constexpr (R == UpdateRule::kLion) {
    // Keras 3 Lion.update_step: w -= lr * sign(beta1 * m + (1 - beta1) * g)
    // with the old m, then m = beta2 * m + (1 - beta2) * g (the betas in T,
    // 1 - beta formed in T).
    const T c = s0 * p.beta1 + g * p.one_minus_beta1;
    w -= p.lr * (c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0)));
    s0 = s0 * p.beta2 + g * p.one_minus_beta2;
  } else if constexpr (R == UpdateRule::kNadam) {
    // Keras 3 Nadam.update_step (1 - beta formed in T): m and v as Adam's,
    // then w -= lr * m_hat / (sqrt(v / (1 - beta2^t)) + eps) with the
    // Nesterov-style m_hat = u_{t+1} m / (1 - prod_{t+1}) + (1 - u_t) g /
    // (1 - prod_t).
    s0 += (g - s0) * p.one_minus_beta1;
    s1 += (g * g - s1) * p.one_minus_beta2;
    const T m_hat = (p.nadam_u_next * s0) / p.nadam_one_minus_product_next +
                    (p.nadam_one_minus_u * g) / p.nadam_one_minus_product;
    const T v_hat = s1 / p.one_minus_beta2_power;
    w -= (m_hat * p.lr) / (UpdateSqrt(v_hat) + p.epsilon);
  }
}

// TensorFlow's assign_moving_average (zero_debias=False):
// shadow -= (shadow - value) * (1 - decay).
template <typename T>
MT_HOST_DEVICE inline void MovingAverageElement(T one_minus_decay, T value,
                                                T& shadow) {
  shadow -= (shadow - value) * one_minus_decay;
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_UPDATE_RULES_H_
