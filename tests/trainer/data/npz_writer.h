// A tiny writer of .npy arrays and ZIP archives (stored or deflate, through
// zlib), so the npz tests build exactly the broken files they need.
// Header-only; for tests. Elements are written in host (little-endian) order.
#ifndef MIRRORTRAIN_TESTS_TRAINER_DATA_NPZ_WRITER_H_
#define MIRRORTRAIN_TESTS_TRAINER_DATA_NPZ_WRITER_H_

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace mirrortrain::testing {

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A version 1.0 .npy file, its header padded to 64 bytes as numpy does.
inline std::string NpyBytes(const std::string& descr,
                            const std::vector<int64_t>& shape,
                            const std::string& data, bool fortran = false) {
  const std::string shape_text =
      shape.size() == 1 ? absl::StrCat("(", shape[0], ",)")
                        : absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  std::string header = absl::StrCat(
      "{'descr': '", descr, "', 'fortran_order': ", fortran ? "True" : "False",
      ", 'shape': ", shape_text, ", }");
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

struct ZipMember {
  std::string name;
  std::string bytes;
  bool deflate = false;
};

inline std::string RawDeflate(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8,
                         Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A ZIP archive of `members` as np.savez(_compressed) lays it out. With
// `zip64`, the central directory gives every size and offset in ZIP64
// extra fields and a ZIP64 end record, as archives over 4 GiB need.
inline std::string ZipBytes(const std::vector<ZipMember>& members,
                            bool zip64 = false) {
  auto put = [](std::string& s, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  };
  std::string out, central;
  for (const ZipMember& m : members) {
    const std::string data = m.deflate ? RawDeflate(m.bytes) : m.bytes;
    const uint32_t crc = crc32(
        0L, reinterpret_cast<const Bytef*>(m.bytes.data()), m.bytes.size());
    const uint16_t method = m.deflate ? 8 : 0;
    const uint64_t offset = out.size();
    auto common = [&](std::string& s) {
      put(s, 20, 2);      // version needed
      put(s, 0, 2);       // flags
      put(s, method, 2);  // method
      put(s, 0, 2);       // time
      put(s, 0x21, 2);    // date: 1980-01-01
      put(s, crc, 4);
      put(s, data.size(), 4);
      put(s, m.bytes.size(), 4);
      put(s, m.name.size(), 2);
      put(s, 0, 2);  // extra length
    };
    put(out, 0x04034b50, 4);
    common(out);
    out += m.name + data;
    std::string entry;
    put(entry, 0x02014b50, 4);
    put(entry, 45, 2);  // version made by
    common(entry);
    put(entry, 0, 2);  // comment length
    put(entry, 0, 2);  // disk
    put(entry, 0, 2);  // internal attributes
    put(entry, 0, 4);  // external attributes
    put(entry, offset, 4);
    entry += m.name;
    if (zip64) {
      // All ones in the 32-bit fields; the real values in the extra field,
      // uncompressed size, compressed size, offset.
      for (size_t field : {20, 24, 42})
        entry.replace(field, 4, "\xff\xff\xff\xff");
      entry[30] = 28;  // extra length
      put(entry, 1, 2);
      put(entry, 24, 2);
      put(entry, m.bytes.size(), 8);
      put(entry, data.size(), 8);
      put(entry, offset, 8);
    }
    central += entry;
  }
  const uint64_t cd_offset = out.size();
  out += central;
  if (zip64) {
    const uint64_t end64_offset = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);  // size of the rest of the record
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 8);  // disks
    put(out, members.size(), 8);
    put(out, members.size(), 8);
    put(out, central.size(), 8);
    put(out, cd_offset, 8);
    put(out, 0x07064b50, 4);  // the locator
    put(out, 0, 4);
    put(out, end64_offset, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 4);  // disks
  put(out, zip64 ? 0xffff : members.size(), 2);
  put(out, zip64 ? 0xffff : members.size(), 2);
  put(out, zip64 ? 0xffffffff : central.size(), 4);
  put(out, zip64 ? 0xffffffff : cd_offset, 4);
  put(out, 0, 2);  // comment length
  return out;
}

// An npz of `rows` rows of 4 token ids (x, f32: i % 8 over the flattened
// rows) with labels i % 10 (y, i64), the same arrays as the training and
// test splits, except row `bad_row`'s third id: 9, which an embedding of
// input_dim 8 has no row for.
inline std::string TokenIdsNpzBytes(int64_t rows, int64_t bad_row) {
  std::vector<float> x(static_cast<size_t>(rows * 4));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 8);
  x[static_cast<size_t>(bad_row * 4 + 2)] = 9;
  std::vector<int64_t> y(static_cast<size_t>(rows));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(i % 10);
  const std::string xs = NpyBytes("<f4", {rows, 4}, RawBytes(x));
  const std::string ys = NpyBytes("<i8", {rows}, RawBytes(y));
  return ZipBytes({{"x_train.npy", xs},
                   {"y_train.npy", ys},
                   {"x_test.npy", xs},
                   {"y_test.npy", ys}});
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TRAINER_DATA_NPZ_WRITER_H_
