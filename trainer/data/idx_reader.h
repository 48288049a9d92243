// Readers for IDX files, the format MNIST and Fashion-MNIST ship in: a
// big-endian header (magic 0x000008NN, where 0x08 means u8 elements and NN
// is the number of dimensions, then one u32 per dimension) followed by the
// elements, row-major.
//
// Files are read through zlib (a single gzip member in one pass through
// libdeflate), so gzip-compressed (`.gz`) and raw files are both accepted,
// whatever their name. A file must hold exactly the bytes its
// header promises: a short file is "truncated", a longer one has "trailing
// garbage". Every error is one line "<path>: <reason>": InvalidArgument for
// bad content, NotFound for a missing file, Internal for a read error.
//
// Thread contract: the functions keep no state; call them from any thread.
#ifndef MIRRORTRAIN_TRAINER_DATA_IDX_READER_H_
#define MIRRORTRAIN_TRAINER_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/data/uninitialized_bytes.h"

namespace mirrortrain::trainer {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // u8 [N, rows, cols]
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // u8 [N]

struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  // The decompressed file; its pixels start at `pixels_offset` (past the
  // header when the file was inflated in one pass, so nothing is moved).
  UninitializedBytes data;
  size_t pixels_offset = 0;

  // count * rows * cols, row-major.
  absl::Span<const uint8_t> pixels() const {
    return absl::MakeConstSpan(data).subspan(pixels_offset);
  }
};

// Reads an IDX image file (magic 0x00000803).
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);

// Reads an IDX label file (magic 0x00000801) and checks that every label is
// in [0, num_classes).
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path,
                                                   int num_classes);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_IDX_READER_H_
