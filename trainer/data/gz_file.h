// Files read through zlib: gzip-compressed and raw files alike, whatever
// their name (a file without the gzip magic is passed through as is, as
// gzread and `zcat -f` do). The dataset readers share this so each reports
// missing files, read errors and corrupt gzip streams the same way: one
// line "<path>: <reason>", NotFound for a missing file, InvalidArgument for
// one that is not a regular file or a corrupt stream, else the errno's code
// of a failing open or read.
//
// A gzip file is one or more members (`cat a.gz b.gz` reads as their
// concatenation), with zero bytes (tar-style padding) allowed after and
// between them, as Python's gzip module reads them. Anything else after the
// last member is a corrupt stream, as there; zlib's gzread would ignore it
// silently, so the inflating is our own loop over inflate().
//
// Ownership: a GzFile owns its descriptor and inflate state. Thread
// contract: one thread at a time per GzFile; the free functions keep no
// state.
#ifndef MIRRORTRAIN_TRAINER_DATA_GZ_FILE_H_
#define MIRRORTRAIN_TRAINER_DATA_GZ_FILE_H_

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/data/uninitialized_bytes.h"
#include "trainer/regular_file.h"

namespace mirrortrain::trainer {

// Sizes beyond this are a corrupt header, not a dataset to load.
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;
// Large reads go in chunks of this, so buffers grow only as data arrives: a
// lying header cannot make a reader allocate a terabyte first.
inline constexpr size_t kReadChunkBytes = size_t{4} << 20;

class GzFile {
 public:
  static absl::StatusOr<GzFile> Open(const std::string& path);

  // Reads up to `n` bytes; fewer only at the end of the data or when the
  // gzip stream is corrupt (then stream_error() says why). A failing read()
  // is an error of its own.
  absl::StatusOr<size_t> Read(void* dst, size_t n);
  // Reads all that is left, counting the bytes.
  absl::StatusOr<uint64_t> CountRest();

  const std::string& path() const { return file_.path; }
  // The file read, for positioned reads beside it (ReservableBytes,
  // InflateExactly): GzFile reads with pread too, so they do not disturb it.
  const RegularFile& file() const { return file_; }
  // Why the gzip stream ended early ("unexpected end of file" when it is
  // cut short, zlib's message when it is corrupt), or "".
  const std::string& stream_error() const { return stream_error_; }
  // " (gzip: <why>)" after a corrupt stream, else "": for "truncated" errors.
  std::string StreamErrorSuffix() const;

 private:
  // The inflate state lives on the heap: zlib keeps its address.
  struct InflateEnd {
    void operator()(z_stream* stream) const;
  };
  enum class Phase { kRaw, kMember, kBetweenMembers, kEnded };

  explicit GzFile(RegularFile file) : file_(std::move(file)) {}
  // Moves the unread input to the front of the buffer and reads more after
  // it; at the end of the file sets eof_.
  absl::Status Fill();
  size_t buffered() const { return in_end_ - in_pos_; }
  // After a member: zero padding, then another member, the end, or
  // garbage.
  absl::Status StartNextMember();
  // One inflate() call into dst[0, n); returns the bytes it produced.
  absl::StatusOr<size_t> InflateSome(unsigned char* dst, size_t n);
  void EndWithError(std::string message);

  RegularFile file_;
  std::vector<unsigned char> in_;   // Compressed (or raw) input.
  size_t in_pos_ = 0, in_end_ = 0;  // The unread part of in_.
  uint64_t file_offset_ = 0;        // Where the next Fill reads.
  bool eof_ = false;
  Phase phase_ = Phase::kRaw;
  std::unique_ptr<z_stream, InflateEnd> stream_;
  std::string stream_error_;
};

// The whole (decompressed) content of `path`; a corrupt gzip stream is
// InvalidArgument. The buffer grows as data arrives, up to kMaxPayloadBytes.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// How many bytes a reader may reserve before reading for the `promised`
// payload at decompressed `offset` of `file`: a raw file holds what it
// holds; a gzip file is trusted only when its trailer's size (ISIZE, mod
// 2^32) agrees with offset + promised and the promise is within deflate's
// 1032:1 ratio, else 0. So a true header is read into a buffer reserved
// once (no reallocation copies) while a lying one still cannot make the
// reader allocate what the file could not hold. 0 when the file cannot be
// read.
uint64_t ReservableBytes(const RegularFile& file, uint64_t offset,
                         uint64_t promised);

// The whole decompressed content of `file` when it is one gzip member that
// inflates to exactly `expected` bytes (its trailer agreeing), in one pass
// with libdeflate: about twice zlib's speed, and the training split's
// inflate is on the time-to-accuracy critical path. nullopt for anything
// else (a raw file, several members, a corrupt or lying stream, too little
// memory): the caller then reads through GzFile, which names the fault.
// Holds the compressed file in memory meanwhile.
std::optional<UninitializedBytes> InflateExactly(const RegularFile& file,
                                                 uint64_t expected);

// InvalidArgument "<path>: corrupt gzip stream after <bytes> bytes: <why>"
// when `file`'s stream failed (after `bytes` of data); OK for a sound or
// raw one.
absl::Status CheckGzStream(const GzFile& file, uint64_t bytes);

// Whether `file` starts with the gzip magic (false for a shorter file).
absl::StatusOr<bool> IsGzipFile(const RegularFile& file);

// InvalidArgument "<path>: <reason>": bad content of a data file.
absl::Status BadData(absl::string_view path, absl::string_view reason);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_GZ_FILE_H_
