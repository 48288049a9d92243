#include "trainer/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mirrortrain::trainer {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status ErrnoError(int error_number, const std::string& path,
                        const char* doing) {
  // ErrnoToStatus appends strerror itself.
  return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": ", doing));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": is ", KindOf(mode), ", not a regular file"));
}

}  // namespace

absl::Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return ErrnoError(errno, path, "cannot stat");
  }
  return S_ISREG(st.st_mode) ? absl::OkStatus() : NotRegular(path, st.st_mode);
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer. It changes nothing for regular files.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return ErrnoError(errno, path, "cannot open");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return ErrnoError(errno, path, "cannot stat");
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto too_large = [&](uint64_t bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": file is ", bytes,
                     " bytes, more than the limit of ", max_bytes, " bytes"));
  };
  if (size > max_bytes) return too_large(size);
  std::string contents(size, '\0');
  size_t filled = 0;
  while (true) {
    // One byte past the size seen: a file that grew is noticed.
    if (filled == contents.size()) {
      if (contents.size() > max_bytes) return too_large(contents.size());
      contents.resize(contents.size() + (1 << 16));
    }
    const ssize_t n =
        ::read(fd.get(), contents.data() + filled, contents.size() - filled);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path, "read failed");
    }
    filled += static_cast<size_t>(n);
  }
  if (filled > max_bytes) return too_large(filled);
  contents.resize(filled);
  return contents;
}

}  // namespace mirrortrain::trainer
