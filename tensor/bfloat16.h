// bfloat16 rounding on the host: float32 values rounded to the nearest
// bfloat16 (8-bit mantissa, float32's exponent range), ties to even, and
// kept in float32 storage. This is what a bf16 tensor holds and what a
// tensor-core product reads from its operands, so host code that rounds
// here computes the same numbers as device code that stores bfloat16
// (CUDA's __float2bfloat16_rn rounds the same way).
#ifndef MIRRORTRAIN_TENSOR_BFLOAT16_H_
#define MIRRORTRAIN_TENSOR_BFLOAT16_H_

#include <bit>
#include <cstdint>

namespace mirrortrain {

// The bfloat16 bits of `x`: round to nearest, ties to even; overflow gives
// infinity; a NaN stays a (quiet) NaN of the same sign, never infinity.
inline uint16_t BFloat16Bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7fff rounds up past the halfway point; the kept bit's value
  // decides the tie.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// `x` rounded to the nearest bfloat16, as a float.
inline float RoundToBFloat16(float x) {
  return BFloat16ToFloat(BFloat16Bits(x));
}

// out[i] = RoundToBFloat16(in[i]); `in` and `out` may be the same array.
inline void RoundToBFloat16(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBFloat16(in[i]);
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_BFLOAT16_H_
