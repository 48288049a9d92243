#include "trainer/data/idx_reader.h"

#include <algorithm>
#include <new>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/data/gz_file.h"

namespace mirrortrain::trainer {
namespace {

std::string MagicString(uint32_t magic) {
  return absl::StrCat("0x", absl::Hex(magic, absl::kZeroPad8));
}

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct RawIdx {
  std::vector<uint32_t> dims;
  UninitializedBytes data;  // The elements start at `offset`.
  size_t offset = 0;
};

// What the header promises, for error messages: "60000 labels" or
// "10000 images of 28x28 (7840000 bytes)".
std::string Promise(const std::vector<uint32_t>& dims, uint64_t bytes) {
  if (dims.size() == 1) return absl::StrCat(dims[0], " labels");
  return absl::StrCat(dims[0], " images of ", dims[1], "x", dims[2], " (",
                      bytes, " bytes)");
}

std::string Holds(const std::vector<uint32_t>& dims, uint64_t bytes) {
  return dims.size() == 1 ? absl::StrCat(bytes) : absl::StrCat(bytes, " bytes");
}

// Fewer bytes than `what` needs: a truncated file, or a corrupt gzip
// stream that zlib gave up on (its check value, say) before they came.
absl::Status Short(const GzFile& file, const std::string& path,
                   const std::string& what) {
  const std::string& error = file.stream_error();
  if (error.empty() || error == "unexpected end of file") {
    return BadData(path,
                   absl::StrCat("truncated: ", what, file.StreamErrorSuffix()));
  }
  return BadData(path,
                 absl::StrCat("corrupt gzip stream (", error, "): ", what));
}

// Reads a u8 IDX file with the given magic (which fixes the rank).
absl::StatusOr<RawIdx> ReadIdx(const std::string& path, uint32_t magic) {
  MT_ASSIGN_OR_RETURN(GzFile file, GzFile::Open(path));
  const size_t rank = magic & 0xff;
  const size_t header_bytes = 4 * (1 + rank);

  unsigned char header[4 * 4];
  MT_ASSIGN_OR_RETURN(size_t got, file.Read(header, header_bytes));
  if (got >= 4 && BigEndian32(header) != magic) {
    return BadData(
        path, absl::StrCat("bad magic ", MagicString(BigEndian32(header)),
                           ", expected ", MagicString(magic), " (IDX u8, ",
                           rank, rank == 1 ? " dimension)" : " dimensions)"));
  }
  if (got < header_bytes) {
    return Short(file, path,
                 absl::StrCat("file holds ", got, " bytes, less than the ",
                              header_bytes, "-byte IDX header"));
  }

  RawIdx idx;
  uint64_t bytes = 1;
  for (size_t i = 0; i < rank; ++i) {
    const uint32_t d = BigEndian32(header + 4 * (i + 1));
    idx.dims.push_back(d);
    // Each factor is below 2^32, so checking before multiplying is enough
    // to rule out overflow.
    if (d != 0 && bytes > kMaxPayloadBytes / d) {
      return BadData(path, "implausible dimensions in the IDX header");
    }
    bytes *= d;
  }
  if (rank == 3 && (idx.dims[1] == 0 || idx.dims[2] == 0)) {
    return BadData(path, absl::StrCat("empty images of ", idx.dims[1], "x",
                                      idx.dims[2], " in the IDX header"));
  }

  // Most files are one well-formed gzip member: inflated in one pass, the
  // header included. Anything else is read through zlib, which names what
  // is wrong with it.
  if (std::optional<UninitializedBytes> whole =
          InflateExactly(file.file(), header_bytes + bytes)) {
    idx.data = std::move(*whole);
    idx.offset = header_bytes;
    return idx;
  }
  // Grows as data arrives beyond what the file could hold, so a lying
  // header cannot make us allocate a terabyte before noticing the file is
  // short.
  try {
    idx.data.reserve(ReservableBytes(file.file(), header_bytes, bytes));
  } catch (const std::bad_alloc&) {
    // More than this machine grants at once: grown as data arrives.
  }
  while (idx.data.size() < bytes) {
    const size_t old = idx.data.size();
    const size_t chunk = std::min<uint64_t>(bytes - old, kReadChunkBytes);
    idx.data.resize(old + chunk);
    MT_ASSIGN_OR_RETURN(size_t n, file.Read(idx.data.data() + old, chunk));
    idx.data.resize(old + n);
    if (n < chunk) break;
  }
  if (idx.data.size() < bytes) {
    return Short(
        file, path,
        absl::StrCat("header promises ", Promise(idx.dims, bytes),
                     ", file holds ", Holds(idx.dims, idx.data.size())));
  }
  MT_ASSIGN_OR_RETURN(uint64_t extra, file.CountRest());
  if (extra > 0) {
    return BadData(
        path, absl::StrCat("trailing garbage: ", extra, " bytes after the ",
                           Promise(idx.dims, bytes), " the header promises"));
  }
  if (!file.stream_error().empty()) {
    return BadData(path, absl::StrCat("corrupt gzip stream at its end: ",
                                      file.stream_error()));
  }
  return idx;
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  MT_ASSIGN_OR_RETURN(RawIdx idx, ReadIdx(path, kIdxImagesMagic));
  IdxImages images;
  images.count = idx.dims[0];
  images.rows = idx.dims[1];
  images.cols = idx.dims[2];
  images.data = std::move(idx.data);
  images.pixels_offset = idx.offset;
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path,
                                                   int num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": num_classes ", num_classes,
                     " is not in [1, 256] as u8 labels need"));
  }
  MT_ASSIGN_OR_RETURN(RawIdx idx, ReadIdx(path, kIdxLabelsMagic));
  std::vector<uint8_t> labels(idx.data.begin() + idx.offset, idx.data.end());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return BadData(path,
                     absl::StrCat("label ", int{labels[i]}, " at index ", i,
                                  " is out of range [0, ", num_classes, ")"));
    }
  }
  return labels;
}

}  // namespace mirrortrain::trainer
