#include "trainer/optim/optimizers.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/ops/training_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {

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
    const std::string& name, const Params& params,
    std::unique_ptr<LearningRateSchedule> schedule) {
  const OptimizerType* type = OptimizerRegistry::Global().Find(name);
  if (type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.name: unknown optimizer '", name, "' (expected one of ",
        OptimizerRegistry::Global().NameList(), ")"));
  }
  absl::Status status = CheckParams(type->params, params);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", status.message()));
  }
  return type->create(params, std::move(schedule));
}

namespace {

using Schedule = std::unique_ptr<LearningRateSchedule>;

Param UnitInterval(const char* name, double default_value, const char* doc) {
  return Param::Float(name)
      .Default(default_value)
      .Min(0)
      .Max(1, false)
      .Doc(doc);
}
Param Epsilon() {
  return Param::Float("epsilon").Default(1e-7).Min(0, false).Doc(
      "added to the denominator for numerical stability");
}

}  // namespace

MT_REGISTER(OptimizerType,
            {.name = "sgd",
             .doc = "w -= lr*g (ApplyGradientDescent)",
             .create = [](const Params&, Schedule schedule) {
               return std::unique_ptr<Optimizer>(
                   new GradientDescentOptimizer(std::move(schedule)));
             }});

MT_REGISTER(OptimizerType,
            {.name = "momentum",
             .doc = "a = m*a + g; w -= lr*a (ApplyMomentum)",
             .params = {{UnitInterval("momentum", 0.9, "m"),
                         Param::Bool("nesterov")
                             .Default(false)
                             .Doc("w -= lr*g + lr*m*a instead")}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(new MomentumOptimizer(
                   std::move(schedule), p.Float("momentum"),
                   p.Bool("nesterov")));
             }});

MT_REGISTER(OptimizerType,
            {.name = "adagrad",
             .doc = "a += g*g; w -= lr*g/(sqrt(a)+eps) (ApplyAdagradV2)",
             .params = {{Param::Float("initial_accumulator_value")
                             .Default(0.1)
                             .Min(0)
                             .Doc("a's starting value"),
                         Epsilon()}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(new AdagradOptimizer(
                   std::move(schedule), p.Float("initial_accumulator_value"),
                   p.Float("epsilon")));
             }});

MT_REGISTER(OptimizerType,
            {.name = "adam",
             .doc = "bias-corrected first and second moments (ApplyAdam)",
             .params = {{UnitInterval("beta1", 0.9, "decay of m"),
                         UnitInterval("beta2", 0.999, "decay of v"),
                         Epsilon()}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(
                   new AdamOptimizer(std::move(schedule), p.Float("beta1"),
                                     p.Float("beta2"), p.Float("epsilon")));
             }});

MT_REGISTER(OptimizerType,
            {.name = "rmsprop",
             .doc = "ms = rho*ms + (1-rho)*g*g; mom = mu*mom + "
                    "lr*g/sqrt(ms+eps); w -= mom (ApplyRMSProp)",
             .params = {{UnitInterval("rho", 0.9, "decay of ms"),
                         UnitInterval("momentum", 0.0, "mu"), Epsilon()}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(new RMSPropOptimizer(
                   std::move(schedule), p.Float("rho"), p.Float("momentum"),
                   p.Float("epsilon")));
             }});

}  // namespace mirrortrain::trainer
