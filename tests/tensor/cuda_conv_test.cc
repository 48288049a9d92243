// Conv2D on GPU tensors (im2col + cuBLAS GEMM, gather-form col2im, the
// direct kernels for patches of a few taps, and the implicit input
// gradient) against the CPU kernel:
// output, input gradient and filter gradient, over strides, SAME/VALID
// padding, odd and empty sizes, and a batch forced into several
// column-buffer chunks. Labelled `gpu`; skips with the reason when no GPU
// is visible.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/depthwise_conv_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/ops/window.h"
#include "tensor/ops/winograd_conv.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::CopyTo;
using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;
using testing::RandomTensor;

class CudaConvTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    SetMatMulPrecision(MatMulPrecision::kFp32);
  }
  void TearDown() override {
    ops::internal::SetConvGpuColumnBytes(0);
    ops::internal::SetConvGpuKeptColumnBytes(0);
    ops::internal::SetConvGpuDirect(true);
    ops::internal::SetConvGpuImplicitInputGrad(true);
    ops::internal::SetConvGpuWinograd(false);
    ops::internal::SetConvCpuWinograd(false);
  }
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
      // Direct-kernel shapes (patch <= 32, square 3x3 or 5x5, column
      // stride 1): the cnn's first conv; a row stride with two channel
      // tiles, the second partly used; a row of 9 outputs (a full pixel
      // group and one pixel); 15 outputs and 33 filters; enough pixel
      // groups for several filter-gradient blocks.
      {{3, 28, 28, 1}, {5, 5, 1, 32}, 1, 1, Padding::kSame},
      {{2, 9, 11, 3}, {3, 3, 3, 40}, 2, 1, Padding::kSame},
      {{2, 7, 13, 1}, {5, 5, 1, 7}, 1, 1, Padding::kValid},
      {{1, 3, 17, 3}, {3, 3, 3, 33}, 1, 1, Padding::kValid},
      {{40, 12, 12, 2}, {3, 3, 2, 8}, 3, 1, Padding::kSame},
      // Implicit input-gradient shapes (filters a multiple of 16): the
      // cnn's second conv (4 pixel tiles, the last partial); both strides
      // 2 and two channel tiles, the second partial; an uneven filter with
      // a column stride; a row stride of 3; inputs no output reads
      // (stride above the filter: their gradient is zero).
      {{2, 14, 14, 32}, {5, 5, 32, 64}, 1, 1, Padding::kSame},
      {{2, 9, 7, 40}, {3, 3, 40, 16}, 2, 2, Padding::kSame},
      {{1, 8, 10, 3}, {4, 3, 3, 16}, 1, 2, Padding::kValid},
      {{3, 11, 5, 5}, {5, 5, 5, 32}, 3, 1, Padding::kSame},
      {{1, 9, 9, 4}, {2, 2, 4, 16}, 3, 3, Padding::kValid},
  };
}

ops::Conv2DOptions OptionsOf(const ConvCase& c) {
  ops::Conv2DOptions opt;
  opt.stride_h = c.sh;
  opt.stride_w = c.sw;
  opt.padding = c.padding;
  return opt;
}

// The case's geometry, as conv_ops.cc gives it.
cuda::Conv2DGeometry GeometryOf(const ConvCase& c) {
  const ops::Conv2DOptions opt = OptionsOf(c);
  cuda::Conv2DGeometry g;
  static_cast<ImageWindow&>(g) = ops::MakeImageWindow(
      c.x, c.filter[0], c.filter[1], opt.stride_h, opt.stride_w, opt.padding);
  g.o = c.filter[3];
  return g;
}

// Whether the GPU's gradient pass runs: dy and the patch are not empty.
bool HasGradientWork(const cuda::Conv2DGeometry& g) {
  return g.n * g.pixels() * g.o > 0 && g.patch() > 0;
}

// Whether the direct kernels take the case and it has something to
// compute.
bool DirectCase(const ConvCase& c) {
  const cuda::Conv2DGeometry g = GeometryOf(c);
  return cuda::DirectConvTakes(g) && HasGradientWork(g);
}

// Whether the implicit GEMM takes the case's input gradient (full-f32 or
// f64 products, as these tests run).
bool ImplicitCase(const ConvCase& c) {
  const cuda::Conv2DGeometry g = GeometryOf(c);
  return cuda::ConvInputGradTakes(g) && HasGradientWork(g);
}

void ExpectConvMatchesCpu(const ConvCase& c, DType dtype, uint64_t seed) {
  SCOPED_TRACE(absl::StrCat(
      ShapeToString(c.x), " * ", ShapeToString(c.filter), " s", c.sh, "x", c.sw,
      " same ", c.padding == ops::Padding::kSame, " ", DTypeName(dtype)));
  const ops::Conv2DOptions opt = OptionsOf(c);
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

// Every case on im2col + GEMMs, then with the direct kernels and the
// implicit input gradient on, which must take exactly the cases they claim
// (direct: forward and filter gradient, two calls; implicit: one).
TEST_F(CudaConvTest, ForwardAndGradientsMatchCpu) {
  uint64_t seed = 1;
  int direct_cases = 0, implicit_cases = 0;
  for (const bool ours : {false, true}) {
    ops::internal::SetConvGpuDirect(ours);
    ops::internal::SetConvGpuImplicitInputGrad(ours);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      for (const ConvCase& c : Cases()) {
        SCOPED_TRACE(ours ? "direct and implicit" : "im2col + GEMM");
        const int64_t calls = ops::internal::DirectConvCalls();
        const int64_t implicit = ops::internal::ImplicitInputGradCalls();
        ExpectConvMatchesCpu(c, dtype, seed += 2);
        const bool direct_takes = ours && DirectCase(c);
        const bool implicit_takes = ours && ImplicitCase(c);
        EXPECT_EQ(ops::internal::DirectConvCalls() - calls,
                  direct_takes ? 2 : 0);
        EXPECT_EQ(ops::internal::ImplicitInputGradCalls() - implicit,
                  implicit_takes ? 1 : 0);
        direct_cases += direct_takes;
        implicit_cases += implicit_takes;
      }
    }
  }
  EXPECT_GE(direct_cases, 2 * 8);    // The cases above go direct,
  EXPECT_GE(implicit_cases, 2 * 6);  // and these implicit.
}

// Depthwise convolutions large enough for the filter gradient's segments
// (9240 output pixels: several segments of uneven size) and for the
// grid-stride loops, against the CPU loops, in f32 and f64.
TEST_F(CudaConvTest, DepthwiseConvolutionsOfManySegmentsMatchCpu) {
  struct Case {
    Shape x, filter;
    ops::Conv2DOptions opt;
  };
  const Case cases[] = {
      {{8, 33, 35, 5}, {3, 3, 5, 2}, {1, 1, ops::Padding::kSame}},
      {{4, 29, 31, 7}, {5, 4, 7, 1}, {2, 3, ops::Padding::kValid}},
      // Dilated taps, the filter gradient over several segments too.
      {{8, 33, 35, 5}, {3, 3, 5, 2}, {1, 1, ops::Padding::kSame, 2, 3}},
  };
  uint64_t seed = 500;
  for (const Case& c : cases) {
    const ImageWindow w = ops::MakeImageWindow(
        c.x, c.filter[0], c.filter[1], c.opt.stride_h, c.opt.stride_w,
        c.opt.padding, c.opt.dilation_h, c.opt.dilation_w);
    EXPECT_GT(cuda::DepthwiseFilterGradSegments({w, c.filter[3]}), 1);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(absl::StrCat(ShapeToString(c.x), " ", DTypeName(dtype)));
      const double tol = dtype == DType::kF32 ? 1e-4 : 1e-10;
      ExpectGpuMatchesCpu(
          [&](const std::vector<Tensor>& in) {
            return ops::DepthwiseConv2D(in[0], in[1], c.opt);
          },
          {RandomTensor(c.x, seed, dtype),
           RandomTensor(c.filter, seed + 1, dtype)},
          tol, tol);
      seed += 2;
    }
  }
}

// The implicit input gradient follows the precision of the call: under
// tf32 and bf16 the GEMM path (tensor cores) runs, under fp32 the implicit
// GEMM. Inputs on a 1/64 grid make every product and sum exact in f32,
// tf32 and bf16 alike, so each must equal the CPU exactly.
TEST_F(CudaConvTest, ImplicitInputGradientOnlyForFullF32Products) {
  const ConvCase c{{2, 14, 14, 32}, {5, 5, 32, 64}, 1, 1, ops::Padding::kSame};
  constexpr float kStep = 1.0f / 64;
  const Tensor x = testing::OnGrid(RandomTensor(c.x, 401, DType::kF32), kStep);
  const Tensor f =
      testing::OnGrid(RandomTensor(c.filter, 402, DType::kF32), kStep);
  const Tensor dy =
      testing::OnGrid(RandomTensor({2, 14, 14, 64}, 403, DType::kF32), kStep);
  const Device gpu = Device::Cuda(0);
  for (const MatMulPrecision precision :
       {MatMulPrecision::kFp32, MatMulPrecision::kTf32,
        MatMulPrecision::kBf16}) {
    SCOPED_TRACE(static_cast<int>(precision));
    auto input_gradient = [&](const Tensor& xi, const Tensor& fi,
                              const Tensor& dyi) {
      GradientTape tape;
      tape.Watch(xi);
      absl::StatusOr<Tensor> y = ops::Conv2D(xi, fi);
      EXPECT_TRUE(y.ok()) << y.status();
      auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dyi)), {xi});
      EXPECT_TRUE(g.ok()) << g.status();
      return CopyTo(*(*g)[0], Device::Cpu());
    };
    // The CPU computes tf32 as full f32.
    SetMatMulPrecision(precision == MatMulPrecision::kBf16
                           ? precision
                           : MatMulPrecision::kFp32);
    const Tensor cpu = input_gradient(x, f, dy);
    SetMatMulPrecision(precision);
    const int64_t implicit = ops::internal::ImplicitInputGradCalls();
    const Tensor on_gpu =
        input_gradient(CopyTo(x, gpu), CopyTo(f, gpu), CopyTo(dy, gpu));
    SetMatMulPrecision(MatMulPrecision::kFp32);
    EXPECT_EQ(ops::internal::ImplicitInputGradCalls() - implicit,
              precision == MatMulPrecision::kFp32 ? 1 : 0);
    EXPECT_EQ(on_gpu.ToVector<float>(), cpu.ToVector<float>());
  }
}

// The filter gradient of Conv2D(x, f, opt) for the output gradient dy,
// with only f watched, on the host.
Tensor FilterGradient(const Tensor& x, const Tensor& f, const Tensor& dy,
                      const ops::Conv2DOptions& opt = {}) {
  GradientTape tape;
  tape.Watch(f);
  absl::StatusOr<Tensor> y = ops::Conv2D(x, f, opt);
  EXPECT_TRUE(y.ok()) << y.status();
  auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dy)), {f});
  EXPECT_TRUE(g.ok()) << g.status();
  return CopyTo(*(*g)[0], Device::Cpu());
}

// Kept columns stay within their budget: a recorded forward keeps its
// columns (the batch's rows at the 16-byte column stride) while they fit,
// and they go with the tape. A filter gradient whose columns were not kept
// runs im2col again: the same bits.
TEST_F(CudaConvTest, KeptColumnsStayWithinTheirBudget) {
  ops::internal::SetConvGpuDirect(false);  // Columns for every conv.
  const Device gpu = Device::Cuda(0);
  // Patch 5 * 5 * 6 = 150 values, rows 152 apart; 3 images of 7 x 7.
  const int64_t kept_bytes = 3 * 7 * 7 * 152 * 4;
  const Tensor x = CopyTo(RandomTensor({3, 7, 7, 6}, 31, DType::kF32), gpu);
  const Tensor f1 = CopyTo(RandomTensor({5, 5, 6, 6}, 32, DType::kF32), gpu);
  const Tensor f2 = CopyTo(RandomTensor({5, 5, 6, 4}, 33, DType::kF32), gpu);
  const Tensor dy = CopyTo(RandomTensor({3, 7, 7, 4}, 34, DType::kF32), gpu);
  ASSERT_EQ(ops::internal::ConvGpuKeptColumnBytes(0), 0);
  // Two convs in a row; `limit` bytes for kept columns (0: the default).
  auto filter_gradients = [&](int64_t limit, int64_t expect_kept) {
    ops::internal::SetConvGpuKeptColumnBytes(limit);
    std::vector<std::vector<float>> grads;
    {
      GradientTape tape;
      tape.Watch(f1);
      tape.Watch(f2);
      absl::StatusOr<Tensor> h = ops::Conv2D(x, f1, {});
      EXPECT_TRUE(h.ok()) << h.status();
      absl::StatusOr<Tensor> y = ops::Conv2D(*h, f2, {});
      EXPECT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(0), expect_kept);
      auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dy)), {f1, f2});
      EXPECT_TRUE(g.ok()) << g.status();
      for (const auto& gi : *g) {
        grads.push_back(CopyTo(*gi, Device::Cpu()).ToVector<float>());
      }
    }
    EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(0), 0);
    return grads;
  };
  const auto both_kept = filter_gradients(0, 2 * kept_bytes);
  EXPECT_EQ(filter_gradients(2 * kept_bytes - 1, kept_bytes), both_kept);
  EXPECT_EQ(filter_gradients(1, 0), both_kept);
}

// A frozen layer's filter is not watched, so no columns are kept for its
// gradient; x's gradient is the same bits as with the filter watched.
TEST_F(CudaConvTest, AnUnwatchedFilterKeepsNoColumns) {
  ops::internal::SetConvGpuDirect(false);  // Columns for every conv.
  const Device gpu = Device::Cuda(0);
  const Tensor x = CopyTo(RandomTensor({3, 7, 7, 6}, 41, DType::kF32), gpu);
  const Tensor f = CopyTo(RandomTensor({5, 5, 6, 4}, 42, DType::kF32), gpu);
  const Tensor dy = CopyTo(RandomTensor({3, 7, 7, 4}, 43, DType::kF32), gpu);
  auto input_gradient = [&](bool watch_filter, int64_t expect_kept) {
    GradientTape tape;
    tape.Watch(x);
    if (watch_filter) tape.Watch(f);
    absl::StatusOr<Tensor> y = ops::Conv2D(x, f, {});
    EXPECT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(0), expect_kept);
    auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dy)), {x});
    EXPECT_TRUE(g.ok()) << g.status();
    return CopyTo(*(*g)[0], Device::Cpu()).ToVector<float>();
  };
  // Patch 5 * 5 * 6 = 150 values, rows 152 apart; 3 images of 7 x 7.
  const auto watched = input_gradient(true, 3 * 7 * 7 * 152 * 4);
  EXPECT_EQ(input_gradient(false, 0), watched);
  EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(0), 0);
}

// The cnn's first layer as training runs it: the input is data (no
// gradient), so only the filter gradient is taken. Direct and GEMM paths
// agree with the CPU, and the direct one is the same bits every run (its
// partial sums are added in a fixed order).
TEST_F(CudaConvTest, DirectFilterGradientAloneMatchesCpuAndRepeats) {
  const Tensor x = RandomTensor({9, 28, 28, 1}, 5, DType::kF32);
  const Tensor f = RandomTensor({5, 5, 1, 32}, 6, DType::kF32);
  const Tensor dy = RandomTensor({9, 28, 28, 32}, 7, DType::kF32);
  const Tensor cpu = FilterGradient(x, f, dy);
  const Device gpu = Device::Cuda(0);
  const Tensor xg = CopyTo(x, gpu), fg = CopyTo(f, gpu), dyg = CopyTo(dy, gpu);
  // 7056 output pixels per filter tap: atol as ExpectConvMatchesCpu's.
  const double atol = 4e-6 * std::sqrt(9.0 * 28 * 28);
  for (const bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "direct" : "im2col + GEMM");
    ops::internal::SetConvGpuDirect(direct);
    const int64_t calls = ops::internal::DirectConvCalls();
    const Tensor first = FilterGradient(xg, fg, dyg);
    EXPECT_EQ(ops::internal::DirectConvCalls() - calls, direct ? 2 : 0);
    EXPECT_TRUE(testing::AllClose(first, cpu, 1e-5, atol));
    if (direct) {
      const Tensor again = FilterGradient(xg, fg, dyg);
      EXPECT_EQ(std::memcmp(first.raw_data(), again.raw_data(),
                            first.num_elements() * sizeof(float)),
                0);
    }
  }
}

// An Inf in the input's last column and one in its last row: a VALID 3x3
// conv over 4 x 11 inputs has 2 x 9 outputs, so the direct kernel's units
// (4 x 4 outputs) reach past the last output column and row. Each Inf
// must reach only the taps whose pixels read it (the CPU's infinite
// entries), not a sum through an output beyond the image's.
TEST_F(CudaConvTest, DirectFilterGradientKeepsNonFiniteInputsToTheirTaps) {
  Tensor x = RandomTensor({2, 4, 11, 1}, 8, DType::kF32);
  x.data<float>()[1 * 11 + 10] = std::numeric_limits<float>::infinity();
  x.data<float>()[3 * 11 + 2] = std::numeric_limits<float>::infinity();
  const Tensor f = RandomTensor({3, 3, 1, 5}, 9, DType::kF32);
  const Tensor dy = RandomTensor({2, 2, 9, 5}, 10, DType::kF32, 0.5, 1.5);
  ops::Conv2DOptions opt;
  opt.padding = ops::Padding::kValid;
  const Tensor cpu = FilterGradient(x, f, dy, opt);
  const Device gpu = Device::Cuda(0);
  const int64_t calls = ops::internal::DirectConvCalls();
  const Tensor on_gpu =
      FilterGradient(CopyTo(x, gpu), CopyTo(f, gpu), CopyTo(dy, gpu), opt);
  EXPECT_EQ(ops::internal::DirectConvCalls() - calls, 2);
  int finite = 0;
  for (int64_t i = 0; i < cpu.num_elements(); ++i) {
    const float want = cpu.data<float>()[i], got = on_gpu.data<float>()[i];
    SCOPED_TRACE(absl::StrCat("element ", i, ": CPU ", want, ", GPU ", got));
    ASSERT_EQ(std::isfinite(want), std::isfinite(got));
    if (!std::isfinite(want)) continue;
    ++finite;
    EXPECT_NEAR(got, want, 1e-5 * (1 + std::abs(want)));
  }
  // Row 1, column 10 reaches taps (0, 2) and (1, 2); row 3, column 2 the
  // taps (2, *). The other four taps stay finite in all 5 channels.
  EXPECT_EQ(finite, 4 * 5);
}

// x rounded to multiples of 1/64 (bf16 holds them exactly: 7 bits).
Tensor OnGrid(const Tensor& x) { return testing::OnGrid(x, 1.0f / 64); }

// Whether got and want hold NaN in the same places, equal values
// elsewhere with `exact`, else values within relative L2 distance 1e-5.
void ExpectSameUpToNaN(const Tensor& got, const Tensor& want, bool exact,
                       const char* what) {
  SCOPED_TRACE(what);
  const std::vector<float> g = got.ToVector<float>(),
                           w = want.ToVector<float>();
  ASSERT_EQ(g.size(), w.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(std::isnan(g[i]), std::isnan(w[i])) << "element " << i;
    if (std::isnan(w[i])) continue;
    if (exact) {
      ASSERT_EQ(g[i], w[i]) << "element " << i;
    }
    diff += (static_cast<double>(g[i]) - w[i]) * (g[i] - w[i]);
    norm += static_cast<double>(w[i]) * w[i];
  }
  EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm));
}

// Conv2DMaxPool on the GPU against the CPU's Conv2D then MaxPool2D, and
// Conv2DMaxPoolBiasRelu against those then BiasAddRelu, in fp32 and bf16,
// forward and every gradient. Inputs (and the bias) on a 1/64 grid make
// every convolution output exact in both, so the pooled values, relu's
// and the winners must be the CPU's exactly; the gradients sum in other
// orders. `fused`: the fused kernels must have run (forward and filter
// gradient), else none; `direct_calls` counts them with the unfused direct
// kernels.
void ExpectConvMaxPoolMatchesCpu(const ConvCase& c, const Tensor& x,
                                 const Tensor& f, bool fused, int direct_calls,
                                 uint64_t seed) {
  SCOPED_TRACE(absl::StrCat(ShapeToString(c.x), " * ", ShapeToString(c.filter),
                            " s", c.sh, "x", c.sw));
  const ops::Conv2DOptions opt = OptionsOf(c);
  const Tensor b = OnGrid(RandomTensor({c.filter[3]}, seed + 7, DType::kF32));
  // y, then the gradients of x, the filter and (with_bias) the bias.
  auto run = [&](const Tensor& xi, const Tensor& fi, const Tensor& bi,
                 bool with_bias) {
    GradientTape tape;
    std::vector<Tensor> sources = {xi, fi};
    if (with_bias) sources.push_back(bi);
    for (const Tensor& s : sources) tape.Watch(s);
    absl::StatusOr<Tensor> y =
        with_bias ? ops::Conv2DMaxPoolBiasRelu(xi, fi, bi, opt, {})
                  : ops::Conv2DMaxPool(xi, fi, opt, {});
    EXPECT_TRUE(y.ok()) << y.status();
    std::vector<Tensor> out;
    if (!y.ok()) return out;
    const Tensor dy = OnGrid(RandomTensor(y->shape(), seed, DType::kF32));
    GradientOptions options;
    options.output_gradient = CopyTo(dy, xi.device());
    auto g = tape.Gradient(*y, sources, options);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return out;
    out.push_back(CopyTo(*y, Device::Cpu()));
    for (const auto& gi : *g) {
      EXPECT_TRUE(gi.has_value());
      if (gi.has_value()) out.push_back(CopyTo(*gi, Device::Cpu()));
    }
    return out;
  };
  const Device gpu = Device::Cuda(0);
  for (const bool with_bias : {false, true}) {
    for (const MatMulPrecision precision :
         {MatMulPrecision::kFp32, MatMulPrecision::kBf16}) {
      SCOPED_TRACE(
          absl::StrCat(precision == MatMulPrecision::kBf16 ? "bf16" : "fp32",
                       with_bias ? ", bias and relu" : ""));
      SetMatMulPrecision(precision);
      const std::vector<Tensor> cpu = run(x, f, b, with_bias);
      const int64_t calls = ops::internal::DirectConvCalls();
      const int64_t fused_calls = ops::internal::FusedConvMaxPoolCalls();
      const std::vector<Tensor> on_gpu =
          run(CopyTo(x, gpu), CopyTo(f, gpu), CopyTo(b, gpu), with_bias);
      SetMatMulPrecision(MatMulPrecision::kFp32);
      EXPECT_EQ(ops::internal::FusedConvMaxPoolCalls() - fused_calls,
                fused ? 2 : 0);
      EXPECT_EQ(ops::internal::DirectConvCalls() - calls, direct_calls);
      const size_t outputs = with_bias ? 4 : 3;
      ASSERT_EQ(cpu.size(), outputs);
      ASSERT_EQ(on_gpu.size(), outputs);
      ExpectSameUpToNaN(on_gpu[0], cpu[0], /*exact=*/true, "y");
      ExpectSameUpToNaN(on_gpu[1], cpu[1], /*exact=*/false, "dx");
      ExpectSameUpToNaN(on_gpu[2], cpu[2], /*exact=*/false, "dfilter");
      if (with_bias) {
        ExpectSameUpToNaN(on_gpu[3], cpu[3], /*exact=*/false, "dbias");
      }
    }
  }
}

// On random grid inputs.
void ExpectConvMaxPoolMatchesCpu(const ConvCase& c, bool fused,
                                 int direct_calls, uint64_t seed) {
  ExpectConvMaxPoolMatchesCpu(
      c, OnGrid(RandomTensor(c.x, seed, DType::kF32)),
      OnGrid(RandomTensor(c.filter, seed + 1, DType::kF32)), fused,
      direct_calls, seed + 2);
}

// The cnn's first conv and its pool; odd output sizes (the pool drops the
// last row and column); a row stride; a second channel tile; then shapes
// that are not fused (a column stride; a 1x1 filter: direct kernels
// neither).
TEST_F(CudaConvTest, ConvMaxPoolMatchesCpu) {
  using ops::Padding;
  uint64_t seed = 300;
  ExpectConvMaxPoolMatchesCpu(
      {{4, 28, 28, 1}, {5, 5, 1, 32}, 1, 1, Padding::kSame}, true, 2,
      seed += 3);
  ExpectConvMaxPoolMatchesCpu(
      {{2, 7, 9, 3}, {3, 3, 3, 40}, 1, 1, Padding::kSame}, true, 2, seed += 3);
  ExpectConvMaxPoolMatchesCpu(
      {{3, 11, 13, 2}, {3, 3, 2, 5}, 2, 1, Padding::kValid}, true, 2,
      seed += 3);
  ExpectConvMaxPoolMatchesCpu(
      {{2, 8, 8, 2}, {3, 3, 2, 4}, 1, 2, Padding::kSame}, false, 0, seed += 3);
  ExpectConvMaxPoolMatchesCpu(
      {{2, 6, 6, 3}, {1, 1, 3, 4}, 1, 1, Padding::kSame}, false, 0, seed += 3);
  // The direct kernels off: the two ops on the GEMM path.
  ops::internal::SetConvGpuDirect(false);
  ExpectConvMaxPoolMatchesCpu(
      {{2, 7, 9, 3}, {3, 3, 3, 40}, 1, 1, Padding::kSame}, false, 0, seed += 3);
}

// Ties: a constant input makes every output of a channel equal under
// VALID padding (each window's four cells tie: the first, top left, wins)
// and the inner ones under SAME. A NaN input: the windows over it hold NaN,
// which wins, and the filter taps that read it get NaN; the NaN lies
// where every output reading it is in a pool window.
TEST_F(CudaConvTest, ConvMaxPoolTiesAndNaNMatchCpu) {
  using ops::Padding;
  const ConvCase valid{{2, 9, 11, 3}, {3, 3, 3, 40}, 1, 1, Padding::kValid};
  const ConvCase same{{2, 12, 12, 1}, {5, 5, 1, 8}, 1, 1, Padding::kSame};
  for (const ConvCase& c : {valid, same}) {
    Tensor x = Tensor::HostEmpty(DType::kF32, c.x);
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = 0.5f;
    const Tensor f = OnGrid(RandomTensor(c.filter, 41, DType::kF32));
    ExpectConvMaxPoolMatchesCpu(c, x, f, true, 2, 42);
  }
  const ConvCase nan{{2, 7, 9, 3}, {3, 3, 3, 40}, 1, 1, Padding::kSame};
  Tensor x = OnGrid(RandomTensor(nan.x, 43, DType::kF32));
  x.data<float>()[((1 * 7 + 3) * 9 + 4) * 3 + 1] =
      std::numeric_limits<float>::quiet_NaN();
  ExpectConvMaxPoolMatchesCpu(
      nan, x, OnGrid(RandomTensor(nan.filter, 44, DType::kF32)), true, 2, 45);
}

// Forward alone (no tape: no winners kept) equals the recorded forward,
// with and without the bias and relu.
TEST_F(CudaConvTest, ConvMaxPoolWithoutTapeMatchesCpu) {
  const Tensor x = OnGrid(RandomTensor({3, 12, 10, 1}, 11, DType::kF32));
  const Tensor f = OnGrid(RandomTensor({5, 5, 1, 8}, 12, DType::kF32));
  const Tensor b = OnGrid(RandomTensor({8}, 13, DType::kF32));
  const ops::Conv2DOptions opt;
  const Device gpu = Device::Cuda(0);
  for (const bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "bias and relu" : "pool alone");
    auto run = [&](const Tensor& xi, const Tensor& fi, const Tensor& bi) {
      return with_bias ? ops::Conv2DMaxPoolBiasRelu(xi, fi, bi, opt, {})
                       : ops::Conv2DMaxPool(xi, fi, opt, {});
    };
    absl::StatusOr<Tensor> cpu = run(x, f, b);
    const int64_t fused_calls = ops::internal::FusedConvMaxPoolCalls();
    absl::StatusOr<Tensor> on_gpu =
        run(CopyTo(x, gpu), CopyTo(f, gpu), CopyTo(b, gpu));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
    EXPECT_EQ(CopyTo(*on_gpu, Device::Cpu()).ToVector<float>(),
              cpu->ToVector<float>());
    EXPECT_EQ(ops::internal::FusedConvMaxPoolCalls() - fused_calls, 1);
  }
}

// A column buffer of one image (or a few) per chunk: the filter gradient
// accumulates over chunks and each chunk's images land in the right place.
// With the direct kernels on, the first case's input gradient alone runs
// in chunks.
TEST_F(CudaConvTest, SeveralChunksMatchCpu) {
  uint64_t seed = 100;
  const ops::Padding same = ops::Padding::kSame;
  for (int64_t bytes : {int64_t{1}, int64_t{3 * 5 * 5 * 27 * 8}}) {
    ops::internal::SetConvGpuColumnBytes(bytes);
    for (const bool direct : {false, true}) {
      ops::internal::SetConvGpuDirect(direct);
      for (DType dtype : {DType::kF32, DType::kF64}) {
        ExpectConvMatchesCpu({{7, 5, 5, 3}, {3, 3, 3, 4}, 1, 1, same}, dtype,
                             seed += 2);
        ExpectConvMatchesCpu({{5, 9, 8, 2}, {3, 3, 2, 3}, 2, 2, same}, dtype,
                             seed += 2);
      }
    }
  }
}

// Dilated windows over 8 channels (the im2col and col2im kernels' four
// channels at a time), and transposed convolutions, which run the
// convolution's kernels the other way round: a generator's RGB output
// (the convolution of the output has a 27-value patch: the transpose's
// gradients go direct, and 16 filters: its forward is the implicit GEMM),
// strided to an odd size, and a 3x3 stride-1 one that Winograd takes with
// its switch on; each on im2col + GEMMs, then with the direct, implicit
// and Winograd paths on.
TEST_F(CudaConvTest, DilatedAndTransposedConvolutionsMatchCpu) {
  const ops::Padding same = ops::Padding::kSame;
  struct Case {
    Shape x, filter;
    ops::Conv2DOptions opt;
    std::array<int64_t, 2> out;  // Transposed: the output's size; else 0.
    // With ours on: direct, implicit input-gradient and Winograd kernel
    // calls (forward, the transpose's input gradient, the filter's).
    int direct = 0, implicit = 0, winograd = 0;
  };
  const Case cases[] = {
      {{2, 9, 9, 8}, {3, 3, 8, 4}, {1, 1, same, 2, 2}, {0, 0}},
      {{2, 11, 7, 8}, {2, 3, 8, 3}, {1, 1, ops::Padding::kValid, 3, 2}, {0, 0}},
      {{2, 6, 7, 16}, {3, 3, 3, 16}, {1, 1, same}, {6, 7}, 2, 1, 0},
      {{3, 4, 5, 8}, {3, 3, 4, 8}, {2, 2, same}, {7, 10}},
      {{2, 8, 8, 16}, {3, 3, 8, 16}, {1, 1, same}, {8, 8}, 0, 0, 3},
  };
  uint64_t seed = 1200;
  for (const bool ours : {false, true}) {
    ops::internal::SetConvGpuDirect(ours);
    ops::internal::SetConvGpuImplicitInputGrad(ours);
    ops::internal::SetConvGpuWinograd(ours);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(absl::StrCat(ShapeToString(c.x), " * ",
                                  ShapeToString(c.filter), " ",
                                  DTypeName(dtype), ours ? " ours" : ""));
        const double tol = dtype == DType::kF32 ? 1e-4 : 1e-10;
        const int64_t direct = ops::internal::DirectConvCalls();
        const int64_t implicit = ops::internal::ImplicitInputGradCalls();
        const int64_t winograd = ops::internal::WinogradConvCalls();
        ExpectGpuMatchesCpu(
            [&](const std::vector<Tensor>& in) {
              return c.out[0] == 0
                         ? ops::Conv2D(in[0], in[1], c.opt)
                         : ops::Conv2DTranspose(in[0], in[1], c.out[0],
                                                c.out[1], c.opt);
            },
            {RandomTensor(c.x, seed, dtype),
             RandomTensor(c.filter, seed + 1, dtype)},
            tol, tol);
        EXPECT_EQ(ops::internal::DirectConvCalls() - direct,
                  ours ? c.direct : 0);
        EXPECT_EQ(ops::internal::ImplicitInputGradCalls() - implicit,
                  ours ? c.implicit : 0);
        EXPECT_EQ(ops::internal::WinogradConvCalls() - winograd,
                  ours ? c.winograd : 0);
        seed += 2;
      }
    }
  }
}

// The outputs and gradients of f on the GPU against the CPU's, each within
// `bound` times the largest value of the CPU's.
void ExpectMatchesCpuWithin(const testing::TensorFn& f,
                            const std::vector<Tensor>& inputs, double bound) {
  absl::StatusOr<Tensor> probe = f(inputs);
  ASSERT_TRUE(probe.ok()) << probe.status();
  const Tensor w = RandomTensor(probe->shape(), 77, probe->dtype(), 0.5, 1.5);
  absl::StatusOr<testing::OpRun> cpu = testing::RunOp(f, inputs, w, true);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& in : inputs)
    gpu_inputs.push_back(CopyTo(in, Device::Cuda(0)));
  absl::StatusOr<testing::OpRun> gpu =
      testing::RunOp(f, gpu_inputs, CopyTo(w, Device::Cuda(0)), true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto expect = [&](const Tensor& on_gpu, const Tensor& want,
                    const std::string& what) {
    absl::StatusOr<Tensor> wide = ops::Cast(want, DType::kF64);
    ASSERT_TRUE(wide.ok()) << wide.status();
    double scale = 0;
    for (double v : wide->ToVector<double>())
      scale = std::max(scale, std::fabs(v));
    EXPECT_TRUE(testing::AllClose(CopyTo(on_gpu, Device::Cpu()), want, 0,
                                  bound * scale))
        << what;
  };
  expect(gpu->y, cpu->y, "forward");
  ASSERT_EQ(gpu->grads.size(), cpu->grads.size());
  for (size_t i = 0; i < cpu->grads.size(); ++i) {
    ASSERT_TRUE(gpu->grads[i].has_value() && cpu->grads[i].has_value()) << i;
    expect(*gpu->grads[i], *cpu->grads[i], absl::StrCat("gradient ", i));
  }
}

// The bound of ExpectMatchesCpuWithin for Winograd's r x r filters: in f32
// the transforms round alike on both sides (no fused multiply-adds in the
// kernels), the batched products may sum in other orders, whose roundings
// the transforms amplify (winograd_conv_test measures up to 1.5e-5 of the
// largest value against f64 for 5x5 filters' filter gradient, depending on
// the BLAS kernel's order, 2.1e-6 for their other outputs, and 5.2e-7 for
// 3x3): each side may be that far off, in opposite directions, and
// cuBLAS's order is not measured, so twice their sum.
double WinogradBound(const ConvCase& c, DType dtype) {
  if (dtype == DType::kF64) return 1e-10;
  return c.filter[0] == 5 ? 6e-5 : 3e-6;
}

// The Winograd path on the GPU (conv_gpu_winograd) against the same path
// on the CPU (winograd_conv_test compares that one with im2col + GEMM).
// Every case above and a few more: the cnn's second conv, 3x3 with 16 and
// 64 channels (the resnet's), odd sizes, VALID, and 2 025 tiles (the
// filter gradient's two segments and a padding row); with the forward's
// transform kept for the filter gradient, then (a budget of one byte)
// made again. Each takes the path exactly where it claims to: on the CPU
// for the probe, the forward and both gradients (4 calls), on the GPU for
// all but the convolutions the direct kernels take (3).
TEST_F(CudaConvTest, WinogradMatchesTheCpuPath) {
  using ops::Padding;
  ops::internal::SetConvGpuWinograd(true);
  ops::internal::SetConvCpuWinograd(true);
  std::vector<ConvCase> cases = Cases();
  cases.insert(cases.end(),
               {
                   {{2, 14, 14, 32}, {5, 5, 32, 64}, 1, 1, Padding::kSame},
                   {{3, 10, 9, 16}, {3, 3, 16, 16}, 1, 1, Padding::kSame},
                   {{2, 7, 7, 64}, {3, 3, 64, 64}, 1, 1, Padding::kSame},
                   {{1, 11, 8, 6}, {5, 5, 6, 5}, 1, 1, Padding::kValid},
                   {{2, 5, 13, 9}, {3, 3, 9, 7}, 1, 1, Padding::kValid},
                   {{9, 30, 30, 4}, {3, 3, 4, 3}, 1, 1, Padding::kSame},
               });
  uint64_t seed = 900;
  int gpu_cases = 0;
  for (const int64_t budget : {int64_t{0}, int64_t{1}}) {
    ops::internal::SetConvGpuKeptColumnBytes(budget);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      for (const ConvCase& c : cases) {
        SCOPED_TRACE(absl::StrCat(
            ShapeToString(c.x), " * ", ShapeToString(c.filter), " s", c.sh, "x",
            c.sw, " ", DTypeName(dtype), " budget ", budget));
        const cuda::Conv2DGeometry g = GeometryOf(c);
        const bool cpu_takes =
            ops::internal::WinogradConvTakes(g, RandomTensor(c.x, 1, dtype));
        const bool gpu_takes = cpu_takes && !DirectCase(c);
        const int64_t calls = ops::internal::WinogradConvCalls();
        const ops::Conv2DOptions opt = OptionsOf(c);
        seed += 2;
        ExpectMatchesCpuWithin(
            [opt](const std::vector<Tensor>& in) {
              return ops::Conv2D(in[0], in[1], opt);
            },
            {RandomTensor(c.x, seed, dtype),
             RandomTensor(c.filter, seed + 1, dtype)},
            WinogradBound(c, dtype));
        EXPECT_EQ(ops::internal::WinogradConvCalls() - calls,
                  (cpu_takes ? 4 : 0) + (gpu_takes ? 3 : 0));
        gpu_cases += gpu_takes;
      }
    }
  }
  EXPECT_EQ(gpu_cases, 2 * 2 * 8);
}

// Conv2DMaxPoolBiasRelu and Conv2DMaxPool (no bias) with the pool in the
// Winograd output pass, and Conv2DBiasRelu with bias and relu there, on
// the GPU against the CPU's same path: the cnn's second conv and its pool,
// and odd output sizes (the pool drops a row and a column). The CPU runs
// the probe, the forward and both gradients (4 Winograd calls, 2 fused
// forwards where pooled), the GPU the forward and both gradients (3, 1).
// In f64 only: in f32 the two sides' roundings may pick different winners
// of a window whose values nearly tie, which sends the gradient elsewhere.
TEST_F(CudaConvTest, WinogradMaxPoolMatchesTheCpuPath) {
  using ops::Padding;
  ops::internal::SetConvGpuWinograd(true);
  ops::internal::SetConvCpuWinograd(true);
  const ConvCase cases[] = {
      {{4, 14, 14, 32}, {5, 5, 32, 64}, 1, 1, Padding::kSame},
      {{2, 9, 11, 6}, {3, 3, 6, 5}, 1, 1, Padding::kSame},
  };
  enum class Op { kPoolBiasRelu, kPool, kBiasRelu };
  uint64_t seed = 950;
  const DType dtype = DType::kF64;
  for (const Op op : {Op::kPoolBiasRelu, Op::kPool, Op::kBiasRelu}) {
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(
          absl::StrCat(ShapeToString(c.x), " op ", static_cast<int>(op)));
      const int64_t calls = ops::internal::WinogradConvCalls();
      const int64_t fused = ops::internal::FusedConvMaxPoolCalls();
      const ops::Conv2DOptions opt = OptionsOf(c);
      std::vector<Tensor> in = {RandomTensor(c.x, seed, dtype),
                                RandomTensor(c.filter, seed + 1, dtype)};
      if (op != Op::kPool) {
        in.push_back(RandomTensor({c.filter[3]}, seed + 2, dtype));
      }
      ExpectGpuMatchesCpu(
          [opt, op](const std::vector<Tensor>& in) {
            switch (op) {
              case Op::kPoolBiasRelu:
                return ops::Conv2DMaxPoolBiasRelu(in[0], in[1], in[2], opt, {});
              case Op::kPool:
                return ops::Conv2DMaxPool(in[0], in[1], opt, {});
              case Op::kBiasRelu:
                break;
            }
            return ops::Conv2DBiasRelu(in[0], in[1], in[2], opt);
          },
          in, 1e-10, 1e-10);
      EXPECT_EQ(ops::internal::WinogradConvCalls() - calls, 7);
      EXPECT_EQ(ops::internal::FusedConvMaxPoolCalls() - fused,
                op == Op::kBiasRelu ? 0 : 3);
      seed += 3;
    }
  }
}

}  // namespace
}  // namespace mirrortrain
