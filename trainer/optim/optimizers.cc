#include "trainer/optim/optimizers.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/ops/training_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

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

absl::Status GradientDescentOptimizer::ApplyDense(const Tensor& grad,
                                                  const Tensor& var,
                                                  absl::Span<const Tensor>,
                                                  double lr) {
  UpdateHyperparams h;
  h.lr = lr;
  return ops::ApplyUpdate(UpdateRule::kGradientDescent, h, grad, var, {});
}

MomentumOptimizer::MomentumOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule, double momentum,
    bool nesterov)
    : Optimizer(std::move(schedule)),
      momentum_(momentum),
      nesterov_(nesterov) {}

absl::Status MomentumOptimizer::ApplyDense(const Tensor& grad,
                                           const Tensor& var,
                                           absl::Span<const Tensor> slots,
                                           double lr) {
  UpdateHyperparams h;
  h.lr = lr;
  h.momentum = momentum_;
  return ops::ApplyUpdate(
      nesterov_ ? UpdateRule::kNesterovMomentum : UpdateRule::kMomentum, h,
      grad, var, slots);
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

absl::Status AdagradOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                          absl::Span<const Tensor> slots,
                                          double lr) {
  UpdateHyperparams h;
  h.lr = lr;
  h.epsilon = epsilon_;
  return ops::ApplyUpdate(UpdateRule::kAdagradV2, h, grad, var, slots);
}

AdamOptimizer::AdamOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                             double beta1, double beta2, double epsilon)
    : Optimizer(std::move(schedule)),
      beta1_(beta1),
      beta2_(beta2),
      epsilon_(epsilon) {}

absl::Status AdamOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                       absl::Span<const Tensor> slots,
                                       double lr) {
  // The powers follow from the step count alone (nothing extra to
  // checkpoint); float64 then rounded, as the golden TF run fed them.
  const double t = static_cast<double>(iterations()) + 1.0;
  UpdateHyperparams h;
  h.lr = lr;
  h.beta1 = beta1_;
  h.beta2 = beta2_;
  h.epsilon = epsilon_;
  h.beta1_power = std::pow(beta1_, t);
  h.beta2_power = std::pow(beta2_, t);
  return ops::ApplyUpdate(UpdateRule::kAdam, h, grad, var, slots);
}

RMSPropOptimizer::RMSPropOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule, double rho, double momentum,
    double epsilon)
    : Optimizer(std::move(schedule)),
      rho_(rho),
      momentum_(momentum),
      epsilon_(epsilon) {}

absl::Status RMSPropOptimizer::ApplyDense(const Tensor& grad, const Tensor& var,
                                          absl::Span<const Tensor> slots,
                                          double lr) {
  UpdateHyperparams h;
  h.lr = lr;
  h.rho = rho_;
  h.momentum = momentum_;
  h.epsilon = epsilon_;
  return ops::ApplyUpdate(UpdateRule::kRMSProp, h, grad, var, slots);
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
