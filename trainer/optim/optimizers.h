// The concrete optimizers, each registered (OptimizerType) with its config
// keys, and the factory that builds one from the `optimizer` section.
//
// Each applies the TensorFlow training op of the same name (see DESIGN.md,
// "Semantics to match"), in the variable's dtype, with the kernels' order of
// operations:
//   GradientDescent (ApplyGradientDescent): w -= g*lr
//   Momentum (ApplyMomentum):   a = a*m + g; w -= a*lr
//                               nesterov: w -= g*lr + a*m*lr (new a)
//   Adagrad (ApplyAdagradV2):   a += g*g; w -= g*lr / (sqrt(a) + eps)
//   Adam (ApplyAdam):           t = iterations()+1; b1^t, b2^t computed in
//                               float64 and rounded to the dtype;
//                               lr_t = lr*sqrt(1-b2^t) / (1-b1^t);
//                               m += (g-m)*(1-b1); v += (g*g-v)*(1-b2);
//                               w -= m*lr_t / (sqrt(v) + eps)
//   RMSProp (ApplyRMSProp):     ms += (g*g-ms)*(1-rho);
//                               mom = mom*mu + g*lr / sqrt(ms+eps); w -= mom
//
// Ownership and thread contract: as Optimizer (optimizer.h).
#ifndef MIRRORTRAIN_TRAINER_OPTIM_OPTIMIZERS_H_
#define MIRRORTRAIN_TRAINER_OPTIM_OPTIMIZERS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/params.h"
#include "tensor/registry.h"
#include "tensor/tensor.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizer.h"

namespace mirrortrain::trainer {

// The constructors take hyperparameters as given; the registered schemas
// declare their ranges (MakeOptimizer checks them).

class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(
      std::unique_ptr<LearningRateSchedule> schedule);
  std::vector<std::string> GetSlotNames() const override { return {}; }

 protected:
  UpdateRule Rule() const override;
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override;
};

class MomentumOptimizer : public Optimizer {
 public:
  MomentumOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                    double momentum, bool nesterov);
  std::vector<std::string> GetSlotNames() const override {
    return {"Momentum"};
  }

 protected:
  UpdateRule Rule() const override;
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override;

 private:
  double momentum_;
  bool nesterov_;
};

class AdagradOptimizer : public Optimizer {
 public:
  AdagradOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                   double initial_accumulator_value, double epsilon);
  std::vector<std::string> GetSlotNames() const override { return {"Adagrad"}; }

 protected:
  double SlotInitialValue(absl::string_view slot_name) const override;
  UpdateRule Rule() const override;
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override;

 private:
  double initial_accumulator_value_;
  double epsilon_;
};

class AdamOptimizer : public Optimizer {
 public:
  AdamOptimizer(std::unique_ptr<LearningRateSchedule> schedule, double beta1,
                double beta2, double epsilon);
  // "Adam" is the first moment m, "Adam_1" the second moment v.
  std::vector<std::string> GetSlotNames() const override {
    return {"Adam", "Adam_1"};
  }

 protected:
  UpdateRule Rule() const override;
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override;

 private:
  double beta1_;
  double beta2_;
  double epsilon_;
};

class RMSPropOptimizer : public Optimizer {
 public:
  RMSPropOptimizer(std::unique_ptr<LearningRateSchedule> schedule, double rho,
                   double momentum, double epsilon);
  // "RMSProp" is the mean square ms, "RMSProp_1" the momentum mom.
  std::vector<std::string> GetSlotNames() const override {
    return {"RMSProp", "RMSProp_1"};
  }

 protected:
  UpdateRule Rule() const override;
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override;

 private:
  double rho_;
  double momentum_;
  double epsilon_;
};

// An optimizer type as the config names it (`optimizer.name`), registered
// next to its class with its own keys:
//   MT_REGISTER(OptimizerType, {.name = "sgd", .doc = "...", .params = {},
//                               .create = ...});
struct OptimizerType {
  std::string name;
  std::string doc;
  // optimizer.learning_rate when the config leaves it out: Keras's default
  // for this optimizer (0.01 for SGD, 0.001 for the adaptive ones).
  double learning_rate = 0.001;
  ParamSchema params;
  // `params` are checked against `params` already.
  std::function<std::unique_ptr<Optimizer>(
      const Params& params, std::unique_ptr<LearningRateSchedule> schedule)>
      create;
};
using OptimizerRegistry = Registry<OptimizerType>;

// Checks `params` against the schema of optimizer `name` (InvalidArgument
// "optimizer.<key>: ...") and builds it.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(
    const std::string& name, const Params& params,
    std::unique_ptr<LearningRateSchedule> schedule);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_OPTIM_OPTIMIZERS_H_
