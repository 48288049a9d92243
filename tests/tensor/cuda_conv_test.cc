// Conv2D on GPU tensors (im2col + cuBLAS GEMM, gather-form col2im) against
// the CPU kernel: output, input gradient and filter gradient, over strides,
// SAME/VALID padding, odd and empty sizes, and a batch forced into several
// column-buffer chunks. Labelled `gpu`; skips with the reason when no GPU
// is visible.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/conv_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;
using testing::RandomTensor;

class CudaConvTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    SetMatMulPrecision(MatMulPrecision::kFp32);
  }
  void TearDown() override { ops::internal::SetConvGpuColumnBytes(0); }
};

struct ConvCase {
  Shape x;       // NHWC
  Shape filter;  // HWIO
  int64_t sh, sw;
  ops::Padding padding;
};

std::vector<ConvCase> Cases() {
  using ops::Padding;
  return {
      {{2, 5, 5, 3}, {3, 3, 3, 4}, 1, 1, Padding::kSame},
      {{1, 7, 6, 2}, {3, 2, 2, 3}, 2, 1, Padding::kValid},
      {{3, 8, 8, 1}, {5, 5, 1, 2}, 2, 2, Padding::kSame},
      {{2, 4, 4, 3}, {1, 1, 3, 5}, 1, 1, Padding::kSame},
      {{1, 9, 9, 3}, {2, 2, 3, 2}, 3, 3, Padding::kValid},  // Cells unused.
      {{2, 6, 7, 2}, {4, 3, 2, 3}, 1, 2, Padding::kSame},   // Uneven padding.
      {{1, 1, 1, 1}, {3, 3, 1, 1}, 1, 1, Padding::kSame},
      {{4, 28, 28, 1}, {3, 3, 1, 4}, 1, 1, Padding::kSame},  // The cnn's.
      {{2, 9, 9, 40}, {3, 3, 40, 3}, 2, 1, Padding::kSame},  // Long patches.
      // Channels a multiple of 4: im2col and col2im move four at a time.
      {{3, 7, 7, 8},
       {5, 5, 8, 4},
       1,
       1,
       Padding::kSame},  // Like the cnn's 2nd.
      {{2, 6, 5, 4}, {3, 2, 4, 3}, 2, 2, Padding::kValid},
      {{0, 5, 5, 2}, {3, 3, 2, 2}, 1, 1, Padding::kSame},   // Empty batch.
      {{1, 3, 3, 2}, {4, 4, 2, 2}, 1, 1, Padding::kValid},  // Empty output.
      {{2, 4, 4, 0}, {3, 3, 0, 2}, 1, 1, Padding::kSame},   // No channels.
      {{2, 4, 4, 2}, {3, 3, 2, 0}, 1, 1, Padding::kSame},   // No filters.
  };
}

void ExpectConvMatchesCpu(const ConvCase& c, DType dtype, uint64_t seed) {
  SCOPED_TRACE(absl::StrCat(
      ShapeToString(c.x), " * ", ShapeToString(c.filter), " s", c.sh, "x", c.sw,
      " same ", c.padding == ops::Padding::kSame, " ", DTypeName(dtype)));
  ops::Conv2DOptions opt;
  opt.stride_h = c.sh;
  opt.stride_w = c.sw;
  opt.padding = c.padding;
  // GEMMs sum in a different order than OpenBLAS. Rounding differences of
  // a K-term f32 sum grow like sqrt(K) ulps of its terms (|terms| <= ~1.5
  // here), and the filter gradient sums over every output pixel of the
  // batch (K = 3136 for the cnn's case): atol = 4e-6 * sqrt(K), about 32
  // ulps of 1 per sqrt(term). A wrong index or a missing term is off by
  // O(0.1) or more.
  const int64_t k_max = std::max({c.filter[0] * c.filter[1] * c.filter[2],
                                  c.filter[0] * c.filter[1] * c.filter[3],
                                  c.x[0] * c.x[1] * c.x[2]});
  const double rtol = dtype == DType::kF32 ? 1e-5 : 1e-10;
  const double atol =
      dtype == DType::kF32
          ? 4e-6 * std::sqrt(static_cast<double>(std::max<int64_t>(k_max, 1)))
          : 1e-10;
  ExpectGpuMatchesCpu(
      [opt](const std::vector<Tensor>& in) {
        return ops::Conv2D(in[0], in[1], opt);
      },
      {RandomTensor(c.x, seed, dtype), RandomTensor(c.filter, seed + 1, dtype)},
      rtol, atol);
}

TEST_F(CudaConvTest, ForwardAndGradientsMatchCpu) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const ConvCase& c : Cases()) {
      ExpectConvMatchesCpu(c, dtype, seed += 2);
    }
  }
}

// A column buffer of one image (or a few) per chunk: the filter gradient
// accumulates over chunks and each chunk's images land in the right place.
TEST_F(CudaConvTest, SeveralChunksMatchCpu) {
  uint64_t seed = 100;
  const ops::Padding same = ops::Padding::kSame;
  for (int64_t bytes : {int64_t{1}, int64_t{3 * 5 * 5 * 27 * 8}}) {
    ops::internal::SetConvGpuColumnBytes(bytes);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      ExpectConvMatchesCpu({{7, 5, 5, 3}, {3, 3, 3, 4}, 1, 1, same}, dtype,
                           seed += 2);
      ExpectConvMatchesCpu({{5, 9, 8, 2}, {3, 3, 2, 3}, 2, 2, same}, dtype,
                           seed += 2);
    }
  }
}

}  // namespace
}  // namespace mirrortrain
