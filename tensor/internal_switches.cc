#include "tensor/internal_switches.h"

#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mirrortrain {
namespace {

// The switches ApplyInternalSwitches set, in the order given (set before
// any work, as the setters are; read after it).
std::vector<const InternalSwitch*>& Applied() {
  static auto* applied = new std::vector<const InternalSwitch*>();
  return *applied;
}

}  // namespace

absl::StatusOr<std::string> ApplyInternalSwitches(absl::string_view spec) {
  const Registry<InternalSwitch>& registry = Registry<InternalSwitch>::Global();
  std::vector<std::pair<const InternalSwitch*, bool>> settings;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const absl::string_view name = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", item, "' names no switch"));
    }
    const InternalSwitch* s = registry.Find(name);
    if (s == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown switch '", name, "' (known: ", registry.NameList(), ")"));
    }
    if (value != "on" && value != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "switch '", name, "': expected on or off, got '", value, "'"));
    }
    for (const auto& [earlier, on] : settings) {
      if (earlier == s) {
        return absl::InvalidArgumentError(
            absl::StrCat("switch '", name, "' is given twice"));
      }
    }
    settings.emplace_back(s, value == "on");
  }
  std::vector<std::string> applied;
  for (const auto& [s, on] : settings) {
    s->set(on);
    if (absl::c_find(Applied(), s) == Applied().end()) Applied().push_back(s);
    applied.push_back(absl::StrCat(s->name, on ? "=on" : "=off"));
  }
  return absl::StrJoin(applied, ", ");
}

std::string InternalSwitchCalls() {
  std::vector<std::string> counts;
  for (const InternalSwitch* s : Applied()) {
    if (s->calls != nullptr) {
      counts.push_back(absl::StrCat(s->name, ": ", s->calls(), " calls"));
    }
  }
  return absl::StrJoin(counts, ", ");
}

}  // namespace mirrortrain
