#include "trainer/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

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
                        absl::string_view doing) {
  // ErrnoToStatus appends strerror itself.
  return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": ", doing));
}

}  // namespace

absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer. It changes nothing for regular files.
  // O_NOCTTY: a terminal named as input does not become ours.
  UniqueFd fd(
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    const int error_number = errno;
    // A file the user may not read is bad input (exit 2), as one that is
    // not there; root (the test machines) never sees this.
    if (error_number == EACCES || error_number == EPERM) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot open: ", std::strerror(error_number)));
    }
    return ErrnoError(error_number, path, "cannot open");
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return ErrnoError(errno, path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": is ", KindOf(st.st_mode), ", not a regular file"));
  }
  return RegularFile{std::move(fd), static_cast<uint64_t>(st.st_size), path};
}

absl::StatusOr<size_t> ReadAt(int fd, const std::string& path, uint64_t offset,
                              void* dst, size_t size) {
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n =
        ::pread(fd, static_cast<char*>(dst) + filled, size - filled,
                static_cast<off_t>(offset + filled));
    if (n == 0) break;
    if (n < 0) {
      const int error_number = errno;  // Before StrCat allocates.
      if (error_number == EINTR) continue;
      return ErrnoError(error_number, path,
                        absl::StrCat("read failed at byte ", offset + filled));
    }
    filled += static_cast<size_t>(n);
  }
  return filled;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            uint64_t max_bytes) {
  MT_ASSIGN_OR_RETURN(RegularFile file, OpenRegularFile(path));
  auto too_large = [&](uint64_t bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": file is ", bytes,
                     " bytes, more than the limit of ", max_bytes, " bytes"));
  };
  if (file.size > max_bytes) return too_large(file.size);
  std::string contents(file.size, '\0');
  size_t filled = 0;
  while (true) {
    // One byte past the size seen: a file that grew is noticed.
    if (filled == contents.size()) {
      if (contents.size() > max_bytes) return too_large(contents.size());
      contents.resize(contents.size() + (1 << 16));
    }
    MT_ASSIGN_OR_RETURN(const size_t n, ReadAt(file.fd.get(), path, filled,
                                               contents.data() + filled,
                                               contents.size() - filled));
    if (n == 0) break;
    filled += n;
  }
  if (filled > max_bytes) return too_large(filled);
  contents.resize(filled);
  return contents;
}

}  // namespace mirrortrain::trainer
