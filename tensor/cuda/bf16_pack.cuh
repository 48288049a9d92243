// Four bfloat16 elements as one 8-byte word, lowest address first: packed
// from f32 values (vectorised stores) and widened back. Only for .cu files.
#ifndef MIRRORTRAIN_TENSOR_CUDA_BF16_PACK_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_BF16_PACK_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstring>

namespace mirrortrain::cuda {

// Rounded to nearest even, as __float2bfloat16_rn.
__device__ inline uint2 PackBf16x4(float a, float b, float c, float d) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(c, d);
  uint2 bits;
  memcpy(&bits.x, &lo, sizeof(bits.x));
  memcpy(&bits.y, &hi, sizeof(bits.y));
  return bits;
}

// The f32 values of four packed bfloat16 elements (exact: a bfloat16 is the
// upper half of an f32).
__device__ inline float4 UnpackBf16x4(uint2 bits) {
  return make_float4(
      __uint_as_float(bits.x << 16), __uint_as_float(bits.x & 0xffff0000u),
      __uint_as_float(bits.y << 16), __uint_as_float(bits.y & 0xffff0000u));
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_BF16_PACK_CUH_
