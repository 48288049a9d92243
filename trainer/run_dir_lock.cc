#include "trainer/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/unique_fd.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;

// Acquire retries when the file it locked was unlinked meanwhile; a few
// tries are plenty, since each one that fails means another process made
// progress.
constexpr int kMaxAttempts = 16;

// The pid a holder wrote, or "unknown" (it may not have written it yet).
std::string HolderPid(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  const std::string pid(
      absl::StripAsciiWhitespace(absl::string_view(buffer, n > 0 ? n : 0)));
  return pid.empty() ? std::string("unknown") : pid;
}

// Whether `fd` is still the file at `path`: a holder that gives the
// directory up unlinks the file, and a lock on the unlinked file would guard
// nothing.
bool StillAtPath(int fd, const std::string& path) {
  struct stat by_fd, by_path;
  return ::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 &&
         by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

}  // namespace

absl::Status RunDirLock::CheckHeld() const {
  if (StillAtPath(fd_, path_)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      fs::path(path_).parent_path().string(),
      ": the run directory was deleted, moved or replaced while this run "
      "held it (its lock file ",
      path_, " is gone); stopping rather than writing into a new one"));
}

absl::StatusOr<RunDirLock> RunDirLock::Acquire(const std::string& run_dir) {
  RunDirLock lock;
  // The directories create_directories is about to make, deepest first.
  lock.created_dirs_ = MissingDirectories(run_dir);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(run_dir, ": cannot create run directory: ", ec.message()));
  }
  lock.path_ = (fs::path(run_dir) / std::string(kFileName)).string();
  const char* path = lock.path_.c_str();
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    // O_NOFOLLOW: a link planted here must not make us write elsewhere.
    UniqueFd fd(
        ::open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    const bool created = fd.get() >= 0;
    if (!created && errno == EEXIST) {
      fd = UniqueFd(::open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    }
    if (fd.get() < 0) {
      if (errno == ENOENT) continue;  // Removed since: try again.
      if (errno == ELOOP) {
        return absl::InvalidArgumentError(absl::StrCat(
            lock.path_, ": is a symbolic link, not mirrortrain's lock file"));
      }
      const int error_number = errno;
      // A run directory that cannot be written (read-only, not ours) is the
      // user's choice, as one that cannot be created: bad input, exit 2.
      // A full disk or an I/O error is not.
      switch (error_number) {
        case EACCES:
        case EPERM:
        case EROFS:
        case ENOTDIR:
        case EISDIR:
        case ENAMETOOLONG:
          return absl::InvalidArgumentError(absl::StrCat(
              lock.path_, ": cannot open: ", std::strerror(error_number)));
        default:
          return absl::ErrnoToStatus(error_number,
                                     absl::StrCat(lock.path_, ": cannot open"));
      }
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(lock.path_,
                       ": is not a regular file, so it cannot be "
                       "mirrortrain's lock file"));
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      const int error_number = errno;
      const std::string holder = HolderPid(fd.get());
      if (error_number == EWOULDBLOCK) {
        return absl::InvalidArgumentError(absl::StrCat(
            run_dir, " is in use by another mirrortrain process (pid ", holder,
            ", holding ", lock.path_,
            "); wait for it to finish or use another --run_dir"));
      }
      return absl::ErrnoToStatus(error_number,
                                 absl::StrCat(lock.path_, ": flock"));
    }
    if (!StillAtPath(fd.get(), lock.path_)) continue;
    // The lock is held: from here `lock` owns the file, so a failure below
    // removes what it created (the file, the directories) on the way out.
    lock.fd_ = fd.Release();
    lock.created_file_ = created;
    const std::string pid = absl::StrCat(::getpid(), "\n");
    if (::ftruncate(lock.fd_, 0) != 0 ||
        ::pwrite(lock.fd_, pid.data(), pid.size(), 0) !=
            static_cast<ssize_t>(pid.size())) {
      const int error_number = errno;
      return absl::ErrnoToStatus(
          error_number, absl::StrCat(lock.path_, ": cannot write the pid"));
    }
    return lock;
  }
  return absl::UnavailableError(absl::StrCat(
      lock.path_, ": the lock file kept being replaced; try again"));
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      created_file_(std::exchange(other.created_file_, false)),
      created_dirs_(std::exchange(other.created_dirs_, {})),
      keep_files_(other.keep_files_) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    created_file_ = std::exchange(other.created_file_, false);
    created_dirs_ = std::exchange(other.created_dirs_, {});
    keep_files_ = other.keep_files_;
  }
  return *this;
}

RunDirLock::~RunDirLock() { Release(); }

void RunDirLock::Release() {
  if (!keep_files_) {
    // Unlinked while still locked, so that a process that opened the file
    // meanwhile sees it is gone (StillAtPath) rather than taking a lock
    // that guards nothing.
    if (fd_ >= 0 && created_file_) ::unlink(path_.c_str());
    // rmdir removes only empty directories: anything written since stays.
    for (const std::string& dir : created_dirs_) ::rmdir(dir.c_str());
  }
  created_dirs_.clear();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace mirrortrain::trainer
