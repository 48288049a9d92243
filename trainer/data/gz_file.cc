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

namespace {

// Input read per pread: fewer syscalls than gzread's 8 KiB default.
constexpr size_t kInputBufferBytes = size_t{1} << 17;

bool IsGzipMagic(const unsigned char* p) {
  return p[0] == 0x1f && p[1] == 0x8b;
}

}  // namespace

absl::Status CheckGzStream(const GzFile& file, uint64_t bytes) {
  if (file.stream_error().empty()) return absl::OkStatus();
  return BadData(file.path(), absl::StrCat("corrupt gzip stream after ", bytes,
                                           " bytes: ", file.stream_error()));
}

absl::StatusOr<bool> IsGzipFile(const RegularFile& file) {
  unsigned char head[2];
  MT_ASSIGN_OR_RETURN(const size_t got,
                      ReadAt(file.fd.get(), file.path, 0, head, 2));
  return got == 2 && IsGzipMagic(head);
}

void GzFile::InflateEnd::operator()(z_stream* stream) const {
  inflateEnd(stream);
  delete stream;
}

absl::StatusOr<GzFile> GzFile::Open(const std::string& path) {
  // Checked on the descriptor then read: a FIFO would block a plain open, a
  // directory fail only at the first read.
  MT_ASSIGN_OR_RETURN(RegularFile opened, OpenRegularFile(path));
  GzFile file(std::move(opened));
  try {
    file.in_.resize(kInputBufferBytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot open: out of memory"));
  }
  // A regular file's read is short only at its end, so one fill holds the
  // magic of any file of two bytes or more.
  MT_RETURN_IF_ERROR(file.Fill());
  if (file.buffered() >= 2 && IsGzipMagic(file.in_.data())) {
    auto* stream = new (std::nothrow) z_stream{};
    // 16 + MAX_WBITS: gzip members only (a raw file never gets here).
    const int init =
        stream == nullptr ? Z_MEM_ERROR : inflateInit2(stream, 16 + MAX_WBITS);
    if (init != Z_OK) {
      delete stream;  // Not to InflateEnd: inflateInit made no state.
      return init == Z_MEM_ERROR
                 ? absl::ResourceExhaustedError(
                       absl::StrCat(path, ": cannot open: out of memory"))
                 : absl::InternalError(absl::StrCat(
                       path, ": cannot start inflating (zlib error ", init,
                       ")"));
    }
    file.stream_.reset(stream);
    file.phase_ = Phase::kMember;
  }
  return file;
}

absl::Status GzFile::Fill() {
  std::copy(in_.begin() + in_pos_, in_.begin() + in_end_, in_.begin());
  in_end_ -= in_pos_;
  in_pos_ = 0;
  MT_ASSIGN_OR_RETURN(size_t got,
                      ReadAt(file_.fd.get(), file_.path, file_offset_,
                             in_.data() + in_end_, in_.size() - in_end_));
  if (got < in_.size() - in_end_) eof_ = true;
  in_end_ += got;
  file_offset_ += got;
  return absl::OkStatus();
}

void GzFile::EndWithError(std::string message) {
  stream_error_ = std::move(message);
  phase_ = Phase::kEnded;
}

absl::Status GzFile::StartNextMember() {
  // Zero bytes are padding, at the end or between members (as Python's
  // gzip module reads them). Read() calls again after a Fill.
  while (buffered() > 0 && in_[in_pos_] == 0) ++in_pos_;
  if (buffered() == 0) {
    if (!eof_) return Fill();
    phase_ = Phase::kEnded;
    return absl::OkStatus();
  }
  if (buffered() < 2 && !eof_) return Fill();
  if (buffered() >= 2 && IsGzipMagic(in_.data() + in_pos_)) {
    if (inflateReset(stream_.get()) != Z_OK) {
      return absl::InternalError(absl::StrCat(path(), ": inflateReset failed"));
    }
    phase_ = Phase::kMember;
    return absl::OkStatus();
  }
  EndWithError(absl::StrCat("trailing garbage at byte ",
                            file_offset_ - buffered(),
                            ", after the gzip data"));
  return absl::OkStatus();
}

absl::StatusOr<size_t> GzFile::InflateSome(unsigned char* dst, size_t n) {
  z_stream* stream = stream_.get();
  stream->next_in = in_.data() + in_pos_;
  stream->avail_in = static_cast<uInt>(buffered());
  stream->next_out = dst;
  stream->avail_out = static_cast<uInt>(std::min(n, kReadChunkBytes));
  const uInt out_before = stream->avail_out;
  const int result = inflate(stream, Z_NO_FLUSH);
  in_pos_ = static_cast<size_t>(stream->next_in - in_.data());
  const size_t produced = out_before - stream->avail_out;
  switch (result) {
    case Z_OK:
      break;
    case Z_STREAM_END:
      phase_ = Phase::kBetweenMembers;
      break;
    case Z_BUF_ERROR:
      // No progress: only when the input is used up (Read refills it
      // first), so the file ends inside the member.
      if (buffered() == 0 && eof_) EndWithError("unexpected end of file");
      break;
    case Z_MEM_ERROR:
      return absl::ResourceExhaustedError(
          absl::StrCat(path(), ": out of memory inflating"));
    default:  // Z_DATA_ERROR, Z_NEED_DICT (a corrupt header or block).
      EndWithError(stream->msg != nullptr ? stream->msg : "corrupt data");
      break;
  }
  return produced;
}

absl::StatusOr<size_t> GzFile::Read(void* dst, size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n && phase_ != Phase::kEnded) {
    if (buffered() == 0 && !eof_) {
      if (phase_ == Phase::kRaw && n - done >= in_.size()) {
        // A large raw read goes straight to the caller's buffer.
        MT_ASSIGN_OR_RETURN(size_t got,
                            ReadAt(file_.fd.get(), file_.path, file_offset_,
                                   out + done, n - done));
        if (got < n - done) eof_ = true;
        file_offset_ += got;
        done += got;
        continue;
      }
      MT_RETURN_IF_ERROR(Fill());
      continue;
    }
    switch (phase_) {
      case Phase::kRaw: {
        if (buffered() == 0) {
          phase_ = Phase::kEnded;
          break;
        }
        const size_t take = std::min(n - done, buffered());
        std::copy_n(in_.begin() + in_pos_, take, out + done);
        in_pos_ += take;
        done += take;
        break;
      }
      case Phase::kMember: {
        MT_ASSIGN_OR_RETURN(size_t got, InflateSome(out + done, n - done));
        done += got;
        break;
      }
      case Phase::kBetweenMembers:
        if (buffered() == 0) {
          phase_ = Phase::kEnded;  // eof_: the last member ended the file.
          break;
        }
        MT_RETURN_IF_ERROR(StartNextMember());
        break;
      case Phase::kEnded:
        break;
    }
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

uint64_t ReservableBytes(const RegularFile& file, uint64_t offset,
                         uint64_t promised) {
  const uint64_t size = file.size;
  const absl::StatusOr<bool> gzip = IsGzipFile(file);
  if (!gzip.ok()) return 0;
  if (!*gzip) {
    // Not gzip: GzFile passes the file through, so it holds what it holds.
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
  const absl::StatusOr<size_t> got =
      ReadAt(file.fd.get(), file.path, size - 4, isize, 4);
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
  MT_RETURN_IF_ERROR(CheckGzStream(file, data.size()));
  return data;
}

std::optional<UninitializedBytes> InflateExactly(const RegularFile& file,
                                                 uint64_t expected) {
  // The trailer must agree and the size be one deflate could produce, so a
  // lying file cannot make us allocate what it could not hold.
  if (ReservableBytes(file, 0, expected) != expected) return std::nullopt;
  const uint64_t size = file.size;
  // A raw file (which ReservableBytes allows) is not read whole to learn it.
  if (const absl::StatusOr<bool> gzip = IsGzipFile(file);
      !gzip.ok() || !*gzip) {
    return std::nullopt;
  }
  struct Free {
    void operator()(libdeflate_decompressor* d) const {
      libdeflate_free_decompressor(d);
    }
  };
  try {
    UninitializedBytes compressed(static_cast<size_t>(size));
    const absl::StatusOr<size_t> got =
        ReadAt(file.fd.get(), file.path, 0, compressed.data(), size);
    if (!got.ok() || *got != size || !IsGzipMagic(compressed.data())) {
      return std::nullopt;  // A short read, or the file changed meanwhile.
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
