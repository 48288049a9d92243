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

absl::Status Invalid(absl::string_view key, absl::string_view requirement,
                     absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat(kPrefix, key, " must be ", requirement, ", got ", got));
}

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

absl::Status CheckLearningRate(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.learning_rate must be a finite number > 0, got ", lr));
  }
  return absl::OkStatus();
}

absl::Status CheckDecaySteps(int64_t decay_steps) {
  if (decay_steps <= 0) {
    return Invalid("decay_steps", "> 0", absl::StrCat(decay_steps));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LearningRateSchedule>> MakeBase(
    const ScheduleOptions& o) {
  if (o.name == "constant") {
    MT_RETURN_IF_ERROR(CheckLearningRate(o.learning_rate));
    return std::make_unique<ConstantSchedule>(o.learning_rate);
  }
  if (o.name == "exponential_decay") {
    MT_RETURN_IF_ERROR(CheckLearningRate(o.learning_rate));
    MT_RETURN_IF_ERROR(CheckDecaySteps(o.decay_steps));
    if (!(o.decay_rate > 0) || !std::isfinite(o.decay_rate)) {
      return Invalid("decay_rate", "a finite number > 0",
                     absl::StrCat(o.decay_rate));
    }
    return std::make_unique<ExponentialDecaySchedule>(
        o.learning_rate, o.decay_steps, o.decay_rate, o.staircase);
  }
  if (o.name == "piecewise_constant") {
    if (o.values.size() != o.boundaries.size() + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kPrefix, "values must have one more entry than ",
                       kPrefix, "boundaries, got ", o.values.size(),
                       " values and ", o.boundaries.size(), " boundaries"));
    }
    for (size_t i = 1; i < o.boundaries.size(); ++i) {
      if (o.boundaries[i] <= o.boundaries[i - 1]) {
        return Invalid(
            "boundaries", "strictly increasing",
            absl::StrCat("[", absl::StrJoin(o.boundaries, ", "), "]"));
      }
    }
    for (size_t i = 0; i < o.values.size(); ++i) {
      if (!(o.values[i] >= 0) || !std::isfinite(o.values[i])) {
        return Invalid(absl::StrCat("values[", i, "]"), "a finite number >= 0",
                       absl::StrCat(o.values[i]));
      }
    }
    return std::make_unique<PiecewiseConstantSchedule>(o.boundaries, o.values);
  }
  if (o.name == "cosine_decay") {
    MT_RETURN_IF_ERROR(CheckLearningRate(o.learning_rate));
    MT_RETURN_IF_ERROR(CheckDecaySteps(o.decay_steps));
    if (!(o.alpha >= 0 && o.alpha <= 1)) {
      return Invalid("alpha", "in [0, 1]", absl::StrCat(o.alpha));
    }
    return std::make_unique<CosineDecaySchedule>(o.learning_rate, o.decay_steps,
                                                 o.alpha);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(kPrefix, "name: unknown schedule '", o.name,
                   "'; valid: constant, exponential_decay, piecewise_constant, "
                   "cosine_decay"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LearningRateSchedule>> MakeSchedule(
    const ScheduleOptions& options) {
  if (options.warmup_steps < 0) {
    return Invalid("warmup_steps", ">= 0", absl::StrCat(options.warmup_steps));
  }
  absl::StatusOr<std::unique_ptr<LearningRateSchedule>> base =
      MakeBase(options);
  if (!base.ok() || options.warmup_steps == 0) return base;
  return std::make_unique<WarmupSchedule>(*std::move(base),
                                          options.warmup_steps);
}

}  // namespace mirrortrain::trainer
