#include "trainer/optim/optimizers.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {

GradientDescentOptimizer::GradientDescentOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule)
    : Optimizer(std::move(schedule)) {}

UpdateRule GradientDescentOptimizer::Rule() const {
  return UpdateRule::kGradientDescent;
}

UpdateHyperparams GradientDescentOptimizer::Hyperparameters(const Variable&,
                                                            double lr) const {
  UpdateHyperparams h;
  h.lr = lr;
  return h;
}

MomentumOptimizer::MomentumOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule, double momentum,
    bool nesterov)
    : Optimizer(std::move(schedule)),
      momentum_(momentum),
      nesterov_(nesterov) {}

UpdateRule MomentumOptimizer::Rule() const {
  return nesterov_ ? UpdateRule::kNesterovMomentum : UpdateRule::kMomentum;
}

UpdateHyperparams MomentumOptimizer::Hyperparameters(const Variable&,
                                                     double lr) const {
  UpdateHyperparams h;
  h.lr = lr;
  h.momentum = momentum_;
  return h;
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

UpdateRule AdagradOptimizer::Rule() const { return UpdateRule::kAdagradV2; }

UpdateHyperparams AdagradOptimizer::Hyperparameters(const Variable&,
                                                    double lr) const {
  UpdateHyperparams h;
  h.lr = lr;
  h.epsilon = epsilon_;
  return h;
}

namespace {

// beta^t in the variable's dtype from beta in that dtype, as TensorFlow
// forms the powers it feeds ResourceApplyAdam (tf.pow of the float32 beta
// in Keras 2's Adam) and as Keras 3's update_step forms them (ops.power).
// std::pow(float, float) is powf, bit-identical to TensorFlow's f32 pow for
// normal results (checked for t <= 20000; it differs only where TF flushes
// a subnormal power to 0, and 1 - p is 1 either way). A beta that is 1 in
// float32 is refused by its key (InFloat32).
double KerasPower(const Variable& var, double beta, int64_t t) {
  if (var.dtype() == DType::kF32) {
    return std::pow(static_cast<float>(beta), static_cast<float>(t));
  }
  return std::pow(beta, static_cast<double>(t));
}

}  // namespace

AdamOptimizer::AdamOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                             double beta1, double beta2, double epsilon)
    : Optimizer(std::move(schedule)),
      beta1_(beta1),
      beta2_(beta2),
      epsilon_(epsilon) {}

UpdateRule AdamOptimizer::Rule() const { return UpdateRule::kAdam; }

UpdateHyperparams AdamOptimizer::Hyperparameters(const Variable& var,
                                                 double lr) const {
  // The powers follow from the step count alone (nothing extra to
  // checkpoint), computed from the betas in the variable's dtype: float64
  // powers of the unrounded betas moved a beta2 of 0.99999999 (1 in
  // float32, so v stays 0) to a bias correction of 3e-8 and steps of
  // lr * m / epsilon.
  const int64_t t = iterations() + 1;
  UpdateHyperparams h;
  h.lr = lr;
  h.beta1 = beta1_;
  h.beta2 = beta2_;
  h.epsilon = epsilon_;
  h.beta1_power = KerasPower(var, beta1_, t);
  h.beta2_power = KerasPower(var, beta2_, t);
  return h;
}

namespace {

// Keras 3's keras.optimizers.AdamW (not a TensorFlow training op): the
// decoupled decay w -= w*wd*lr, then Adam as Keras's update_step computes it
// (UpdateRule::kAdamW), every operation in the variable's dtype:
//   b1^t = pow(dtype(b1), dtype(t)), b2^t likewise (float32: powf, as
//     tf.pow; KerasPower, as AdamOptimizer's);
//   alpha = lr*sqrt(1-b2^t) / (1-b1^t);
//   m += (g-m)*dtype(1-b1); v += (g*g-v)*dtype(1-b2)  (1-b in float64);
//   w -= m*alpha / (sqrt(v) + eps).
// A variable whose full name ("dense/bias") contains one of `exclude` is not
// decayed: plain substrings, where Keras's exclude_from_weight_decay(
// var_names=...) runs re.search on its short name ("bias"); the same for
// patterns without regex metacharacters that name no layer. Only built
// through its registration ("adamw"), so not declared in optimizers.h.
class AdamWOptimizer : public Optimizer {
 public:
  AdamWOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                 double weight_decay, double beta1, double beta2,
                 double epsilon, std::vector<std::string> exclude)
      : Optimizer(std::move(schedule)),
        weight_decay_(weight_decay),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        exclude_(std::move(exclude)) {}

  // "AdamW" is the first moment m, "AdamW_1" the second moment v.
  std::vector<std::string> GetSlotNames() const override {
    return {"AdamW", "AdamW_1"};
  }

 protected:
  UpdateRule Rule() const override { return UpdateRule::kAdamW; }

  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override {
    const bool decayed = Decayed(var.name());
    const int64_t t = iterations() + 1;
    UpdateHyperparams h;
    h.lr = lr;
    h.beta1 = beta1_;
    h.beta2 = beta2_;
    h.epsilon = epsilon_;
    h.weight_decay = decayed ? weight_decay_ : 0.0;
    h.beta1_power = KerasPower(var, beta1_, t);
    h.beta2_power = KerasPower(var, beta2_, t);
    return h;
  }

 private:
  // Whether the variable named `name` is decayed (no exclusion matches).
  bool Decayed(const std::string& name) const {
    for (const std::string& part : exclude_) {
      if (absl::StrContains(name, part)) return false;
    }
    return true;
  }

  double weight_decay_;
  double beta1_;
  double beta2_;
  double epsilon_;
  std::vector<std::string> exclude_;
};

// Keras 3's optimizers of two moments with betas and an epsilon (Adamax,
// Nadam): those hyperparameters, and slots "<Name>" and "<Name>_1".
class KerasMomentsOptimizer : public Optimizer {
 public:
  KerasMomentsOptimizer(std::unique_ptr<LearningRateSchedule> schedule,
                        std::string slot, double beta1, double beta2,
                        double epsilon)
      : Optimizer(std::move(schedule)),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        slot_(std::move(slot)) {}
  std::vector<std::string> GetSlotNames() const override {
    return {slot_, slot_ + "_1"};
  }

 protected:
  // lr, the betas and epsilon.
  UpdateHyperparams Moments(double lr) const {
    UpdateHyperparams h;
    h.lr = lr;
    h.beta1 = beta1_;
    h.beta2 = beta2_;
    h.epsilon = epsilon_;
    return h;
  }

  double beta1_, beta2_, epsilon_;

 private:
  std::string slot_;
};

// Keras 3's keras.optimizers.Adamax (UpdateRule::kAdamax), in the
// variable's dtype: m += (g - m)*dtype(1-b1) (1 - b1 in float64);
// u = max(dtype(b2)*u, |g|); w -= lr*m / ((1 - b1^t)*(u + eps)), b1^t in
// the dtype. Slots "Adamax" (m) and "Adamax_1" (u).
class AdamaxOptimizer : public KerasMomentsOptimizer {
 public:
  AdamaxOptimizer(std::unique_ptr<LearningRateSchedule> schedule, double beta1,
                  double beta2, double epsilon)
      : KerasMomentsOptimizer(std::move(schedule), "Adamax", beta1, beta2,
                              epsilon) {}

 protected:
  UpdateRule Rule() const override { return UpdateRule::kAdamax; }
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override {
    UpdateHyperparams h = Moments(lr);
    h.beta1_power = KerasPower(var, beta1_, iterations() + 1);
    return h;
  }
};

// Keras 3's keras.optimizers.Lion (Chen et al. 2023; UpdateRule::kLion):
// w -= lr*sign(b1*m + (1-b1)*g), then m = b2*m + (1-b2)*g, the betas and
// 1 - beta in the variable's dtype. Slot "Lion" (m).
class LionOptimizer : public Optimizer {
 public:
  LionOptimizer(std::unique_ptr<LearningRateSchedule> schedule, double beta1,
                double beta2)
      : Optimizer(std::move(schedule)), beta1_(beta1), beta2_(beta2) {}
  std::vector<std::string> GetSlotNames() const override { return {"Lion"}; }

 protected:
  UpdateRule Rule() const override { return UpdateRule::kLion; }
  UpdateHyperparams Hyperparameters(const Variable&, double lr) const override {
    UpdateHyperparams h;
    h.lr = lr;
    h.beta1 = beta1_;
    h.beta2 = beta2_;
    return h;
  }

 private:
  double beta1_, beta2_;
};

// Keras 3's keras.optimizers.Nadam (Dozat 2016; UpdateRule::kNadam): Adam
// with a Nesterov-style first moment under the momentum schedule u_i =
// beta1 (1 - 0.5 * 0.96^i), in the variable's dtype. Keras keeps prod u_i
// in an optimizer variable; here it follows from the step count (nothing
// more to checkpoint), formed in Keras's order and dtype, and cached so a
// step costs one more factor. A step back (a restore, or a parameter
// server applying pushes out of order) restarts from the last exact value
// kept every kProductStride steps. Slots "Nadam" (m) and "Nadam_1" (v).
class NadamOptimizer : public KerasMomentsOptimizer {
 public:
  NadamOptimizer(std::unique_ptr<LearningRateSchedule> schedule, double beta1,
                 double beta2, double epsilon)
      : KerasMomentsOptimizer(std::move(schedule), "Nadam", beta1, beta2,
                              epsilon) {}

 protected:
  UpdateRule Rule() const override { return UpdateRule::kNadam; }
  UpdateHyperparams Hyperparameters(const Variable& var,
                                    double lr) const override {
    const int64_t t = iterations() + 1;
    UpdateHyperparams h = Moments(lr);
    h.beta2_power = KerasPower(var, beta2_, t);
    if (var.dtype() == DType::kF32) {
      Fill(t, product_f32_, h);
    } else {
      Fill(t, product_f64_, h);
    }
    return h;
  }

 private:
  static constexpr int64_t kProductStride = 1024;

  // prod_{i<=t} u_i as Keras's _u_product holds it after update t, and
  // its values at t = 0, kProductStride, 2 * kProductStride, ...
  template <typename T>
  struct Product {
    int64_t t = 0;
    T value = 1;
    std::vector<T> every_stride = {T(1)};
  };

  // 1 - 0.5 * 0.96^i in T (Keras's ops.power of 0.96 cast to the dtype).
  template <typename T>
  static T Factor(int64_t i) {
    return T(1) - T(0.5) * std::pow(T(0.96), static_cast<T>(i));
  }

  template <typename T>
  void Fill(int64_t t, Product<T>& cache, UpdateHyperparams& h) const {
    const T beta1 = static_cast<T>(beta1_);
    if (cache.t > t) {
      const int64_t k = t / kProductStride;
      cache.t = k * kProductStride;
      cache.value = cache.every_stride[k];
    }
    for (; cache.t < t; ++cache.t) {
      // Keras: _u_product * beta_1 * (1 - 0.5 * 0.96^(t)), left to right.
      cache.value = cache.value * beta1 * Factor<T>(cache.t + 1);
      if ((cache.t + 1) % kProductStride == 0 &&
          static_cast<int64_t>(cache.every_stride.size()) ==
              (cache.t + 1) / kProductStride) {
        cache.every_stride.push_back(cache.value);
      }
    }
    const T product = cache.value;
    const T u = beta1 * Factor<T>(t);
    const T u_next = beta1 * Factor<T>(t + 1);
    h.nadam_u_next = u_next;
    h.nadam_one_minus_u = T(1) - u;
    h.nadam_one_minus_product = T(1) - product;
    h.nadam_one_minus_product_next = T(1) - product * u_next;
  }

  // An optimizer is used by one thread at a time (optimizer.h).
  mutable Product<float> product_f32_;
  mutable Product<double> product_f64_;
};

}  // namespace

RMSPropOptimizer::RMSPropOptimizer(
    std::unique_ptr<LearningRateSchedule> schedule, double rho, double momentum,
    double epsilon)
    : Optimizer(std::move(schedule)),
      rho_(rho),
      momentum_(momentum),
      epsilon_(epsilon) {}

UpdateRule RMSPropOptimizer::Rule() const { return UpdateRule::kRMSProp; }

UpdateHyperparams RMSPropOptimizer::Hyperparameters(const Variable&,
                                                    double lr) const {
  UpdateHyperparams h;
  h.lr = lr;
  h.rho = rho_;
  h.momentum = momentum_;
  h.epsilon = epsilon_;
  return h;
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
      .InFloat32()
      .Doc(doc);
}
Param Epsilon() {
  return Param::Float("epsilon").Default(1e-7).Min(0, false).InFloat32().Doc(
      "added to the denominator for numerical stability");
}

}  // namespace

MT_REGISTER(OptimizerType,
            {.name = "sgd",
             .doc = "w -= lr*g (ApplyGradientDescent)",
             .learning_rate = 0.01,
             .create = [](const Params&, Schedule schedule) {
               return std::unique_ptr<Optimizer>(
                   new GradientDescentOptimizer(std::move(schedule)));
             }});

MT_REGISTER(OptimizerType,
            {.name = "momentum",
             .doc = "a = m*a + g; w -= lr*a (ApplyMomentum)",
             .learning_rate = 0.01,
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
                             .InFloat32()
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

MT_REGISTER(
    OptimizerType,
    {.name = "adamw",
     .doc = "Keras AdamW: w -= lr*weight_decay*w, then Adam in Keras's "
            "float ops",
     .params = {{Param::Float("weight_decay")
                     .Default(0.004)
                     .Min(0)
                     .InFloat32()
                     .Doc("decoupled decay: w -= lr*weight_decay*w before "
                          "each Adam step"),
                 UnitInterval("beta1", 0.9, "decay of m"),
                 UnitInterval("beta2", 0.999, "decay of v"), Epsilon(),
                 Param::StringList("exclude_from_weight_decay")
                     .Default(std::vector<std::string>{})
                     .Doc("variables whose name contains one of these "
                          "(substrings, not regexes) are not decayed")}},
     .create = [](const Params& p, Schedule schedule) {
       return std::unique_ptr<Optimizer>(new AdamWOptimizer(
           std::move(schedule), p.Float("weight_decay"), p.Float("beta1"),
           p.Float("beta2"), p.Float("epsilon"),
           p.StringList("exclude_from_weight_decay")));
     }});

MT_REGISTER(OptimizerType,
            {.name = "adamax",
             .doc = "Keras Adamax: m, then u = max(beta2*u, |g|), w -= "
                    "lr*m / ((1 - beta1^t)*(u + epsilon))",
             .params = {{UnitInterval("beta1", 0.9, "decay of m"),
                         UnitInterval("beta2", 0.999, "decay of u"),
                         Epsilon()}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(
                   new AdamaxOptimizer(std::move(schedule), p.Float("beta1"),
                                       p.Float("beta2"), p.Float("epsilon")));
             }});

MT_REGISTER(OptimizerType,
            {.name = "nadam",
             .doc = "Keras Nadam: Adam with a Nesterov-style m under the "
                    "schedule u_t = beta1*(1 - 0.5*0.96^t): w -= lr*(u_{t+1}*m "
                    "/ (1 - prod u_{t+1}) + (1 - u_t)*g / (1 - prod u_t)) / "
                    "(sqrt(v / (1 - beta2^t)) + epsilon)",
             .params = {{UnitInterval("beta1", 0.9, "decay of m"),
                         UnitInterval("beta2", 0.999, "decay of v"),
                         Epsilon()}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(
                   new NadamOptimizer(std::move(schedule), p.Float("beta1"),
                                      p.Float("beta2"), p.Float("epsilon")));
             }});

MT_REGISTER(OptimizerType,
            {.name = "lion",
             .doc = "Keras Lion: w -= lr*sign(beta1*m + (1-beta1)*g), then "
                    "m = beta2*m + (1-beta2)*g",
             .params = {{UnitInterval("beta1", 0.9,
                                      "weight of m in the update's sign"),
                         UnitInterval("beta2", 0.99, "decay of m")}},
             .create = [](const Params& p, Schedule schedule) {
               return std::unique_ptr<Optimizer>(new LionOptimizer(
                   std::move(schedule), p.Float("beta1"), p.Float("beta2")));
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
