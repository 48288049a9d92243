// Saver: saves and restores variables as safetensors checkpoints, after
// tf.train.Saver / tf.train.CheckpointManager.
//
// A checkpoint directory holds "ckpt-<step>.safetensors" files and a text
// index "checkpoint" in TensorFlow's format:
//
//   model_checkpoint_path: "ckpt-300.safetensors"
//   all_model_checkpoint_paths: "ckpt-100.safetensors"
//   all_model_checkpoint_paths: "ckpt-200.safetensors"
//   all_model_checkpoint_paths: "ckpt-300.safetensors"
//
// Entries in the index are file names in the directory, so a directory can
// be moved or copied. An index with any other entry (an absolute path, one
// with '/', "..") is rejected as malformed, and pruning deletes only regular
// files named like ours: nothing outside the directory is ever read or
// deleted through the index.
//
// Crash safety: Save writes the checkpoint file atomically, then atomically
// replaces the index, then deletes pruned files, so at every instant the
// index names complete files only.
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_SAVER_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_SAVER_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/variable.h"
#include "trainer/checkpoint/safetensors.h"

namespace mirrortrain::trainer {

// Ownership: a Saver holds non-owning Variable pointers; the variables must
// outlive it. Thread contract: not synchronised; do not save or restore
// while another thread updates the variables.
class Saver {
 public:
  // Saves each variable under variable->name().
  explicit Saver(const std::vector<Variable*>& variables);
  // Saves each variable under the given entry name (file entry name ->
  // variable), as tf.train.Saver({"my_v2": v2}). A named factory rather than
  // a constructor: Saver({&a, &b}) would otherwise also match the pair
  // vector's iterator-range constructor.
  static Saver FromNameMap(
      std::vector<std::pair<std::string, Variable*>> name_map);

  // Writes dir/ckpt-<step>.safetensors (the variables' current values and
  // `metadata` plus the data checksum kDataCrc32cKey), then rewrites
  // dir/checkpoint to name it as the latest, then deletes the oldest
  // checkpoints beyond `max_to_keep` (<= 0 keeps all). Creates `dir` if needed.
  // Saving a step that is already in the index replaces that file and makes it
  // the latest. Returns the checkpoint's path. Fails (InvalidArgument) on a
  // null variable or duplicate entry names.
  absl::StatusOr<std::string> Save(
      const std::string& dir, int64_t step,
      const std::map<std::string, std::string>& metadata, int64_t max_to_keep);

  // Restores every variable of this saver from the checkpoint file `path`.
  // All entries are checked (present, same dtype and shape) before any
  // variable is assigned, so a failed restore changes nothing. Variables
  // outside this saver are untouched, and file entries no variable maps to
  // are ignored.
  absl::Status Restore(const std::string& path);
  // The same from a file already open.
  absl::Status Restore(const SafetensorsFile& file);

  const std::vector<std::pair<std::string, Variable*>>& entries() const {
    return entries_;
  }

 private:
  Saver() = default;
  absl::Status CheckEntries() const;

  std::vector<std::pair<std::string, Variable*>> entries_;
};

// "ckpt-<step>.safetensors".
std::string CheckpointFileName(int64_t step);
// The step of a name CheckpointFileName gives (decimal digits only), else
// nullopt.
std::optional<int64_t> ParseCheckpointFileName(absl::string_view name);
// "a directory", "a FIFO", ... for error messages.
absl::string_view FileTypeName(std::filesystem::file_type type);

// The index file's name in a checkpoint directory ("checkpoint").
absl::string_view CheckpointIndexName();

// The latest checkpoint named by dir/checkpoint, as a path inside `dir`.
// NotFound "<dir>: no checkpoint found (no 'checkpoint' index file)" when
// there is no index; NotFound when the index names a file that is missing;
// InvalidArgument when it names something that is not a regular file (links
// are not followed) or the index is malformed or not a regular file.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// A directory -> its latest checkpoint (a run directory, without an index
// of its own but with one in its `checkpoints` folder -> that folder's
// latest, as DESIGN's "a directory means its latest checkpoint"); a file ->
// itself; otherwise NotFound naming `path_or_dir`.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path_or_dir);

// The kept checkpoints named by dir/checkpoint, oldest first, as paths inside
// `dir`; empty when there is no index.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(
    const std::string& dir);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_SAVER_H_
