// Learning-rate schedules, after keras.optimizers.schedules.
//
// A schedule maps the optimizer's step count (the number of updates already
// applied) to a learning rate, in float64 as Keras evaluates them:
//   constant:           learning_rate
//   exponential_decay:  learning_rate * decay_rate^(step / decay_steps)
//                       (exponent floored when staircase)
//   piecewise_constant: values[0] for step <= boundaries[0], values[i] for
//                       boundaries[i-1] < step <= boundaries[i], values.back()
//                       after the last boundary (learning_rate is ignored)
//   cosine_decay:       s = min(step, decay_steps);
//                       learning_rate * ((1 - alpha) * 0.5 *
//                       (1 + cos(pi * s / decay_steps)) + alpha)
// warmup_steps W > 0 wraps any of them: step < W gives base(0) * step / W,
// step >= W gives base(step - W). For cosine_decay this is Keras'
// CosineDecay(initial_learning_rate=0, warmup_target=learning_rate).
//
// Thread contract: schedules are immutable after construction; operator()
// may be called from any thread.
#ifndef MIRRORTRAIN_TRAINER_OPTIM_LR_SCHEDULE_H_
#define MIRRORTRAIN_TRAINER_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mirrortrain::trainer {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The learning rate for the update that follows `step` applied updates.
  virtual double operator()(int64_t step) const = 0;
};

// The `optimizer.schedule` config section plus `optimizer.learning_rate`.
struct ScheduleOptions {
  // constant | exponential_decay | piecewise_constant | cosine_decay
  std::string name = "constant";
  double learning_rate = 0;
  int64_t decay_steps = 0;          // exponential_decay, cosine_decay
  double decay_rate = 0;            // exponential_decay
  bool staircase = false;           // exponential_decay
  std::vector<int64_t> boundaries;  // piecewise_constant
  std::vector<double> values;       // piecewise_constant
  double alpha = 0;                 // cosine_decay: final fraction of lr
  int64_t warmup_steps = 0;         // any schedule
};

// Validates `options` and builds the schedule. Errors are InvalidArgument
// and name the offending config key (e.g. "optimizer.schedule.decay_steps").
absl::StatusOr<std::unique_ptr<LearningRateSchedule>> MakeSchedule(
    const ScheduleOptions& options);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_OPTIM_LR_SCHEDULE_H_
