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
//   polynomial_decay:   (learning_rate - end) * (1 - p)^power + end,
//                       p = min(step, decay_steps) / decay_steps (with
//                       cycle: step over the next multiple of decay_steps)
//   inverse_time_decay: learning_rate / (1 + decay_rate * step /
//                       decay_steps) (floored when staircase)
//   cosine_decay_restarts: SGDR, Keras's CosineDecayRestarts
// They match Keras given float64 rates (np.float64); Keras given a Python
// float evaluates in float32. cosine_decay_restarts finds its period with
// a float64 log, so a restart can come a step late where the log rounds
// below an integer, as in Keras's float64.
// warmup_steps W > 0 wraps any of them: step < W gives base(0) * step / W,
// step >= W gives base(step - W). For cosine_decay this is Keras'
// CosineDecay(initial_learning_rate=0, warmup_target=learning_rate).
//
// Thread contract: schedules are immutable after construction; operator()
// may be called from any thread.
#ifndef MIRRORTRAIN_TRAINER_OPTIM_LR_SCHEDULE_H_
#define MIRRORTRAIN_TRAINER_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/params.h"
#include "tensor/registry.h"

namespace mirrortrain::trainer {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The learning rate for the update that follows `step` applied updates.
  virtual double operator()(int64_t step) const = 0;
};

// A schedule as the config names it (`optimizer.schedule.name`), registered
// next to its class with its own keys.
struct ScheduleType {
  std::string name;
  std::string doc;
  ParamSchema params;
  // `params` are checked already; `learning_rate` > 0.
  std::function<std::unique_ptr<LearningRateSchedule>(const Params& params,
                                                      double learning_rate)>
      create;
  // False when the schedule's own keys are the rates (piecewise_constant's
  // values, as Keras's PiecewiseConstantDecay is the whole learning_rate):
  // an optimizer.learning_rate given with it is an error, not ignored.
  bool uses_learning_rate = true;
};
using ScheduleRegistry = Registry<ScheduleType>;

// Keys every schedule takes (warmup_steps).
const ParamSchema& ScheduleCommonParams();

// Checks `params` against ScheduleCommonParams() and the schema of schedule
// `name` (InvalidArgument naming "optimizer.schedule.<key>") and builds it,
// wrapped in the warmup when warmup_steps > 0.
absl::StatusOr<std::unique_ptr<LearningRateSchedule>> MakeSchedule(
    const std::string& name, const Params& params, double learning_rate);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_OPTIM_LR_SCHEDULE_H_
