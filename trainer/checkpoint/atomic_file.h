// AtomicFileWriter: writes a file so that readers see either the old file or
// the complete new one, never a torn one, even across a crash.
//
// Protocol: data goes to "<path>.tmp.<pid>" in the target's directory; Commit
// fsyncs it, renames it over <path> and fsyncs the directory so the rename
// itself is durable. Until Commit succeeds an existing <path> is untouched; a
// writer destroyed without a successful Commit (or after any failure)
// removes its temporary file.
//
// Ownership: owns the temporary file's descriptor; movable, not copyable.
// Thread contract: not synchronised; one writer per path at a time.
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_ATOMIC_FILE_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_ATOMIC_FILE_H_

#include <string>
#include <utility>

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

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  // Closes and unlinks the temporary file if still present.
  void Discard();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `contents` to `path` with an AtomicFileWriter.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_ATOMIC_FILE_H_
