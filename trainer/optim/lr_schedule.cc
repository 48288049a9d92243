#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

constexpr char kPrefix[] = "optimizer.schedule.";

class ConstantSchedule : public LearningRateSchedule {
 public:
  explicit ConstantSchedule(double lr) : lr_(lr) {}
  double operator()(int64_t) const override { return lr_; }

 private:
  double lr_;
};

class ExponentialDecaySchedule : public LearningRateSchedule {
 public:
  ExponentialDecaySchedule(double lr, int64_t decay_steps, double decay_rate,
                           bool staircase)
      : lr_(lr),
        decay_steps_(decay_steps),
        decay_rate_(decay_rate),
        staircase_(staircase) {}
  double operator()(int64_t step) const override {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps_);
    if (staircase_) p = std::floor(p);
    return lr_ * std::pow(decay_rate_, p);
  }

 private:
  double lr_;
  int64_t decay_steps_;
  double decay_rate_;
  bool staircase_;
};

class PiecewiseConstantSchedule : public LearningRateSchedule {
 public:
  PiecewiseConstantSchedule(std::vector<int64_t> boundaries,
                            std::vector<double> values)
      : boundaries_(std::move(boundaries)), values_(std::move(values)) {}
  double operator()(int64_t step) const override {
    // A step equal to a boundary stays in the earlier interval (Keras).
    auto it = std::lower_bound(boundaries_.begin(), boundaries_.end(), step);
    return values_[it - boundaries_.begin()];
  }

 private:
  std::vector<int64_t> boundaries_;
  std::vector<double> values_;
};

class CosineDecaySchedule : public LearningRateSchedule {
 public:
  CosineDecaySchedule(double lr, int64_t decay_steps, double alpha)
      : lr_(lr), decay_steps_(decay_steps), alpha_(alpha) {}
  double operator()(int64_t step) const override {
    // Evaluated in Keras' order of operations so results agree to the ulp.
    const double s = static_cast<double>(std::min(step, decay_steps_));
    const double fraction = s / static_cast<double>(decay_steps_);
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * fraction));
    return lr_ * ((1.0 - alpha_) * cosine + alpha_);
  }

 private:
  double lr_;
  int64_t decay_steps_;
  double alpha_;
};

// Keras PolynomialDecay, in its order of operations (float64).
class PolynomialDecaySchedule : public LearningRateSchedule {
 public:
  PolynomialDecaySchedule(double lr, int64_t decay_steps, double end,
                          double power, bool cycle)
      : lr_(lr),
        decay_steps_(decay_steps),
        end_(end),
        power_(power),
        cycle_(cycle) {}
  double operator()(int64_t step) const override {
    double s = static_cast<double>(step);
    double steps = static_cast<double>(decay_steps_);
    if (cycle_) {
      // The first multiple of decay_steps at or past the step (1 at 0).
      steps *= step == 0 ? 1.0 : std::ceil(s / steps);
    } else {
      s = std::min(s, steps);
    }
    const double p = s / steps;
    return (lr_ - end_) * std::pow(1 - p, power_) + end_;
  }

 private:
  double lr_;
  int64_t decay_steps_;
  double end_, power_;
  bool cycle_;
};

// Keras InverseTimeDecay: lr / (1 + rate * step / decay_steps).
class InverseTimeDecaySchedule : public LearningRateSchedule {
 public:
  InverseTimeDecaySchedule(double lr, int64_t decay_steps, double rate,
                           bool staircase)
      : lr_(lr),
        decay_steps_(decay_steps),
        rate_(rate),
        staircase_(staircase) {}
  double operator()(int64_t step) const override {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps_);
    if (staircase_) p = std::floor(p);
    return lr_ / (1.0 + rate_ * p);
  }

 private:
  double lr_;
  int64_t decay_steps_;
  double rate_;
  bool staircase_;
};

// Keras CosineDecayRestarts (SGDR, Loshchilov and Hutter): cosine periods
// of first_decay_steps * t_mul^i, the i-th peak scaled by m_mul^i, in
// Keras's order of operations (float64).
class CosineDecayRestartsSchedule : public LearningRateSchedule {
 public:
  CosineDecayRestartsSchedule(double lr, int64_t first_decay_steps,
                              double t_mul, double m_mul, double alpha)
      : lr_(lr),
        first_(first_decay_steps),
        t_mul_(t_mul),
        m_mul_(m_mul),
        alpha_(alpha) {}
  double operator()(int64_t step) const override {
    double completed = static_cast<double>(step) / static_cast<double>(first_);
    double restart;
    if (t_mul_ == 1.0) {
      restart = std::floor(completed);
      completed -= restart;
    } else {
      restart = std::floor(std::log(1.0 - completed * (1.0 - t_mul_)) /
                           std::log(t_mul_));
      const double sum = (1.0 - std::pow(t_mul_, restart)) / (1.0 - t_mul_);
      completed = (completed - sum) / std::pow(t_mul_, restart);
    }
    const double m_fac = std::pow(m_mul_, restart);
    const double cosine =
        0.5 * m_fac * (1.0 + std::cos(std::numbers::pi * completed));
    return lr_ * ((1.0 - alpha_) * cosine + alpha_);
  }

 private:
  double lr_;
  int64_t first_;
  double t_mul_, m_mul_, alpha_;
};

class WarmupSchedule : public LearningRateSchedule {
 public:
  WarmupSchedule(std::unique_ptr<LearningRateSchedule> base,
                 int64_t warmup_steps)
      : base_(std::move(base)), warmup_steps_(warmup_steps) {}
  double operator()(int64_t step) const override {
    if (step >= warmup_steps_) return (*base_)(step - warmup_steps_);
    return (*base_)(0) *
           (static_cast<double>(step) / static_cast<double>(warmup_steps_));
  }

 private:
  std::unique_ptr<LearningRateSchedule> base_;
  int64_t warmup_steps_;
};

Param DecaySteps() {
  return Param::Int("decay_steps")
      .Default(1000)
      .Min(1)
      .Doc("steps over which the rate decays");
}

using Made = std::unique_ptr<LearningRateSchedule>;

absl::Status CheckPiecewise(const Params& p) {
  const std::vector<int64_t> boundaries = p.IntList("boundaries");
  const std::vector<double> values = p.FloatList("values");
  if (values.size() != boundaries.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "values: must have one more entry than boundaries, got ", values.size(),
        " values and ", boundaries.size(), " boundaries"));
  }
  for (size_t i = 1; i < boundaries.size(); ++i) {
    if (boundaries[i] <= boundaries[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("boundaries: must be strictly increasing, got [",
                       absl::StrJoin(boundaries, ", "), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER(ScheduleType, {.name = "constant",
                           .doc = "learning_rate",
                           .create = [](const Params&, double lr) -> Made {
                             return std::make_unique<ConstantSchedule>(lr);
                           }});

MT_REGISTER(
    ScheduleType,
    {.name = "exponential_decay",
     .doc = "learning_rate * decay_rate^(step / decay_steps)",
     .params =
         {{DecaySteps(),
           Param::Float("decay_rate")
               .Default(0.96)
               .Min(0, false)
               .Doc("factor per decay_steps"),
           Param::Bool("staircase").Default(false).Doc("floor the exponent")}},
     .create = [](const Params& p, double lr) -> Made {
       return std::make_unique<ExponentialDecaySchedule>(
           lr, p.Int("decay_steps"), p.Float("decay_rate"),
           p.Bool("staircase"));
     }});

MT_REGISTER(
    ScheduleType,
    {.name = "piecewise_constant",
     .doc = "values[i] between boundaries (a step equal to a boundary stays "
            "in the earlier interval); its values are the rates, so "
            "optimizer.learning_rate stays out (or null)",
     .params = {{Param::IntList("boundaries")
                     .Default(std::vector<int64_t>{})
                     .Doc("steps where the rate changes, increasing"),
                 Param::FloatList("values")
                     .Default(std::vector<double>{})
                     .Min(0)
                     .InFloat32()
                     .Doc("one more than boundaries")},
                CheckPiecewise},
     .create = [](const Params& p, double) -> Made {
       return std::make_unique<PiecewiseConstantSchedule>(
           p.IntList("boundaries"), p.FloatList("values"));
     },
     .uses_learning_rate = false});

MT_REGISTER(ScheduleType,
            {.name = "cosine_decay",
             .doc = "learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * "
                    "min(step, decay_steps) / decay_steps)) + alpha)",
             .params = {{DecaySteps(),
                         Param::Float("alpha").Default(0.0).Min(0).Max(1).Doc(
                             "final fraction of the rate")}},
             .create = [](const Params& p, double lr) -> Made {
               return std::make_unique<CosineDecaySchedule>(
                   lr, p.Int("decay_steps"), p.Float("alpha"));
             }});

MT_REGISTER(
    ScheduleType,
    {.name = "polynomial_decay",
     .doc = "(learning_rate - end_learning_rate) * (1 - min(step, "
            "decay_steps) / decay_steps)^power + end_learning_rate; with "
            "cycle the decay steps grow to the next multiple of decay_steps",
     .params = {{DecaySteps(),
                 Param::Float("end_learning_rate")
                     .Default(0.0001)
                     .Min(0)
                     .Doc("the rate at decay_steps"),
                 Param::Float("power").Default(1.0).Min(0, false).Doc(
                     "1: linear"),
                 Param::Bool("cycle").Default(false).Doc(
                     "past decay_steps, decay over the next multiple of "
                     "decay_steps from where the rate stands (not from "
                     "learning_rate)")}},
     .create = [](const Params& p, double lr) -> Made {
       return std::make_unique<PolynomialDecaySchedule>(
           lr, p.Int("decay_steps"), p.Float("end_learning_rate"),
           p.Float("power"), p.Bool("cycle"));
     }});

MT_REGISTER(
    ScheduleType,
    {.name = "inverse_time_decay",
     .doc = "learning_rate / (1 + decay_rate * step / decay_steps)",
     .params =
         {{DecaySteps(),
           Param::Float("decay_rate").Min(0).Doc("how fast the rate falls"),
           Param::Bool("staircase")
               .Default(false)
               .Doc("floor step / decay_steps")}},
     .create = [](const Params& p, double lr) -> Made {
       return std::make_unique<InverseTimeDecaySchedule>(
           lr, p.Int("decay_steps"), p.Float("decay_rate"),
           p.Bool("staircase"));
     }});

MT_REGISTER(
    ScheduleType,
    {.name = "cosine_decay_restarts",
     .doc = "SGDR: learning_rate * ((1 - alpha) * m_mul^i * 0.5 * (1 + "
            "cos(pi * f)) + alpha) in period i (first_decay_steps * "
            "t_mul^i steps, f the fraction of it done), each restarting "
            "where the last ended",
     .params = {{Param::Int("first_decay_steps")
                     .Default(1000)
                     .Min(1)
                     .Doc("the first period's steps"),
                 Param::Float("t_mul").Default(2.0).Min(1).Doc(
                     "each period's length over the last's (below 1 the "
                     "periods end after finitely many steps, past which "
                     "Keras's rate is NaN)"),
                 Param::Float("m_mul").Default(1.0).Min(0).Doc(
                     "each period's cosine part over the last's"),
                 Param::Float("alpha").Default(0.0).Min(0).Max(1).Doc(
                     "the floor, a fraction of learning_rate")}},
     .create = [](const Params& p, double lr) -> Made {
       return std::make_unique<CosineDecayRestartsSchedule>(
           lr, p.Int("first_decay_steps"), p.Float("t_mul"), p.Float("m_mul"),
           p.Float("alpha"));
     }});

const ParamSchema& ScheduleCommonParams() {
  static const auto* schema = new ParamSchema{
      {Param::Int("warmup_steps")
           .Default(0)
           .Min(0)
           .Doc("linear warmup from 0 over this many steps, then the schedule "
                "shifted by them")}};
  return *schema;
}

absl::StatusOr<std::unique_ptr<LearningRateSchedule>> MakeSchedule(
    const std::string& name, const Params& params, double learning_rate) {
  const ScheduleType* type = ScheduleRegistry::Global().Find(name);
  if (type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        kPrefix, "name: unknown schedule '", name, "' (expected one of ",
        ScheduleRegistry::Global().NameList(), ")"));
  }
  for (const ParamSchema* schema : {&ScheduleCommonParams(), &type->params}) {
    absl::Status status = CheckParams(*schema, params);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kPrefix, status.message()));
    }
  }
  if (!(learning_rate > 0) || !std::isfinite(learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.learning_rate: expected a number > 0, got ", learning_rate));
  }
  Made base = type->create(params, learning_rate);
  const int64_t warmup = params.Int("warmup_steps");
  if (warmup == 0) return base;
  return std::make_unique<WarmupSchedule>(std::move(base), warmup);
}

}  // namespace mirrortrain::trainer
