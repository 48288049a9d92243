// Four f32 values rounded to bfloat16 (round to nearest even, as
// __float2bfloat16_rn) and packed into one 8-byte word, lowest address
// first: a vectorised store of four bf16 elements. Only for .cu files.
#ifndef MIRRORTRAIN_TENSOR_CUDA_BF16_PACK_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_BF16_PACK_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstring>

namespace mirrortrain::cuda {

__device__ inline uint2 PackBf16x4(float a, float b, float c, float d) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(c, d);
  uint2 bits;
  memcpy(&bits.x, &lo, sizeof(bits.x));
  memcpy(&bits.y, &hi, sizeof(bits.y));
  return bits;
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_BF16_PACK_CUH_
