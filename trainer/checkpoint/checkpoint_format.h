// The training checkpoint format: what a checkpoint of a run holds besides
// its tensors, the format versions this build reads, and the checks a
// checkpoint passes before a run is restored from it.
//
// Versions: "mirrortrain/2" (written now) carries the data checksum
// kDataCrc32cKey, which SafetensorsFile::Open verifies; "mirrortrain/1"
// (written before the checksum existed) is still read, unverified.
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_FORMAT_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/variable.h"
#include "trainer/checkpoint/safetensors.h"

namespace mirrortrain::trainer {

inline constexpr absl::string_view kCheckpointFormat = "mirrortrain/2";
inline constexpr absl::string_view kCheckpointFormatV1 = "mirrortrain/1";

// The largest step a checkpoint may hold: 2^53, the largest integer that
// every JSON reader of metrics.jsonl (doubles) holds exactly.
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 53;

// Where a checkpointed run stands.
struct CheckpointPosition {
  int64_t step = 0;
  // The input pipeline's next batch, in batches of input_batch_size
  // (metadata "input_batch_size", the data.global_batch_size it was saved
  // under; older files have none).
  int64_t input_epoch = 0;
  int64_t input_batch = 0;
  std::optional<int64_t> input_batch_size;
  // The training loss summed over the steps since the last logged one, and
  // how many: the next logged line averages them with the steps after the
  // resume, as an uninterrupted run's does. Metadata "log_window_loss" and
  // "log_window_steps" (both or neither: older files have none).
  double log_window_loss = 0;
  int64_t log_window_steps = 0;
};

// Before saving the state after `step`: Aborted naming the first of `vars`
// with a NaN or infinity in its floating-point values (and how many more
// there are), since CheckTrainingCheckpoint would refuse the file.
absl::Status CheckFiniteState(absl::Span<Variable* const> vars, int64_t step);

// Checks that `file` is a training checkpoint this build can resume from and
// returns its position. InvalidArgument naming the file and the problem for:
// a missing or unknown "format"; a mirrortrain/2 file without its checksum;
// "step", "input_epoch" or "input_batch" missing, not an integer, negative,
// an "input_batch_size" there but not an integer >= 1,
// or a step past kMaxCheckpointStep; a "global_step" tensor that is missing,
// not an int64 scalar, or not equal to "step"; and, unless
// `allow_non_finite`, NaN or infinity in any floating-point tensor; a log
// window that is half there, not a number, or longer than the steps.
absl::StatusOr<CheckpointPosition> CheckTrainingCheckpoint(
    const SafetensorsFile& file, bool allow_non_finite);

// Whether `file` claims to be a mirrortrain checkpoint: its metadata
// "format" starts with "mirrortrain/" (a version this build does not read
// included). Other safetensors files hold weights only: numpy's and Keras's
// (no metadata), PyTorch's and Hugging Face's ("format": "pt").
bool IsMirrortrainCheckpoint(const SafetensorsFile& file);

// Unless `allow_non_finite`: InvalidArgument naming the file and the first
// of its entries `names` (present in it) holding NaN or infinity, as
// CheckTrainingCheckpoint says it: for a file of weights only, whose
// entries a run does not read (a mask buffer of -inf) stay unchecked.
absl::Status CheckEntriesFinite(const SafetensorsFile& file,
                                absl::Span<const std::string> names,
                                bool allow_non_finite);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_FORMAT_H_
