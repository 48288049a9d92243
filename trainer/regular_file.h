// Reading a file the user named as input (a config, a checkpoint, a data
// file): it must be a regular file of bounded size. A directory, FIFO,
// device or socket is refused without blocking on it or reading it, so
// `--config /dev/zero` or a FIFO neither hangs nor exhausts memory. The
// check is made on the open descriptor, so a file swapped for a FIFO after
// it is not waited on either.
#ifndef MIRRORTRAIN_TRAINER_REGULAR_FILE_H_
#define MIRRORTRAIN_TRAINER_REGULAR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/unique_fd.h"

namespace mirrortrain::trainer {

// A regular file open for reading, its size when opened, and its path (for
// messages).
struct RegularFile {
  UniqueFd fd;
  uint64_t size = 0;
  std::string path;
};

// Opens `path` for reading (without waiting on a FIFO) and checks on the
// descriptor that it is a regular file. Errors are one line starting with
// `path`: InvalidArgument "<path>: is a FIFO, not a regular file" or
// "<path>: cannot open: Permission denied", or the errno's code ("<path>:
// cannot open: No such file or directory").
absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path);

// Reads `size` bytes at `offset` of the open file `fd` (pread: the
// descriptor's position is untouched, so threads may share it). Fewer
// bytes only at the end of the file; errors name `path`.
absl::StatusOr<size_t> ReadAt(int fd, const std::string& path, uint64_t offset,
                              void* dst, size_t size);

// The whole file. Errors as OpenRegularFile's, and InvalidArgument for a
// file larger than `max_bytes`.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            uint64_t max_bytes);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_REGULAR_FILE_H_
