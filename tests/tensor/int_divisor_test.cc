// IntDivisor's quotients and remainders against the / and % operators, for
// divisors and dividends at the edges of its range (powers of two and their
// neighbours, 2^31 - 1) and random ones. The device computes the same
// multiply-high (__umulhi) as this host path.
#include "tensor/int_divisor.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mirrortrain {
namespace {

constexpr int32_t kMax = INT32_MAX;

std::vector<int32_t> EdgeValues() {
  std::vector<int32_t> v = {1,  2,  3,   5,   7,        25,
                            28, 32, 800, 784, kMax - 1, kMax};
  for (int s = 1; s < 31; ++s) {
    const int32_t p = int32_t{1} << s;
    v.insert(v.end(), {p - 1, p, p + 1});
  }
  return v;
}

void ExpectExact(int32_t n, int32_t d) {
  const IntDivisor<int32_t> div(d);
  ASSERT_EQ(div.Div(n), n / d) << n << " / " << d;
  ASSERT_EQ(div.Mod(n), n % d) << n << " % " << d;
}

TEST(IntDivisorTest, Int32MatchesDivisionAtTheEdges) {
  for (int32_t d : EdgeValues()) {
    for (int32_t n : EdgeValues()) ExpectExact(n, d);
    for (int32_t k : {0, 1, 2, 1000}) {
      // Around multiples of d, where a wrong quotient would show first.
      const int64_t m = int64_t{d} * k;
      for (int64_t n : {m - 1, m, m + 1}) {
        if (n >= 0 && n <= kMax) ExpectExact(static_cast<int32_t>(n), d);
      }
    }
    ExpectExact(0, d);
  }
}

TEST(IntDivisorTest, Int32MatchesDivisionOnRandomOperands) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(0, kMax);
  std::uniform_int_distribution<int32_t> small(1, 4096);
  for (int i = 0; i < 200000; ++i) {
    ExpectExact(any(rng), i % 2 ? small(rng) : std::max(1, any(rng)));
  }
}

TEST(IntDivisorTest, AZeroSizeCanBeHeld) {
  // Empty outputs hold a 0 size that kernels read but never divide by.
  const IntDivisor<int32_t> zero(0);
  EXPECT_EQ(zero.value(), 0);
}

TEST(IntDivisorTest, Int64Divides) {
  const IntDivisor<int64_t> div(int64_t{3} << 33);
  EXPECT_EQ(div.Div((int64_t{3} << 34) + 5), 2);
  EXPECT_EQ(div.Mod((int64_t{3} << 34) + 5), 5);
  EXPECT_EQ(div.value(), int64_t{3} << 33);
}

}  // namespace
}  // namespace mirrortrain
