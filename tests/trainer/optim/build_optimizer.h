// Builds schedules and optimizers by name with a few keys set, the rest at
// their registered defaults, as the config would (tests only).
#ifndef MIRRORTRAIN_TESTS_TRAINER_OPTIM_BUILD_OPTIMIZER_H_
#define MIRRORTRAIN_TESTS_TRAINER_OPTIM_BUILD_OPTIMIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/status_macros.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizers.h"

namespace mirrortrain::testing {

using trainer::LearningRateSchedule;
using trainer::MakeOptimizer;
using trainer::MakeSchedule;
using trainer::Optimizer;
using trainer::OptimizerRegistry;
using trainer::OptimizerType;
using trainer::ScheduleCommonParams;
using trainer::ScheduleRegistry;
using trainer::ScheduleType;

using Values = std::vector<std::pair<std::string, ParamValue>>;

// Defaults of `schemas` (null entries skipped), then `values`.
inline Params WithDefaults(std::vector<const ParamSchema*> schemas,
                           const Values& values) {
  Params out;
  for (const ParamSchema* s : schemas) {
    if (s == nullptr) continue;
    for (const Param& p : s->params) {
      if (auto d = p.default_value()) out.Set(p.name(), *d);
    }
  }
  for (const auto& [key, value] : values) out.Set(key, value);
  return out;
}

inline absl::StatusOr<std::unique_ptr<LearningRateSchedule>> BuildSchedule(
    const std::string& name, double learning_rate, const Values& values = {}) {
  const ScheduleType* type = ScheduleRegistry::Global().Find(name);
  return MakeSchedule(
      name,
      WithDefaults({&ScheduleCommonParams(), type ? &type->params : nullptr},
                   values),
      learning_rate);
}

inline absl::StatusOr<std::unique_ptr<Optimizer>> BuildOptimizer(
    const std::string& name, double learning_rate, const Values& values = {},
    const std::string& schedule = "constant",
    const Values& schedule_values = {}) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<LearningRateSchedule> s,
                      BuildSchedule(schedule, learning_rate, schedule_values));
  const OptimizerType* type = OptimizerRegistry::Global().Find(name);
  return MakeOptimizer(name,
                       WithDefaults({type ? &type->params : nullptr}, values),
                       std::move(s));
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TRAINER_OPTIM_BUILD_OPTIMIZER_H_
