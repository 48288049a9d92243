#include "trainer/logging/crc32c.h"

#include <array>

namespace mirrortrain::trainer {
namespace {

// Bit-reversed Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82F63B78u;

// Slicing-by-4 tables: table[0] is the classic byte-at-a-time table and
// table[k][b] is the CRC of byte b followed by k zero bytes, which lets the
// loop consume four bytes per step. Built at compile time, so there is no
// lazy initialisation to synchronise.
using Tables = std::array<std::array<uint32_t, 256>, 4>;

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    }
    tables[0][b] = crc;
  }
  for (size_t k = 1; k < tables.size(); ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = tables[k - 1][b];
      tables[k][b] = (prev >> 8) ^ tables[0][prev & 0xffu];
    }
  }
  return tables;
}

constexpr Tables kTables = MakeTables();

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (size >= 4) {
    // Assembled byte by byte: no alignment or endianness assumptions.
    c ^= static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
    c = kTables[3][c & 0xffu] ^ kTables[2][(c >> 8) & 0xffu] ^
        kTables[1][(c >> 16) & 0xffu] ^ kTables[0][c >> 24];
    p += 4;
    size -= 4;
  }
  while (size-- > 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xffu];
  }
  return ~c;
}

}  // namespace mirrortrain::trainer
