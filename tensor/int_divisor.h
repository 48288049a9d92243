// Division by a divisor fixed for a whole kernel launch (the index
// arithmetic of im2col, col2im and pooling). IntDivisor<int32_t> replaces
// the GPU's ~20-instruction 32-bit division by a multiply-high, an add and
// a shift, with a multiplier computed once on the host (Granlund and
// Montgomery's round-up method, as PyTorch's IntDivider). It is exact for
// dividends in [0, 2^31) and divisors in [1, 2^31), which
// cuda::DispatchIndexWidth guarantees by choosing int32_t only when every
// index fits. IntDivisor<int64_t> divides plainly: the fallback for tensors
// past 2^31 elements. Host and device compute the same quotients (tested on
// the host, int_divisor_test).
#ifndef MIRRORTRAIN_TENSOR_INT_DIVISOR_H_
#define MIRRORTRAIN_TENSOR_INT_DIVISOR_H_

#include <cstdint>

#include "tensor/host_device.h"

namespace mirrortrain {

template <typename I>
class IntDivisor;

template <>
class IntDivisor<int32_t> {
 public:
  IntDivisor() = default;
  // d in [1, 2^31). A size of 0 may be held for value() (an empty output
  // that is never divided by); Div and Mod then act as for d = 1.
  explicit IntDivisor(int32_t d) : d_(d) {
    const uint64_t divisor = d > 0 ? static_cast<uint64_t>(d) : 1;
    while ((uint64_t{1} << shift_) < divisor) ++shift_;
    multiplier_ = static_cast<uint32_t>(
        ((uint64_t{1} << 32) * ((uint64_t{1} << shift_) - divisor)) / divisor +
        1);
  }
  MT_HOST_DEVICE int32_t value() const { return d_; }
  // n in [0, 2^31).
  MT_HOST_DEVICE int32_t Div(int32_t n) const {
    const uint32_t u = static_cast<uint32_t>(n);
    return static_cast<int32_t>((MulHi(multiplier_, u) + u) >> shift_);
  }
  MT_HOST_DEVICE int32_t Mod(int32_t n) const { return n - Div(n) * d_; }

 private:
  MT_HOST_DEVICE static uint32_t MulHi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((uint64_t{a} * b) >> 32);
#endif
  }

  int32_t d_ = 1;
  uint32_t multiplier_ = 0;
  uint32_t shift_ = 0;
};

template <>
class IntDivisor<int64_t> {
 public:
  IntDivisor() = default;
  explicit IntDivisor(int64_t d) : d_(d) {}
  MT_HOST_DEVICE int64_t value() const { return d_; }
  MT_HOST_DEVICE int64_t Div(int64_t n) const { return n / d_; }
  MT_HOST_DEVICE int64_t Mod(int64_t n) const { return n % d_; }

 private:
  int64_t d_ = 1;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_INT_DIVISOR_H_
