#include "trainer/checkpoint/warm_start.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "trainer/optim/ema.h"

namespace mirrortrain::trainer {
namespace {

absl::StatusOr<std::regex> Compile(absl::string_view pattern) {
  try {
    return std::regex(pattern.begin(), pattern.end(), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", pattern, "' is not a regular expression (", e.what(), ")"));
  }
}

}  // namespace

absl::Status CheckWarmStartPattern(absl::string_view pattern) {
  return Compile(pattern).status();
}

absl::StatusOr<std::vector<std::pair<std::string, Variable*>>> WarmStartEntries(
    const std::vector<Variable*>& variables, absl::string_view pattern,
    bool ema_weights) {
  absl::StatusOr<std::regex> selects = Compile(pattern);
  if (!selects.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.warm_start_vars: ", selects.status().message()));
  }
  std::vector<std::pair<std::string, Variable*>> entries;
  for (Variable* v : variables) {
    if (!std::regex_match(v->name(), *selects)) continue;
    entries.emplace_back(ema_weights && v->trainable()
                             ? ExponentialMovingAverage::ShadowName(v->name())
                             : v->name(),
                         v);
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(
        variables.empty()
            ? std::string("checkpoint.warm_start_vars: the model has no "
                          "variables to warm start")
            : absl::StrCat("checkpoint.warm_start_vars: '", pattern,
                           "' matches none of the ", variables.size(),
                           " model variables (the first is '",
                           variables.front()->name(),
                           "'; the whole name must match)"));
  }
  return entries;
}

}  // namespace mirrortrain::trainer
