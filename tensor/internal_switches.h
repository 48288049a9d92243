// Internal switches: the on/off knobs of optimizations whose worth can only
// be measured on a device, so that one benchmark session runs a model both
// ways (scripts/bench_gpu.sh's A/B rows) instead of comparing builds. Each
// is registered next to its setter (MT_REGISTER(InternalSwitch, ...)), the
// one tests call. Not config: a switch changes how a step is computed,
// never what it means (some change float rounding: which kernel sums), and
// none is kept with a run.
//
// The CLI reads them from the environment, as XLA_FLAGS, for the verbs
// that run a model (train, eval, sample):
//   MIRRORTRAIN_SWITCHES=bf16_copies=off,batched_step_copies=off
// Every process reads its own environment (mpirun -x passes it on).
//
// Thread contract: set before any work (the setters are process-wide).
#ifndef MIRRORTRAIN_TENSOR_INTERNAL_SWITCHES_H_
#define MIRRORTRAIN_TENSOR_INTERNAL_SWITCHES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/registry.h"

namespace mirrortrain {

struct InternalSwitch {
  std::string name;
  std::string doc;  // What it switches; "on" is the default unless said.
  void (*set)(bool on) = nullptr;
  // Optional: how many times this process took the switched path so far
  // (op calls on the host: eager steps and recordings; a replayed graph
  // makes none), so an A/B run shows that its switch changed something.
  int64_t (*calls)() = nullptr;
};

// Sets the switches of `spec`, "name=on|off" joined by commas (spaces and
// empty items ignored). Checks all before setting any: a missing, unknown
// or repeated name, or a value other than on or off, is InvalidArgument
// naming it (an unknown name also lists the known switches). Returns the
// settings applied, normalised ("a=off, b=on"; empty when none), for the
// run's log.
absl::StatusOr<std::string> ApplyInternalSwitches(absl::string_view spec);

// The call counts of the switches applied so far that count them
// ("a: 12 calls, b: 0 calls"; empty when none), for the run's log.
std::string InternalSwitchCalls();

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_INTERNAL_SWITCHES_H_
