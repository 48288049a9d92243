#include "trainer/data/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "trainer/data/gz_file.h"
#include "trainer/regular_file.h"

namespace mirrortrain::trainer {
namespace {

// Record signatures and fixed sizes (PKWARE APPNOTE 4.3).
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr uint64_t kEndBytes = 22;
constexpr uint64_t kMaxCommentBytes = 0xffff;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kZip64EndBytes = 56;
constexpr uint64_t kCentralBytes = 46;
constexpr uint64_t kLocalBytes = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;
constexpr uint16_t kEncryptedFlag = 0x1;

uint64_t LittleEndian(const std::string& bytes, size_t offset, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[offset + i]);
  }
  return v;
}

}  // namespace

absl::StatusOr<ZipArchive> ZipArchive::Open(const std::string& path) {
  // A FIFO is refused, not waited on.
  MT_ASSIGN_OR_RETURN(RegularFile file, OpenRegularFile(path));
  ZipArchive archive(std::move(file));
  MT_RETURN_IF_ERROR(archive.ReadCentralDirectory());
  return archive;
}

std::string ZipArchive::ListMembers() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

absl::StatusOr<std::string> ZipArchive::ReadAt(uint64_t offset, uint64_t n,
                                               const std::string& what) {
  if (offset > file_.size || n > file_.size - offset) {
    return BadData(
        file_.path,
        absl::StrCat("truncated: ", what, " needs bytes ", offset, "..",
                     offset + n, " but the file has ", file_.size));
  }
  std::string bytes(n, '\0');
  MT_ASSIGN_OR_RETURN(
      const size_t got,
      trainer::ReadAt(file_.fd.get(), file_.path, offset, bytes.data(), n));
  if (got < n) {
    // The file shrank since it was opened.
    return BadData(
        file_.path,
        absl::StrCat("truncated: ", what, " needs bytes ", offset, "..",
                     offset + n, " but the file ends at ", offset + got));
  }
  return bytes;
}

absl::Status ZipArchive::ReadCentralDirectory() {
  // The end record is the last 22 bytes unless a comment follows it.
  const uint64_t tail_bytes =
      std::min(file_.size, kEndBytes + kMaxCommentBytes);
  MT_ASSIGN_OR_RETURN(std::string tail,
                      ReadAt(file_.size - tail_bytes, tail_bytes, "the end"));
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail.size()) - kEndBytes; i >= 0; --i) {
    if (LittleEndian(tail, i, 4) == kEndSignature) {
      end = i;
      break;
    }
  }
  if (end < 0) {
    MT_ASSIGN_OR_RETURN(std::string head,
                        ReadAt(0, std::min<uint64_t>(file_.size, 6), "magic"));
    if (head == "\x93NUMPY") {
      return BadData(file_.path,
                     "is a .npy array, not an .npz archive (give a "
                     "directory of x_train.npy, ... or an np.savez "
                     "file)");
    }
    return BadData(file_.path,
                   file_.size == 0
                       ? "empty file"
                       : "truncated, or not a ZIP archive (.npz): no "
                         "end-of-central-directory record");
  }
  const uint64_t end_offset = file_.size - tail_bytes + end;
  uint64_t count = LittleEndian(tail, end + 10, 2);
  uint64_t cd_size = LittleEndian(tail, end + 12, 4);
  uint64_t cd_offset = LittleEndian(tail, end + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // ZIP64: a locator just before the end record points at the real one.
    if (end_offset < kZip64LocatorBytes) {
      return BadData(file_.path, "ZIP64 archive without its locator");
    }
    MT_ASSIGN_OR_RETURN(std::string locator,
                        ReadAt(end_offset - kZip64LocatorBytes,
                               kZip64LocatorBytes, "the ZIP64 locator"));
    if (LittleEndian(locator, 0, 4) != kZip64LocatorSignature) {
      return BadData(file_.path, "ZIP64 archive without its locator");
    }
    MT_ASSIGN_OR_RETURN(std::string end64,
                        ReadAt(LittleEndian(locator, 8, 8), kZip64EndBytes,
                               "the ZIP64 end record"));
    if (LittleEndian(end64, 0, 4) != kZip64EndSignature) {
      return BadData(file_.path, "bad ZIP64 end-of-central-directory record");
    }
    count = LittleEndian(end64, 32, 8);
    cd_size = LittleEndian(end64, 40, 8);
    cd_offset = LittleEndian(end64, 48, 8);
  }
  if (cd_offset > end_offset || cd_size > end_offset - cd_offset) {
    return BadData(
        file_.path,
        absl::StrCat("corrupt: the central directory (", cd_size, " bytes at ",
                     cd_offset, ") does not end before its end record"));
  }
  MT_ASSIGN_OR_RETURN(std::string cd,
                      ReadAt(cd_offset, cd_size, "the central directory"));

  uint64_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (pos + kCentralBytes > cd.size() ||
        LittleEndian(cd, pos, 4) != kCentralSignature) {
      return BadData(file_.path,
                     absl::StrCat("corrupt central directory at entry ", i,
                                  " of ", count));
    }
    Entry e;
    e.flags = LittleEndian(cd, pos + 8, 2);
    e.method = LittleEndian(cd, pos + 10, 2);
    e.crc = LittleEndian(cd, pos + 16, 4);
    e.compressed_size = LittleEndian(cd, pos + 20, 4);
    e.size = LittleEndian(cd, pos + 24, 4);
    const uint64_t name_len = LittleEndian(cd, pos + 28, 2);
    const uint64_t extra_len = LittleEndian(cd, pos + 30, 2);
    const uint64_t comment_len = LittleEndian(cd, pos + 32, 2);
    e.local_header_offset = LittleEndian(cd, pos + 42, 4);
    const uint64_t next =
        pos + kCentralBytes + name_len + extra_len + comment_len;
    if (next > cd.size()) {
      return BadData(file_.path,
                     absl::StrCat("corrupt central directory at entry ", i,
                                  " of ", count));
    }
    const std::string name = cd.substr(pos + kCentralBytes, name_len);
    // ZIP64 sizes and offsets replace the 32-bit fields that are all ones,
    // in this order.
    uint64_t x = pos + kCentralBytes + name_len;
    const uint64_t extra_end = x + extra_len;
    while (x + 4 <= extra_end) {
      const uint64_t id = LittleEndian(cd, x, 2);
      const uint64_t len = LittleEndian(cd, x + 2, 2);
      uint64_t f = x + 4;
      const uint64_t field_end = std::min(f + len, extra_end);
      if (id == kZip64ExtraId) {
        for (uint64_t* field :
             {&e.size, &e.compressed_size, &e.local_header_offset}) {
          if (*field != 0xffffffff) continue;
          if (f + 8 > field_end) {
            return BadData(
                file_.path,
                absl::StrCat("member ", name, ": short ZIP64 extra field"));
          }
          *field = LittleEndian(cd, f, 8);
          f += 8;
        }
      }
      x += 4 + len;
    }
    // Two members of one name: which one a reader takes differs (numpy's
    // zipfile takes the last), so neither is.
    if (!entries_.emplace(name, e).second) {
      return BadData(file_.path,
                     absl::StrCat("member ", name, " appears twice"));
    }
    pos = next;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ZipArchive::Read(const std::string& member,
                                             uint64_t limit) {
  auto it = entries_.find(member);
  if (it == entries_.end()) {
    return BadData(file_.path, absl::StrCat("no member ", member, " (it has ",
                                            ListMembers(), ")"));
  }
  const Entry& e = it->second;
  const std::string where = absl::StrCat("member ", member);
  if (e.flags & kEncryptedFlag) {
    return BadData(file_.path, absl::StrCat(where, " is encrypted"));
  }
  if (e.method != kStored && e.method != kDeflated) {
    return BadData(file_.path,
                   absl::StrCat(where, ": compression method ", e.method,
                                " is not supported (numpy writes stored or "
                                "deflate)"));
  }
  if (e.size > kMaxPayloadBytes) {
    return BadData(file_.path,
                   absl::StrCat(where, ": implausible size ", e.size));
  }
  MT_ASSIGN_OR_RETURN(
      std::string local,
      ReadAt(e.local_header_offset, kLocalBytes, where + "'s local header"));
  if (LittleEndian(local, 0, 4) != kLocalSignature) {
    return BadData(file_.path,
                   absl::StrCat(where, ": bad local header signature"));
  }
  const uint64_t data_offset = e.local_header_offset + kLocalBytes +
                               LittleEndian(local, 26, 2) +
                               LittleEndian(local, 28, 2);
  if (data_offset > file_.size ||
      e.compressed_size > file_.size - data_offset) {
    return BadData(file_.path,
                   absl::StrCat("truncated: ", where, " needs ",
                                e.compressed_size, " bytes at ", data_offset,
                                " but the file has ", file_.size));
  }
  std::string bytes;
  if (e.method == kStored) {
    if (e.compressed_size != e.size) {
      return BadData(file_.path,
                     absl::StrCat(where, ": stored with ", e.compressed_size,
                                  " bytes for ", e.size));
    }
    MT_ASSIGN_OR_RETURN(bytes,
                        ReadAt(data_offset, std::min(limit, e.size), where));
  } else {
    MT_ASSIGN_OR_RETURN(bytes, Inflate(member, e, data_offset, limit));
  }
  if (bytes.size() == e.size) {
    // zlib's crc32 takes at most 4 GiB - 1 per call.
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t done = 0; done < bytes.size();) {
      const uInt n = static_cast<uInt>(
          std::min<size_t>(bytes.size() - done, kReadChunkBytes));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), n);
      done += n;
    }
    if (crc != e.crc) {
      return BadData(file_.path,
                     absl::StrCat(where, ": CRC mismatch (corrupt)"));
    }
  }
  return bytes;
}

absl::StatusOr<std::string> ZipArchive::Inflate(const std::string& member,
                                                const Entry& e,
                                                uint64_t data_offset,
                                                uint64_t limit) {
  const std::string where = absl::StrCat("member ", member);
  z_stream z{};
  // Negative window bits: a raw deflate stream, as ZIP stores it.
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
    return absl::InternalError(
        absl::StrCat(file_.path, ": inflateInit2 failed"));
  }
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};

  uint64_t in_done = 0;
  std::string in;
  // Feeds the next chunk of compressed bytes once zlib has used the last.
  auto refill = [&]() -> absl::Status {
    if (z.avail_in != 0 || in_done == e.compressed_size) {
      return absl::OkStatus();
    }
    const uint64_t n =
        std::min<uint64_t>(e.compressed_size - in_done, kReadChunkBytes);
    MT_ASSIGN_OR_RETURN(in, ReadAt(data_offset + in_done, n, where));
    in_done += n;
    z.next_in = reinterpret_cast<Bytef*>(in.data());
    z.avail_in = static_cast<uInt>(n);
    return absl::OkStatus();
  };
  auto corrupt = [&] {
    return BadData(file_.path,
                   absl::StrCat(where, ": corrupt deflate data: ",
                                z.msg != nullptr ? z.msg : "error"));
  };

  const uint64_t want = std::min(limit, e.size);
  std::string out;
  int rc = Z_OK;
  while (out.size() < want && rc != Z_STREAM_END) {
    MT_RETURN_IF_ERROR(refill());
    // Grows as data arrives, so a lying size cannot make us allocate first.
    const size_t old = out.size();
    const size_t chunk = std::min<uint64_t>(want - old, kReadChunkBytes);
    out.resize(old + chunk);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + old);
    z.avail_out = static_cast<uInt>(chunk);
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t produced = chunk - z.avail_out;
    out.resize(old + produced);
    // No input left and nothing pending: the stream stops short.
    if (rc == Z_BUF_ERROR && produced == 0) break;
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return corrupt();
  }
  if (out.size() < want) {
    return BadData(file_.path,
                   absl::StrCat("truncated: ", where, " inflates to ",
                                out.size(), " of its ", e.size, " bytes"));
  }
  // Everything promised came out; the stream must end right there.
  while (want == e.size && rc != Z_STREAM_END) {
    MT_RETURN_IF_ERROR(refill());
    unsigned char extra = 0;
    z.next_out = &extra;
    z.avail_out = 1;
    rc = inflate(&z, Z_NO_FLUSH);
    if (z.avail_out == 0) {
      return BadData(file_.path,
                     absl::StrCat(where, ": inflates to more than its ", e.size,
                                  " bytes"));
    }
    if (rc == Z_BUF_ERROR) {
      return BadData(file_.path,
                     absl::StrCat("truncated: ", where,
                                  ": the deflate stream does not end"));
    }
    if (rc != Z_OK && rc != Z_STREAM_END) return corrupt();
  }
  return out;
}

}  // namespace mirrortrain::trainer
