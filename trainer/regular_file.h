// Reading a file the user named as input (a config, a checkpoint): it must
// be a regular file of bounded size. A directory, FIFO, device or socket is
// refused without blocking on it or reading it, so `--config /dev/zero` or a
// FIFO neither hangs nor exhausts memory.
#ifndef MIRRORTRAIN_TRAINER_REGULAR_FILE_H_
#define MIRRORTRAIN_TRAINER_REGULAR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mirrortrain::trainer {

// The whole file. Errors are one line starting with `path`:
// InvalidArgument for a file that is not regular or is larger than
// `max_bytes`, the errno's code (NotFound, PermissionDenied, ...) when it
// cannot be opened or read.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            uint64_t max_bytes);

// OK when `path` is a regular file (after symlinks); checked without
// opening it, so a FIFO is refused rather than waited on. Errors as
// ReadRegularFile's: InvalidArgument "<path>: is a FIFO, not a regular
// file", or the errno's code ("<path>: cannot stat: ...").
absl::Status CheckRegularFile(const std::string& path);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_REGULAR_FILE_H_
