// kVec consecutive channels of one NHWC cell, moved as one access: shared
// by the conv (im2col, col2im) and pooling kernels. Only for .cu files.
//
// With kVec 4 an f32 or int32 load or store is one 16-byte access and a
// bfloat16 store one 8-byte access; callers pick 4 only when the channels
// are a multiple of 4 and the buffers 16-byte aligned (FourChannelsAtOnce).
// One element per access kept these memory-bound kernels at about half the
// bandwidth (2026-11-26 trace: im2col and col2im 0.2 ms of a 1.2 ms step).
#ifndef MIRRORTRAIN_TENSOR_CUDA_CHANNELS_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_CHANNELS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "tensor/cuda/bf16_pack.cuh"
#include "tensor/dtype.h"

namespace mirrortrain::cuda {

// A value as stored: T itself, or f32 rounded to bfloat16 (a bf16
// product's operand, written without an f32 copy first).
template <typename O, typename T>
__device__ inline O StoredValue(T v) {
  if constexpr (std::is_same_v<O, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

template <typename T, int kVec>
struct Channels {
  T v[kVec];
};

template <int kVec, typename T>
__device__ inline Channels<T, kVec> LoadChannels(const T* p) {
  Channels<T, kVec> c;
  if constexpr (kVec == 4 && std::is_same_v<T, float>) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    c.v[0] = f.x, c.v[1] = f.y, c.v[2] = f.z, c.v[3] = f.w;
  } else if constexpr (kVec == 4 && std::is_same_v<T, int32_t>) {
    const int4 f = *reinterpret_cast<const int4*>(p);
    c.v[0] = f.x, c.v[1] = f.y, c.v[2] = f.z, c.v[3] = f.w;
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) c.v[j] = p[j];
  }
  return c;
}

template <typename O, int kVec, typename T>
__device__ inline void StoreChannels(const Channels<T, kVec>& c, O* p) {
  if constexpr (kVec == 4 && std::is_same_v<T, float> &&
                std::is_same_v<O, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
  } else if constexpr (kVec == 4 && std::is_same_v<T, int32_t> &&
                       std::is_same_v<O, int32_t>) {
    *reinterpret_cast<int4*>(p) = make_int4(c.v[0], c.v[1], c.v[2], c.v[3]);
  } else if constexpr (kVec == 4 && std::is_same_v<O, __nv_bfloat16>) {
    *reinterpret_cast<uint2*>(p) = PackBf16x4(c.v[0], c.v[1], c.v[2], c.v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) p[j] = StoredValue<O>(c.v[j]);
  }
}

// Whether f32 buffers of `channels` channels can be read and written four
// channels at a time.
inline bool FourChannelsAtOnce(DType dtype, int64_t channels,
                               std::initializer_list<const void*> buffers) {
  if (dtype != DType::kF32 || channels % 4 != 0) return false;
  for (const void* p : buffers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CHANNELS_CUH_
