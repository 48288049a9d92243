// NumPy's `.npy` format (numpy.lib.format): the magic "\x93NUMPY", a
// version (1.0, 2.0 or 3.0), a little-endian header length (2 bytes in 1.0,
// 4 after), then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 32, 32, 3), }
// and the raw elements. Only what datasets need is accepted: plain numeric
// dtypes, little-endian (or single-byte), C order; anything else is an error
// that says so.
//
// Errors are InvalidArgument "<where>: <reason>", `where` naming the file
// (and the array inside an .npz). Thread contract: no state.
#ifndef MIRRORTRAIN_TRAINER_DATA_NPY_H_
#define MIRRORTRAIN_TRAINER_DATA_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

// What a header says about the array.
struct NpyHeader {
  std::string descr;  // As written: "<f4", "|u1", "<i8", ...
  char kind = 0;      // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, ...
  int item_bytes = 0;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // Bytes before the elements.

  int64_t num_elements() const;
  // "(60000, 32, 32, 3)", as numpy prints a shape.
  std::string ShapeString() const;
};

// Parses the header at the start of `bytes`, which may hold only a prefix
// of the file (the elements are not looked at).
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes,
                                         const std::string& where);

class GzFile;

// Reads the header at the start of `file` (raw or gzip; a corrupt stream
// is CheckGzStream's error) and parses it (ParseNpyHeader's errors, naming
// the file); `file` is then at the first element.
absl::StatusOr<NpyHeader> ReadNpyHeader(GzFile& file);

// A whole array: its header and its elements (`bytes` from data_offset),
// exactly num_elements() * item_bytes of them.
struct NpyArray {
  NpyHeader header;
  std::string bytes;  // The whole file; the elements start at data_offset.

  const char* data() const { return bytes.data() + header.data_offset; }
};

// The header of a version 1.0 file of a C-order array of `descr` ("<f4")
// and `shape`, padded with spaces so the elements start at a multiple of
// 64 bytes, as numpy writes it: the elements follow it.
std::string NpyHeaderBytes(absl::string_view descr,
                           const std::vector<int64_t>& shape);

// Checks that `have` bytes after the header are exactly the elements it
// promises: fewer is "truncated", more is "trailing bytes".
absl::Status CheckNpyPayload(const NpyHeader& header, uint64_t have,
                             const std::string& where);

// Checks that `bytes` (the whole file) holds exactly the elements its
// header promises (CheckNpyPayload).
absl::StatusOr<NpyArray> ParseNpy(std::string bytes, const std::string& where);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_NPY_H_
