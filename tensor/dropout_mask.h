// Dropout's keep/drop decision, shared by the CPU loop (ops/nn_ops.cc) and
// the CUDA kernel (cuda/nn_kernels.cu) so both draw the same mask bit for
// bit. SplitMix64 is counter-based: element i's bit depends only on (seed,
// i + element_offset), not on how the work is split over threads, blocks
// or replicas.
#ifndef MIRRORTRAIN_TENSOR_DROPOUT_MASK_H_
#define MIRRORTRAIN_TENSOR_DROPOUT_MASK_H_

#include <cmath>
#include <cstdint>

#include "tensor/elementwise_kind.h"
#include "tensor/host_device.h"

namespace mirrortrain {

// SplitMix64's finaliser.
MT_HOST_DEVICE inline uint64_t DropoutMix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The seed of a training step's dropout call: stream `stream` (a layer's
// index) of the step's seed, `salt` keeping kinds of layers apart.
MT_HOST_DEVICE inline uint64_t DropoutStepSeed(uint64_t step_seed,
                                               uint64_t stream, uint64_t salt) {
  return (step_seed * 0x9e3779b97f4a7c15ULL + stream) ^ salt;
}

// The per-call salt: DropoutMix(seed), computed once per op.
MT_HOST_DEVICE inline uint64_t DropoutSalt(uint64_t seed) {
  return DropoutMix(seed);
}

// Keeps element `index` (already offset) when the top 53 bits of its hash,
// as a uniform double in [0, 1), are >= rate. Integer and exact-double
// arithmetic only, so host and device agree exactly.
MT_HOST_DEVICE inline bool DropoutKeep(uint64_t salt, int64_t index,
                                       double rate) {
  const double u = static_cast<double>(
                       DropoutMix(salt ^ static_cast<uint64_t>(index)) >> 11) *
                   0x1.0p-53;
  return u >= rate;
}

// A standard normal draw for element `index` (already offset) under `salt`
// (GaussianNoise's, GaussianDropout's): Box-Muller of two uniforms, in
// (0, 1] from the element's hash and in [0, 1) from a second round of it,
// in double. Host and device agree to within their log and cos's last bit
// of double (then rounded to the tensor's float type).
MT_HOST_DEVICE inline double DropoutNormal(uint64_t salt, int64_t index) {
  const uint64_t a = DropoutMix(salt ^ static_cast<uint64_t>(index));
  const uint64_t b = DropoutMix(a);
  const double u1 = 1.0 - static_cast<double>(a >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return MT_MATH(sqrt)(-2.0 * MT_MATH(log)(u1)) *
         MT_MATH(cos)(6.283185307179586 * u2);
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_DROPOUT_MASK_H_
