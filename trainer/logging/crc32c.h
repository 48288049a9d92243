// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and the masked form
// TFRecord stores, so that a CRC over data that itself holds CRCs does not
// degenerate.
//
// Pure functions over caller-owned bytes; safe from any thread.
#ifndef MIRRORTRAIN_TRAINER_LOGGING_CRC32C_H_
#define MIRRORTRAIN_TRAINER_LOGGING_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

// Continues `crc` (the CRC-32C of earlier bytes, 0 for none) over
// `size` more bytes, so Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

// CRC-32C of `data`; Crc32c("123456789") == 0xE3069283.
inline uint32_t Crc32c(absl::string_view data) {
  return Crc32cExtend(0, data.data(), data.size());
}

inline constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;

// TFRecord's mask: rotate right by 15, then add a constant.
inline constexpr uint32_t MaskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta;
}

// Inverse of MaskCrc32c.
inline constexpr uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rotated = masked - kCrc32cMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_LOGGING_CRC32C_H_
