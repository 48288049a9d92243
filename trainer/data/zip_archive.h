// Reads members of a ZIP archive, as numpy's savez (stored) and
// savez_compressed (deflate) write `.npz` files: the central directory
// (ZIP64 too) names the members; deflate is inflated by zlib and every
// whole member is checked against its CRC-32.
//
// Errors are one line naming the archive (and the member):
// InvalidArgument for bad content ("truncated", "not a ZIP archive",
// "CRC mismatch", an unsupported compression method or encryption),
// NotFound for a missing file, the errno's code for a failing open or
// read.
//
// Ownership: a ZipArchive owns its open file. Thread contract: one thread
// at a time per archive.
#ifndef MIRRORTRAIN_TRAINER_DATA_ZIP_ARCHIVE_H_
#define MIRRORTRAIN_TRAINER_DATA_ZIP_ARCHIVE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "trainer/regular_file.h"

namespace mirrortrain::trainer {

class ZipArchive {
 public:
  static absl::StatusOr<ZipArchive> Open(const std::string& path);

  bool Has(const std::string& member) const {
    return entries_.contains(member);
  }
  // The member names, sorted.
  std::string ListMembers() const;

  // The member's (inflated) bytes; only the first `limit` when it is
  // smaller, and then the CRC is not checked.
  absl::StatusOr<std::string> Read(
      const std::string& member,
      uint64_t limit = std::numeric_limits<uint64_t>::max());

  const std::string& path() const { return file_.path; }

 private:
  struct Entry {
    uint16_t method = 0;
    uint16_t flags = 0;
    uint32_t crc = 0;
    uint64_t compressed_size = 0;
    uint64_t size = 0;
    uint64_t local_header_offset = 0;
  };

  explicit ZipArchive(RegularFile file) : file_(std::move(file)) {}

  // Reads `n` bytes at `offset`; reading past the end is "truncated".
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t n,
                                     const std::string& what);
  absl::Status ReadCentralDirectory();
  absl::StatusOr<std::string> Inflate(const std::string& member,
                                      const Entry& entry, uint64_t data_offset,
                                      uint64_t limit);

  RegularFile file_;  // Its size is the archive's, as opened.
  std::map<std::string, Entry> entries_;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_ZIP_ARCHIVE_H_
