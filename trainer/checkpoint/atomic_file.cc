#include "trainer/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

// Names the unnamed file open as `fd` `name` (a leftover there, of a
// crashed process with our pid, is garbage; linkat never follows or
// replaces what is there). 0, or the errno of the failure.
int LinkTo(int fd, const std::string& name) {
  ::unlink(name.c_str());
  const std::string self = absl::StrCat("/proc/self/fd/", fd);
  const int linked = ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(),
                              AT_SYMLINK_FOLLOW);
  return linked == 0 ? 0 : errno;  // Read before `self` is freed.
}

// An unnamed file (O_TMPFILE) in `dir` opened for writing, or -1 where
// the file system, /proc or the name `temp_path` would not let Commit
// name it: a throwaway unnamed file is named `temp_path` and removed
// first, which tries all three.
int OpenUnnamed(const std::string& dir, const std::string& temp_path) {
  if (::access("/proc/self/fd", X_OK) != 0) return -1;
  const int probe = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (probe < 0) return -1;
  const bool named = LinkTo(probe, temp_path) == 0;
  ::close(probe);
  if (!named || ::unlink(temp_path.c_str()) != 0) return -1;
  return ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
}

// The directory holding `path` ("." for a bare file name).
std::string DirectoryOf(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent;
}

}  // namespace

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(
    const std::string& path) {
  std::string temp_path = absl::StrCat(path, ".tmp.", ::getpid());
  // An unnamed file in the target's directory gets its name only at
  // Commit, so a process killed while writing leaves nothing behind;
  // where it cannot be had, the file is named from the start.
  if (const int fd = OpenUnnamed(DirectoryOf(path), temp_path); fd >= 0) {
    AtomicFileWriter writer(path, std::move(temp_path), fd);
    writer.named_ = false;
    return writer;
  }
  // A leftover from a crashed process that had our pid is garbage, not
  // something to fail on; a symbolic link there must not be followed (the
  // file it names would be overwritten), so the name is cleared and created
  // afresh.
  ::unlink(temp_path.c_str());
  const int fd =
      ::open(temp_path.c_str(),
             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error_number = errno;  // Before StrCat allocates.
    return absl::ErrnoToStatus(
        error_number,
        absl::StrCat(path, ": cannot create temporary file ", temp_path));
  }
  return AtomicFileWriter(path, std::move(temp_path), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)),
      named_(other.named_),
      renamed_(other.renamed_) {}

AtomicFileWriter& AtomicFileWriter::operator=(
    AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Discard();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    committed_ = std::exchange(other.committed_, true);
    named_ = other.named_;
    renamed_ = other.renamed_;
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Discard(); }

void AtomicFileWriter::Discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  // An unnamed file goes with its descriptor.
  if (!committed_ && named_) ::unlink(temp_path_.c_str());
  committed_ = true;  // Nothing left to clean up.
}

absl::Status AtomicFileWriter::Append(absl::string_view data) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": write after the file was committed or failed"));
  }
  while (!data.empty()) {
    const ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      Discard();
      return absl::ErrnoToStatus(
          error_number,
          absl::StrCat(path_, ": write to ",
                       named_ ? temp_path_ : "its unnamed temporary file"));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": commit after the file was committed or failed"));
  }
  // An unnamed file gets the temporary name first (the link, like the
  // data, is then made durable by the fsyncs), then goes on as a named one.
  if (!named_) {
    if (const int error_number = LinkTo(fd_, temp_path_); error_number != 0) {
      Discard();
      return absl::ErrnoToStatus(
          error_number, absl::StrCat(path_, ": cannot name ", temp_path_));
    }
    named_ = true;
  }
  if (::fsync(fd_) != 0) {
    const int error_number = errno;
    Discard();
    return absl::ErrnoToStatus(error_number,
                               absl::StrCat(path_, ": fsync of ", temp_path_));
  }
  // close() can report deferred write errors (e.g. on NFS).
  const int close_result = ::close(fd_);
  fd_ = -1;
  if (close_result != 0) {
    const int error_number = errno;
    Discard();
    return absl::ErrnoToStatus(error_number,
                               absl::StrCat(path_, ": close of ", temp_path_));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error_number = errno;
    Discard();
    return absl::ErrnoToStatus(
        error_number, absl::StrCat(path_, ": rename from ", temp_path_));
  }
  committed_ = true;
  renamed_ = true;
  // Without this the rename may not survive a power loss, and a later step
  // (the checkpoint index) could then name a file that is not there.
  if (absl::Status synced = FsyncDirectory(DirectoryOf(path_)); !synced.ok()) {
    return absl::Status(synced.code(),
                        absl::StrCat(path_, ": ", synced.message()));
  }
  return absl::OkStatus();
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int error_number = errno;
    return absl::ErrnoToStatus(
        error_number, absl::StrCat("open directory ", dir, " to fsync it"));
  }
  const int sync_result = ::fsync(dir_fd);
  const int sync_errno = errno;
  ::close(dir_fd);
  if (sync_result != 0) {
    return absl::ErrnoToStatus(sync_errno,
                               absl::StrCat("fsync of directory ", dir));
  }
  return absl::OkStatus();
}

std::vector<std::string> MissingDirectories(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> missing;
  std::error_code ec;
  for (fs::path p = fs::absolute(dir, ec); !ec && p != p.parent_path();
       p = p.parent_path()) {
    std::error_code status_ec;  // Set for "not found" too.
    if (fs::symlink_status(p, status_ec).type() != fs::file_type::not_found) {
      break;
    }
    missing.push_back(p.string());
  }
  return missing;
}

absl::Status CreateDirectoriesDurably(const std::string& dir) {
  const std::vector<std::string> missing = MissingDirectories(dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    // ErrnoToStatus appends the system's reason itself.
    return absl::ErrnoToStatus(ec.value(),
                               absl::StrCat(dir, ": cannot create directory"));
  }
  for (const std::string& created : missing) {
    if (absl::Status synced = FsyncDirectory(DirectoryOf(created));
        !synced.ok()) {
      return absl::Status(synced.code(),
                          absl::StrCat(dir, ": ", synced.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, bool* renamed) {
  if (renamed != nullptr) *renamed = false;
  MT_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(path));
  MT_RETURN_IF_ERROR(writer.Append(contents));
  const absl::Status committed = writer.Commit();
  if (renamed != nullptr) *renamed = writer.renamed();
  return committed;
}

}  // namespace mirrortrain::trainer
