#include "trainer/optim/optimizers.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

// The kernels mirror TensorFlow's CPU functors (training_ops.cc) operation
// by operation, with every hyperparameter first rounded to T, so float32
// results round the same way TensorFlow's do.

// Elementwise updates are independent: split over the kernel threads.
template <typename F>
void ForEachElement(int64_t n, F f) {
  ParallelFor(n, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

template <typename T>
void GradientDescentKernel(T lr, const T* g, T* w, int64_t n) {
  ForEachElement(n, [&](int64_t i) { w[i] -= g[i] * lr; });
}

template <typename T>
void MomentumKernel(T lr, T momentum, bool nesterov, const T* g, T* w, T* a,
                    int64_t n) {
  ForEachElement(n, [&](int64_t i) {
    a[i] = a[i] * momentum + g[i];
    if (nesterov) {
      w[i] -= g[i] * lr + a[i] * momentum * lr;
    } else {
      w[i] -= a[i] * lr;
    }
  });
}

template <typename T>
void AdagradV2Kernel(T lr, T epsilon, const T* g, T* w, T* a, int64_t n) {
  ForEachElement(n, [&](int64_t i) {
    a[i] += g[i] * g[i];
    w[i] -= g[i] * lr / (std::sqrt(a[i]) + epsilon);
  });
}

template <typename T>
void AdamKernel(T lr, T beta1, T beta2, T epsilon, T beta1_power, T beta2_power,
                const T* g, T* w, T* m, T* v, int64_t n) {
  const T alpha = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
  const T one_minus_beta1 = T(1) - beta1;
  const T one_minus_beta2 = T(1) - beta2;
  ForEachElement(n, [&](int64_t i) {
    m[i] += (g[i] - m[i]) * one_minus_beta1;
    v[i] += (g[i] * g[i] - v[i]) * one_minus_beta2;
    w[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + epsilon);
  });
}

template <typename T>
void RMSPropKernel(T lr, T rho, T momentum, T epsilon, const T* g, T* w, T* ms,
                   T* mom, int64_t n) {
  const T one_minus_rho = T(1) - rho;
  ForEachElement(n, [&](int64_t i) {
    ms[i] += (g[i] * g[i] - ms[i]) * one_minus_rho;
    mom[i] = mom[i] * momentum + (g[i] * lr) / std::sqrt(ms[i] + epsilon);
    w[i] -= mom[i];
  });
}

absl::Status Invalid(absl::string_view key, absl::string_view requirement,
                     double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", key, " must be ", requirement, ", got ", got));
}

// [0, 1), the range of every decay-like hyperparameter.
absl::Status CheckUnitInterval(absl::string_view key, double value) {
  if (!(value >= 0 && value < 1)) return Invalid(key, "in [0, 1)", value);
  return absl::OkStatus();
}

absl::Status CheckEpsilon(double epsilon) {
  if (!(epsilon > 0) || !std::isfinite(epsilon)) {
    return Invalid("epsilon", "a finite number > 0", epsilon);
  }
  return absl::OkStatus();
}

}  // namespace

GradientDescentOptimizer::GradientDescentOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule)
    : Optimizer(std::move(schedule)) {}

void GradientDescentOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                          absl::Span<const Tensor>, double lr) {
  MT_DISPATCH_FLOAT(var.dtype(), T, {
    GradientDescentKernel<T>(static_cast<T>(lr), grad.data<T>(), var.data<T>(),
                             var.num_elements());
  });
}

MomentumOptimizer::MomentumOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule, double momentum,
    bool nesterov)
    : Optimizer(std::move(schedule)),
      momentum_(momentum),
      nesterov_(nesterov) {}

void MomentumOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                   absl::Span<const Tensor> slots, double lr) {
  MT_DISPATCH_FLOAT(var.dtype(), T, {
    MomentumKernel<T>(static_cast<T>(lr), static_cast<T>(momentum_), nesterov_,
                      grad.data<T>(), var.data<T>(), slots[0].data<T>(),
                      var.num_elements());
  });
}

AdagradOptimizer::AdagradOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule,
    double initial_accumulator_value, double epsilon)
    : Optimizer(std::move(schedule)),
      initial_accumulator_value_(initial_accumulator_value),
      epsilon_(epsilon) {}

double AdagradOptimizer::SlotInitialValue(absl::string_view) const {
  return initial_accumulator_value_;
}

void AdagradOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                  absl::Span<const Tensor> slots, double lr) {
  MT_DISPATCH_FLOAT(var.dtype(), T, {
    AdagradV2Kernel<T>(static_cast<T>(lr), static_cast<T>(epsilon_),
                       grad.data<T>(), var.data<T>(), slots[0].data<T>(),
                       var.num_elements());
  });
}

AdamOptimizer::AdamOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                             double beta1, double beta2, double epsilon)
    : Optimizer(std::move(schedule)),
      beta1_(beta1),
      beta2_(beta2),
      epsilon_(epsilon) {}

void AdamOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                               absl::Span<const Tensor> slots, double lr) {
  // The powers follow from the step count alone (nothing extra to
  // checkpoint); float64 then rounded, as the golden TF run fed them.
  const double t = static_cast<double>(iterations()) + 1.0;
  const double beta1_power = std::pow(beta1_, t);
  const double beta2_power = std::pow(beta2_, t);
  MT_DISPATCH_FLOAT(var.dtype(), T, {
    AdamKernel<T>(static_cast<T>(lr), static_cast<T>(beta1_),
                  static_cast<T>(beta2_), static_cast<T>(epsilon_),
                  static_cast<T>(beta1_power), static_cast<T>(beta2_power),
                  grad.data<T>(), var.data<T>(), slots[0].data<T>(),
                  slots[1].data<T>(), var.num_elements());
  });
}

RMSPropOptimizer::RMSPropOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule, double rho, double momentum,
    double epsilon)
    : Optimizer(std::move(schedule)),
      rho_(rho),
      momentum_(momentum),
      epsilon_(epsilon) {}

void RMSPropOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                  absl::Span<const Tensor> slots, double lr) {
  MT_DISPATCH_FLOAT(var.dtype(), T, {
    RMSPropKernel<T>(static_cast<T>(lr), static_cast<T>(rho_),
                     static_cast<T>(momentum_), static_cast<T>(epsilon_),
                     grad.data<T>(), var.data<T>(), slots[0].data<T>(),
                     slots[1].data<T>(), var.num_elements());
  });
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(
    const OptimizerOptions& o) {
  const std::string& name = o.name;
  if (name != "sgd" && name != "momentum" && name != "adagrad" &&
      name != "adam" && name != "rmsprop") {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.name: unknown optimizer '", name,
                     "'; valid: sgd, momentum, adagrad, adam, rmsprop"));
  }
  if (o.nesterov && name != "momentum") {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.nesterov: only optimizer.name=momentum supports nesterov, "
        "got optimizer.name=",
        name));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<LearningRateSchedule> schedule,
                      MakeSchedule(o.schedule));
  if (name == "sgd") {
    return std::make_unique<GradientDescentOptimizer>(std::move(schedule));
  }
  if (name == "momentum") {
    MT_RETURN_IF_ERROR(CheckUnitInterval("momentum", o.momentum));
    return std::make_unique<MomentumOptimizer>(std::move(schedule), o.momentum,
                                               o.nesterov);
  }
  if (name == "adagrad") {
    if (!(o.initial_accumulator_value >= 0) ||
        !std::isfinite(o.initial_accumulator_value)) {
      return Invalid("initial_accumulator_value", "a finite number >= 0",
                     o.initial_accumulator_value);
    }
    MT_RETURN_IF_ERROR(CheckEpsilon(o.epsilon));
    return std::make_unique<AdagradOptimizer>(
        std::move(schedule), o.initial_accumulator_value, o.epsilon);
  }
  if (name == "adam") {
    MT_RETURN_IF_ERROR(CheckUnitInterval("beta1", o.beta1));
    MT_RETURN_IF_ERROR(CheckUnitInterval("beta2", o.beta2));
    MT_RETURN_IF_ERROR(CheckEpsilon(o.epsilon));
    return std::make_unique<AdamOptimizer>(std::move(schedule), o.beta1,
                                           o.beta2, o.epsilon);
  }
  MT_RETURN_IF_ERROR(CheckUnitInterval("rho", o.rho));
  MT_RETURN_IF_ERROR(CheckUnitInterval("momentum", o.momentum));
  MT_RETURN_IF_ERROR(CheckEpsilon(o.epsilon));
  return std::make_unique<RMSPropOptimizer>(std::move(schedule), o.rho,
                                            o.momentum, o.epsilon);
}

}  // namespace mirrortrain::trainer
