#include "trainer/data/gz_file.h"

#include <libdeflate.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/regular_file.h"

namespace mirrortrain::trainer {
absl::Status BadData(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::StatusOr<GzFile> GzFile::Open(const std::string& path) {
  // Checked on the descriptor zlib then reads: a FIFO would block a plain
  // open, a directory fail only at the first read.
  MT_ASSIGN_OR_RETURN(RegularFile file, OpenRegularFile(path));
  // zlib gets a duplicate of the descriptor, which gzclose closes; ours
  // stays for positioned reads (pread moves no file position).
  UniqueFd zlib_fd(::dup(file.fd.get()));
  if (zlib_fd.get() < 0) {
    const int error_number = errno;
    return absl::ErrnoToStatus(error_number,
                               absl::StrCat(path, ": cannot open"));
  }
  Handle handle(gzdopen(zlib_fd.get(), "rb"));
  if (handle == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot open: out of memory"));
  }
  zlib_fd.Release();
  gzbuffer(handle.get(), 1 << 17);  // Fewer syscalls than the 8 KiB default.
  return GzFile(std::move(file), std::move(handle));
}

absl::StatusOr<size_t> GzFile::Read(void* dst, size_t n) {
  size_t done = 0;
  while (done < n && stream_error_.empty()) {
    const unsigned want =
        static_cast<unsigned>(std::min<size_t>(n - done, kReadChunkBytes));
    const int got = gzread(handle_.get(), static_cast<char*>(dst) + done, want);
    if (got < 0) {
      int errnum = 0;
      const char* message = gzerror(handle_.get(), &errnum);
      if (errnum == Z_ERRNO) {
        return absl::InternalError(absl::StrCat(
            path(), ": read error: ",
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

absl::StatusOr<uint64_t> GzFile::CountRest() {
  std::vector<char> scratch(1 << 16);
  uint64_t total = 0;
  for (;;) {
    MT_ASSIGN_OR_RETURN(size_t got, Read(scratch.data(), scratch.size()));
    total += got;
    if (got < scratch.size()) return total;
  }
}

std::string GzFile::StreamErrorSuffix() const {
  return stream_error_.empty() ? ""
                               : absl::StrCat(" (gzip: ", stream_error_, ")");
}

// zlib prefixes its messages with what it opened, "<fd:N>: " for a
// descriptor; our errors already start with the path.
void GzFile::SetStreamError(const char* message) {
  absl::string_view text = message == nullptr ? "gzip error" : message;
  if (absl::StartsWith(text, "<fd:")) {
    if (const size_t end = text.find(">: "); end != text.npos) {
      text.remove_prefix(end + 3);
    }
  }
  stream_error_ = std::string(text);
}

uint64_t ReservableBytes(const RegularFile& file, uint64_t offset,
                         uint64_t promised) {
  const uint64_t size = file.size;
  unsigned char head[2] = {0, 0};
  absl::StatusOr<size_t> got = ReadAt(file.fd.get(), file.path, 0, head, 2);
  if (!got.ok()) return 0;
  if (*got < 2 || head[0] != 0x1f || head[1] != 0x8b) {
    // Not gzip: zlib passes the file through, so it holds what it holds.
    return std::min(promised, size > offset ? size - offset : 0);
  }
  // A gzip trailer ends with the decompressed size mod 2^32 (ISIZE): a
  // promise that disagrees with it is not trusted. Nor is one beyond
  // deflate's best ratio, 1032:1 (258-byte matches in ~2 bits).
  constexpr uint64_t kMaxExpansion = 1032;
  constexpr uint64_t kGzipMinBytes = 18;  // 10-byte header, 8-byte trailer.
  if (size < kGzipMinBytes || promised / kMaxExpansion > size ||
      promised > kMaxPayloadBytes) {
    return 0;
  }
  unsigned char isize[4];
  got = ReadAt(file.fd.get(), file.path, size - 4, isize, 4);
  if (!got.ok() || *got != 4) return 0;
  const uint32_t trailer = uint32_t{isize[0]} | (uint32_t{isize[1]} << 8) |
                           (uint32_t{isize[2]} << 16) |
                           (uint32_t{isize[3]} << 24);
  return static_cast<uint32_t>(offset + promised) == trailer ? promised : 0;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  MT_ASSIGN_OR_RETURN(GzFile file, GzFile::Open(path));
  std::string data;
  for (;;) {
    if (data.size() >= kMaxPayloadBytes) {
      return BadData(path, "implausibly large (over 1 TiB decompressed)");
    }
    const size_t old = data.size();
    data.resize(old + kReadChunkBytes);
    MT_ASSIGN_OR_RETURN(size_t got,
                        file.Read(data.data() + old, kReadChunkBytes));
    data.resize(old + got);
    if (got < kReadChunkBytes) break;
  }
  if (!file.stream_error().empty()) {
    return BadData(path, absl::StrCat("corrupt gzip stream after ", data.size(),
                                      " bytes: ", file.stream_error()));
  }
  return data;
}

std::optional<UninitializedBytes> InflateExactly(const RegularFile& file,
                                                 uint64_t expected) {
  // The trailer must agree and the size be one deflate could produce, so a
  // lying file cannot make us allocate what it could not hold.
  if (ReservableBytes(file, 0, expected) != expected) return std::nullopt;
  const uint64_t size = file.size;
  if (size < 2) return std::nullopt;
  struct Free {
    void operator()(libdeflate_decompressor* d) const {
      libdeflate_free_decompressor(d);
    }
  };
  try {
    UninitializedBytes compressed(static_cast<size_t>(size));
    const absl::StatusOr<size_t> got =
        ReadAt(file.fd.get(), file.path, 0, compressed.data(), size);
    if (!got.ok() || *got != size || compressed[0] != 0x1f ||
        compressed[1] != 0x8b) {
      return std::nullopt;  // Short read, or raw (ReservableBytes allows it).
    }
    const std::unique_ptr<libdeflate_decompressor, Free> inflater(
        libdeflate_alloc_decompressor());
    if (inflater == nullptr) return std::nullopt;
    UninitializedBytes out(expected);
    size_t consumed = 0, produced = 0;
    // Checks the CRC and size of the trailer; `consumed` short of the file
    // means another member or garbage follows, which GzFile reports.
    if (libdeflate_gzip_decompress_ex(
            inflater.get(), compressed.data(), compressed.size(), out.data(),
            out.size(), &consumed, &produced) != LIBDEFLATE_SUCCESS ||
        consumed != compressed.size() || produced != out.size()) {
      return std::nullopt;
    }
    return out;
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
}

}  // namespace mirrortrain::trainer
