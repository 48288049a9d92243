// Which model variables a warm start (checkpoint.warm_start_from) assigns,
// and from which entries of the source checkpoint: TF's
// WarmStartSettings(vars_to_warm_start=...), and warm starting from the
// source's EMA averages, which TF reaches by mapping each variable to its
// "<name>/ExponentialMovingAverage" entry (var_name_to_prev_var_name).
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_WARM_START_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_WARM_START_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/params.h"
#include "tensor/variable.h"
#include "trainer/checkpoint/safetensors.h"

namespace mirrortrain::trainer {

// OK when `pattern` is an ECMAScript regular expression; otherwise
// InvalidArgument saying why (without the key: the caller names it).
absl::Status CheckWarmStartPattern(absl::string_view pattern);

// OK when no two entries of `names` (name in the source -> variable) name
// the same variable and no name is empty; otherwise InvalidArgument saying
// which (without the key).
absl::Status CheckWarmStartNames(const StringMap& names);

// (entry name in `source`, variable) for each of `variables` whose whole
// name `pattern` matches, in their order. The entry is the name `names`
// maps to the variable (name in the source -> variable), else the
// variable's own; with `ema_weights` that entry's EMA shadow where `source`
// holds one (its run averaged the variables it trained; batch-norm
// statistics and layers it froze come as saved). Fails, naming the key,
// when the pattern is invalid or matches none of them, when `names` maps to
// a name that is no model variable or one the pattern leaves out, or with
// `ema_weights` when `source` holds no average of any of them (its run kept
// no EMA). Entries are not checked further here (Saver::Restore does). The
// variables are not owned.
absl::StatusOr<std::vector<std::pair<std::string, Variable*>>> WarmStartEntries(
    const std::vector<Variable*>& variables, absl::string_view pattern,
    const StringMap& names, bool ema_weights, const SafetensorsFile& source);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_WARM_START_H_
