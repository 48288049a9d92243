// RunDirLock: one process at a time owns a run directory.
//
// An advisory lock (flock) on "<run_dir>/mirrortrain.lock", which holds the
// owner's pid so that a second process can name it. The kernel drops the
// lock when the owner exits, however it exits, so a stale file never blocks
// anyone: only a live holder does.
//
// A run that fails before writing anything (bad checkpoint, bad data) is to
// leave the disk as it was: unless KeepFiles() was called, releasing the
// lock removes the lock file and the directories if Acquire created them
// (a failed Acquire removes the directories it created as well).
//
// Ownership: owns the lock file's descriptor; movable, not copyable.
#ifndef MIRRORTRAIN_TRAINER_RUN_DIR_LOCK_H_
#define MIRRORTRAIN_TRAINER_RUN_DIR_LOCK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

class RunDirLock {
 public:
  static constexpr absl::string_view kFileName = "mirrortrain.lock";

  // Creates `run_dir` if needed and locks it. InvalidArgument when another
  // process holds the lock ("... in use by another mirrortrain process (pid
  // N) ..."), when `run_dir` cannot be created, when its lock file cannot
  // be opened for want of permission or a writable file system, or is not
  // a regular file; other errors from the file system (a full disk) with
  // their errno's code. A failure removes what it created.
  static absl::StatusOr<RunDirLock> Acquire(const std::string& run_dir);

  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

  // The run has written into the directory: keep the lock file and the
  // directory when the lock is released.
  void KeepFiles() { keep_files_ = true; }
  // FailedPrecondition when the lock file is no longer at its path: the run
  // directory was deleted, moved or replaced while this process held it,
  // so writing there would make a new directory no lock guards.
  absl::Status CheckHeld() const;

 private:
  RunDirLock() = default;
  void Release();

  std::string path_;
  int fd_ = -1;
  bool created_file_ = false;
  // Directories Acquire created, deepest first.
  std::vector<std::string> created_dirs_;
  bool keep_files_ = false;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_RUN_DIR_LOCK_H_
