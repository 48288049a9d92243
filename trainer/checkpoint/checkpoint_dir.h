// A checkpoint directory as the run that owns it sees it: which of
// mirrortrain's own files it holds, and the removal of what interrupted
// saves leave behind (temporaries, and checkpoints renamed into place whose
// index update never came, or that pruning had not deleted yet).
//
// Only regular files directly inside the directory and named like ours
// ("checkpoint", "ckpt-<step>.safetensors", and either with ".tmp.<pid>"
// appended, AtomicFileWriter's temporaries) are listed or deleted; links,
// subdirectories and other names are left alone.
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_DIR_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_DIR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mirrortrain::trainer {

struct CheckpointDirContents {
  // The index exists (as any kind of file: LatestCheckpoint judges it).
  bool has_index = false;
  // Names of "ckpt-<step>.safetensors" files, indexed or not, sorted.
  std::vector<std::string> checkpoints;
  // Names of temporaries of interrupted saves, sorted.
  std::vector<std::string> temporaries;
};

// What `dir` holds; empty when it does not exist. InvalidArgument when
// `dir` exists but is not a directory.
absl::StatusOr<CheckpointDirContents> ScanCheckpointDir(const std::string& dir);

// Deletes the temporaries in `dir` and, when it has an index, the
// checkpoints the index does not name, except the file `keep` (a checkpoint
// being restored; may be empty). The caller must own the directory: no
// process may be saving there. Returns the names deleted.
absl::StatusOr<std::vector<std::string>> RemoveCheckpointLeftovers(
    const std::string& dir, const std::string& keep);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_DIR_H_
