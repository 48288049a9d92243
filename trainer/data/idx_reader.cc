#include "trainer/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

// Sizes beyond this are a corrupt header, not a dataset to load.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;
constexpr size_t kChunkBytes = size_t{4} << 20;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

std::string MagicString(uint32_t magic) {
  return absl::StrCat("0x", absl::Hex(magic, absl::kZeroPad8));
}

absl::Status BadData(const std::string& path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

// One open IDX file. gzread reads raw files transparently, so one code path
// serves `.gz` and uncompressed files.
class IdxFile {
 public:
  static absl::StatusOr<IdxFile> Open(const std::string& path) {
    errno = 0;
    GzHandle handle(gzopen(path.c_str(), "rb"));
    if (handle == nullptr) {
      const int err = errno;
      const std::string reason =
          err == 0 ? std::string("out of memory")
                   : std::error_code(err, std::generic_category()).message();
      const std::string message = absl::StrCat(path, ": cannot open: ", reason);
      return err == ENOENT ? absl::NotFoundError(message)
                           : absl::InternalError(message);
    }
    gzbuffer(handle.get(), 1 << 17);  // Fewer syscalls than the 8 KiB default.
    return IdxFile(path, std::move(handle));
  }

  // Reads up to `n` bytes; fewer only at the end of the data or when the
  // gzip stream is corrupt (then stream_error() says why). A failing read()
  // is an error of its own.
  absl::StatusOr<size_t> Read(void* dst, size_t n) {
    size_t done = 0;
    while (done < n && stream_error_.empty()) {
      const unsigned want =
          static_cast<unsigned>(std::min<size_t>(n - done, kChunkBytes));
      const int got =
          gzread(handle_.get(), static_cast<char*>(dst) + done, want);
      if (got < 0) {
        int errnum = 0;
        const char* message = gzerror(handle_.get(), &errnum);
        if (errnum == Z_ERRNO) {
          return absl::InternalError(absl::StrCat(
              path_, ": read error: ",
              std::error_code(errno, std::generic_category()).message()));
        }
        SetStreamError(message);
        break;
      }
      if (got == 0) {
        // A gzip stream that ends early reads as end of file; only gzerror
        // tells the two apart.
        int errnum = Z_OK;
        const char* message = gzerror(handle_.get(), &errnum);
        if (errnum == Z_BUF_ERROR) SetStreamError(message);
        break;
      }
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // Reads all that is left, counting the bytes.
  absl::StatusOr<uint64_t> CountRest() {
    std::vector<char> scratch(1 << 16);
    uint64_t total = 0;
    for (;;) {
      MT_ASSIGN_OR_RETURN(size_t got, Read(scratch.data(), scratch.size()));
      total += got;
      if (got < scratch.size()) return total;
    }
  }

  const std::string& stream_error() const { return stream_error_; }

 private:
  // zlib prefixes its messages with the path, which our errors already
  // start with.
  void SetStreamError(const char* message) {
    absl::string_view text = message == nullptr ? "gzip error" : message;
    absl::ConsumePrefix(&text, absl::StrCat(path_, ": "));
    stream_error_ = std::string(text);
  }

  IdxFile(const std::string& path, GzHandle handle)
      : path_(path), handle_(std::move(handle)) {}

  std::string path_;
  GzHandle handle_;
  std::string stream_error_;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct RawIdx {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
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

// Reads a u8 IDX file with the given magic (which fixes the rank).
absl::StatusOr<RawIdx> ReadIdx(const std::string& path, uint32_t magic) {
  MT_ASSIGN_OR_RETURN(IdxFile file, IdxFile::Open(path));
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
    return BadData(
        path,
        absl::StrCat("truncated: file holds ", got, " bytes, less than the ",
                     header_bytes, "-byte IDX header",
                     file.stream_error().empty()
                         ? ""
                         : absl::StrCat(" (gzip: ", file.stream_error(), ")")));
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

  // Grows as data arrives, so a lying header cannot make us allocate a
  // terabyte before noticing the file is short.
  while (idx.data.size() < bytes) {
    const size_t old = idx.data.size();
    const size_t chunk = std::min<uint64_t>(bytes - old, kChunkBytes);
    idx.data.resize(old + chunk);
    MT_ASSIGN_OR_RETURN(size_t n, file.Read(idx.data.data() + old, chunk));
    idx.data.resize(old + n);
    if (n < chunk) break;
  }
  if (idx.data.size() < bytes) {
    return BadData(
        path,
        absl::StrCat("truncated: header promises ", Promise(idx.dims, bytes),
                     ", file holds ", Holds(idx.dims, idx.data.size()),
                     file.stream_error().empty()
                         ? ""
                         : absl::StrCat(" (gzip: ", file.stream_error(), ")")));
  }
  MT_ASSIGN_OR_RETURN(uint64_t extra, file.CountRest());
  if (extra > 0) {
    return BadData(
        path, absl::StrCat("trailing garbage: ", extra, " bytes after the ",
                           Promise(idx.dims, bytes), " the header promises"));
  }
  if (!file.stream_error().empty()) {
    return BadData(path, absl::StrCat("corrupt gzip stream after the data: ",
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
  images.pixels = std::move(idx.data);
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
  for (size_t i = 0; i < idx.data.size(); ++i) {
    if (idx.data[i] >= num_classes) {
      return BadData(path,
                     absl::StrCat("label ", int{idx.data[i]}, " at index ", i,
                                  " is out of range [0, ", num_classes, ")"));
    }
  }
  return std::move(idx.data);
}

}  // namespace mirrortrain::trainer
