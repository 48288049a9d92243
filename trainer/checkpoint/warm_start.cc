#include "trainer/checkpoint/warm_start.h"

#include <regex>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "trainer/optim/ema.h"

namespace mirrortrain::trainer {
namespace {

// Far beyond any pattern over variable names: libstdc++'s std::regex
// compiles (and matches) recursively, and a pattern nested deep enough
// would overflow the stack instead of failing.
constexpr size_t kMaxPatternLength = 1000;

absl::StatusOr<std::regex> Compile(absl::string_view pattern) {
  if (pattern.size() > kMaxPatternLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pattern of ", pattern.size(), " characters (at most ",
                     kMaxPatternLength, ")"));
  }
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
    bool ema_weights, const SafetensorsFile& source) {
  absl::StatusOr<std::regex> selects = Compile(pattern);
  if (!selects.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.warm_start_vars: ", selects.status().message()));
  }
  std::vector<std::pair<std::string, Variable*>> entries;
  int averaged = 0;
  for (Variable* v : variables) {
    if (!std::regex_match(v->name(), *selects)) continue;
    std::string entry = v->name();
    if (ema_weights) {
      std::string shadow = ExponentialMovingAverage::ShadowName(v->name());
      if (source.Contains(shadow)) {
        entry = std::move(shadow);
        ++averaged;
      }
    }
    entries.emplace_back(std::move(entry), v);
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
  if (ema_weights && averaged == 0) {
    const bool kept_some =
        absl::c_any_of(source.names(), ExponentialMovingAverage::IsShadowName);
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.warm_start_weights: ema, but ", source.path(),
        " holds no EMA average of the ", entries.size(),
        " variables it starts (",
        kept_some ? "its run averaged others only" : "its run kept no EMA",
        "; use raw)"));
  }
  return entries;
}

}  // namespace mirrortrain::trainer
