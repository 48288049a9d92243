// AtomicFileWriter: writes a file so that readers see either the old file or
// the complete new one, never a torn one, even across a crash.
//
// Protocol: data goes to an unnamed file in the target's directory
// (O_TMPFILE, named through /proc/self/fd; where either is missing, or
// the name could not be given, to "<path>.tmp.<pid>" from the start);
// Commit names it "<path>.tmp.<pid>", fsyncs it, renames that over <path>
// and fsyncs the directory so the rename itself is durable. A process
// killed before Commit leaves no file behind (with the named fallback,
// its temporary; Create tries the name with a throwaway file, which a
// kill at that instant would leave). Until Commit renames, an existing <path>
// is untouched; a Commit that fails after the rename (the directory's fsync)
// has replaced it, which renamed() says. A writer destroyed without a
// successful Commit (or after any failure) removes its temporary file. The
// temporary name is created afresh (O_EXCL, O_NOFOLLOW): a link left there is
// removed, never followed.
//
// Ownership: owns the temporary file's descriptor; movable, not copyable.
// Thread contract: not synchronised; one writer per path at a time.
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_ATOMIC_FILE_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_ATOMIC_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

class AtomicFileWriter {
 public:
  // Creates the temporary file. The directory must exist.
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  const std::string& path() const { return path_; }

  // Appends bytes. After a failure the writer is unusable and the temporary
  // file is gone.
  absl::Status Append(absl::string_view data);
  // fsync, rename over path(), fsync the directory.
  absl::Status Commit();
  // Whether Commit got as far as the rename: then path() is the new file
  // even when Commit failed.
  bool renamed() const { return renamed_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  // Closes and unlinks the temporary file if still present.
  void Discard();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  // Whether temp_path_ names the file (false: O_TMPFILE until Commit).
  bool named_ = true;
  bool renamed_ = false;
};

// fsyncs directory `dir`, which makes the entries created or renamed in it
// durable.
absl::Status FsyncDirectory(const std::string& dir);

// The directories create_directories(dir) would make, as absolute paths,
// deepest first (empty when `dir` exists or its path cannot be resolved).
std::vector<std::string> MissingDirectories(const std::string& dir);

// create_directories(dir), and an fsync of the parent of each directory it
// created, so that they survive a power loss with the files later made
// durable in them. Errors name `dir`.
absl::Status CreateDirectoriesDurably(const std::string& dir);

// Writes `contents` to `path` with an AtomicFileWriter; `renamed` (may be
// null) gets its renamed().
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents,
                                 bool* renamed = nullptr);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_ATOMIC_FILE_H_
