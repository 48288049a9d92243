#include "trainer/checkpoint/warm_start.h"

#include <regex>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
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

absl::Status CheckWarmStartNames(const StringMap& names) {
  absl::flat_hash_map<std::string, std::string> source_of;
  for (const auto& [source, variable] : names) {
    if (source.empty() || variable.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("an empty name ('", source, "': '", variable, "')"));
    }
    auto [it, inserted] = source_of.emplace(variable, source);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", it->second, "' and '", source, "' both name '",
                       variable, "' (one entry per variable)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, Variable*>>> WarmStartEntries(
    const std::vector<Variable*>& variables, absl::string_view pattern,
    const StringMap& names, bool ema_weights, const SafetensorsFile& source) {
  absl::StatusOr<std::regex> selects = Compile(pattern);
  if (!selects.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.warm_start_vars: ", selects.status().message()));
  }
  MT_RETURN_IF_ERROR(CheckWarmStartNames(names));
  // variable -> its name in the source, where `names` says.
  absl::flat_hash_map<std::string, std::string> renamed;
  for (const auto& [in_source, variable] : names) {
    const bool exists = absl::c_any_of(
        variables, [&](const Variable* v) { return v->name() == variable; });
    if (!exists || !std::regex_match(variable, *selects)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.warm_start_names: '", in_source, "' maps to '", variable,
          "', which is ",
          exists ? "not among the variables checkpoint.warm_start_vars "
                   "selects"
          : variables.empty()
              ? std::string("no model variable (the model has none)")
              : absl::StrCat("no model variable (the model's are '",
                             variables.front()->name(), "' and the like)")));
    }
    renamed.emplace(variable, in_source);
  }
  std::vector<std::pair<std::string, Variable*>> entries;
  // entry -> the variable that reads it: two may not (a variable renamed to
  // a name another selected one keeps as its own).
  absl::flat_hash_map<std::string, const Variable*> reader;
  int averaged = 0;
  for (Variable* v : variables) {
    if (!std::regex_match(v->name(), *selects)) continue;
    auto mapped = renamed.find(v->name());
    std::string entry = mapped == renamed.end() ? v->name() : mapped->second;
    if (auto [it, fresh] = reader.emplace(entry, v); !fresh) {
      const Variable* mine =
          renamed.contains(it->second->name()) ? v : it->second;
      const Variable* mapped_one = mine == v ? it->second : v;
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.warm_start_names: '", entry, "' would start both '",
          mine->name(), "' (its own name) and '", mapped_one->name(),
          "' (mapped); map the first elsewhere too, or leave it out of "
          "checkpoint.warm_start_vars"));
    }
    if (ema_weights) {
      std::string shadow = ExponentialMovingAverage::ShadowName(entry);
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
