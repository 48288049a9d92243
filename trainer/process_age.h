// How long this process has been running, for the trainer's start-up line:
// a time-to-accuracy run is timed from launch, so the time before main()
// (mapping the binary and its shared libraries, their constructors) counts
// as much as the start-up the trainer times itself.
//
// Linux only: /proc/self/stat's start time (clock ticks since boot, 10 ms
// each on common kernels) against CLOCK_BOOTTIME. Thread-safe.
#ifndef MIRRORTRAIN_TRAINER_PROCESS_AGE_H_
#define MIRRORTRAIN_TRAINER_PROCESS_AGE_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

// Seconds since the kernel started this process; nullopt where the start
// time cannot be read (not Linux, no /proc).
std::optional<double> ProcessAgeSeconds();

// The start time field (the 22nd, in clock ticks since boot) of a
// /proc/<pid>/stat line; nullopt if the line is malformed. The command name
// (2nd field) is parenthesized and may itself hold spaces and ')'.
std::optional<uint64_t> StartTicksFromStat(absl::string_view stat);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_PROCESS_AGE_H_
