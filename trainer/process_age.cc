#include "trainer/process_age.h"

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace mirrortrain::trainer {

std::optional<uint64_t> StartTicksFromStat(absl::string_view stat) {
  // The name ends at the last ')': only the fields after it are fixed.
  const size_t name_end = stat.rfind(')');
  if (name_end == absl::string_view::npos) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(name_end + 1), ' ', absl::SkipEmpty());
  // fields[0] is the 3rd field (the state), so the 22nd is fields[19].
  constexpr size_t kStartTime = 22 - 3;
  uint64_t ticks = 0;
  if (fields.size() <= kStartTime ||
      !absl::SimpleAtoi(fields[kStartTime], &ticks)) {
    return std::nullopt;
  }
  return ticks;
}

std::optional<double> ProcessAgeSeconds() {
  std::ifstream file("/proc/self/stat");
  const std::string stat((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  const std::optional<uint64_t> ticks = StartTicksFromStat(stat);
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (!ticks.has_value() || ticks_per_second <= 0 ||
      clock_gettime(CLOCK_BOOTTIME, &now) != 0) {
    return std::nullopt;
  }
  const double since_boot =
      static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
  return since_boot -
         static_cast<double>(*ticks) / static_cast<double>(ticks_per_second);
}

}  // namespace mirrortrain::trainer
