// Winograd's F(2x2, r x r) convolution (tensor/winograd.h,
// ops/winograd_conv.h) on CPUs, where the same per-unit functions as the
// CUDA kernel run: the matrices compute a correlation (f64, to rounding),
// and Conv2D on the Winograd path equals im2col + GEMM in its output and
// both gradients (f64 to 1e-11; f32 within its rounding), over SAME and
// VALID padding, partial edge tiles, filters wider than the image, and
// Conv2DBiasRelu's fused output pass; the path takes exactly the
// convolutions it claims.
#include "tensor/ops/winograd_conv.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/winograd.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::AllClose;
using testing::OpRun;
using testing::RandomTensor;
using testing::RunOp;

class WinogradConvTest : public ::testing::Test {
 protected:
  void SetUp() override { SetMatMulPrecision(MatMulPrecision::kFp32); }
  void TearDown() override {
    ops::internal::SetConvCpuWinograd(false);
    ops::internal::SetConvGpuKeptColumnBytes(0);
    SetMatMulPrecision(MatMulPrecision::kFp32);
  }
};

// Y = A^T [(G g G^T) (.) (B^T d B)] A for a random a x a tile d and r x r
// filter g is their 2x2 correlation.
TEST_F(WinogradConvTest, TheMatricesComputeACorrelation) {
  for (const int r : {3, 5}) {
    SCOPED_TRACE(absl::StrCat("r=", r));
    const int a = r + 1;
    const auto mx = winograd::MatricesFor<double>(r);
    const Tensor d = RandomTensor({a, a}, 10 + r);
    const Tensor g = RandomTensor({r, r}, 20 + r);
    auto at = [](const Tensor& t, int i, int j) {
      return t.data<double>()[i * t.dim(1) + j];
    };
    // U = G g G^T and V = B^T d B, a x a each.
    std::vector<double> u(a * a), v(a * a);
    for (int i = 0; i < a; ++i) {
      for (int j = 0; j < a; ++j) {
        double su = 0, sv = 0;
        for (int k = 0; k < r; ++k) {
          for (int l = 0; l < r; ++l)
            su += mx.g[i][k] * at(g, k, l) * mx.g[j][l];
        }
        for (int k = 0; k < a; ++k) {
          for (int l = 0; l < a; ++l) {
            sv += mx.bt[i][k] * at(d, k, l) * mx.bt[j][l];
          }
        }
        u[i * a + j] = su;
        v[i * a + j] = sv;
      }
    }
    for (int y = 0; y < winograd::kTile; ++y) {
      for (int x = 0; x < winograd::kTile; ++x) {
        double fast = 0, direct = 0;
        for (int i = 0; i < a; ++i) {
          for (int j = 0; j < a; ++j) {
            fast += mx.at[y][i] * u[i * a + j] * v[i * a + j] * mx.at[x][j];
          }
        }
        for (int k = 0; k < r; ++k) {
          for (int l = 0; l < r; ++l)
            direct += at(d, y + k, x + l) * at(g, k, l);
        }
        EXPECT_NEAR(fast, direct, 1e-13) << y << "," << x;
      }
    }
  }
}

struct Case {
  Shape x;       // NHWC
  Shape filter;  // HWIO
  ops::Padding padding;
};

// Convolutions the path takes: 3x3 and 5x5, stride 1.
std::vector<Case> TakenCases() {
  using ops::Padding;
  return {
      {{2, 5, 5, 3}, {3, 3, 3, 4}, Padding::kSame},
      {{1, 7, 6, 2}, {3, 3, 2, 3}, Padding::kValid},  // 5x4: a half tile.
      {{3, 8, 8, 1}, {5, 5, 1, 2}, Padding::kSame},
      {{2, 14, 14, 8}, {5, 5, 8, 16}, Padding::kSame},  // The cnn's 2nd, thin.
      {{1, 9, 7, 4}, {5, 5, 4, 3}, Padding::kValid},    // 5x3.
      {{1, 1, 1, 2}, {3, 3, 2, 2}, Padding::kSame},     // One pixel.
      {{2, 3, 6, 2}, {5, 5, 2, 2}, Padding::kSame},     // Filter > image.
      {{1, 11, 13, 5}, {3, 3, 5, 7}, Padding::kSame},   // Odd everything.
      // 2 025 tiles: the filter gradient sums two segments of 1 013 tiles,
      // the second with a zero row of padding.
      {{9, 30, 30, 2}, {3, 3, 2, 3}, Padding::kSame},
      // The cnn's second conv, and the resnet config's 3x3 widths.
      {{4, 14, 14, 32}, {5, 5, 32, 64}, Padding::kSame},
      {{2, 28, 28, 16}, {3, 3, 16, 16}, Padding::kSame},
      {{4, 7, 7, 64}, {3, 3, 64, 64}, Padding::kSame},
  };
}

// The Conv2D of `c` (and its gradients) with the CPU's Winograd path on or
// off.
OpRun RunConv(const Case& c, DType dtype, bool winograd, uint64_t seed) {
  ops::Conv2DOptions opt;
  opt.padding = c.padding;
  const Tensor x = RandomTensor(c.x, seed, dtype);
  const Tensor f = RandomTensor(c.filter, seed + 1, dtype);
  absl::StatusOr<Tensor> probe = ops::Conv2D(x, f, opt);
  EXPECT_TRUE(probe.ok()) << probe.status();
  const Tensor w = RandomTensor(probe->shape(), seed + 2, dtype, 0.5, 1.5);
  ops::internal::SetConvCpuWinograd(winograd);
  absl::StatusOr<OpRun> run = RunOp(
      [&](const std::vector<Tensor>& in) {
        return ops::Conv2D(in[0], in[1], opt);
      },
      {x, f}, w, /*gradients=*/true);
  EXPECT_TRUE(run.ok()) << run.status();
  ops::internal::SetConvCpuWinograd(false);
  return run.ok() ? *run : OpRun{};
}

std::string Describe(const Case& c) {
  return absl::StrCat(ShapeToString(c.x), " * ", ShapeToString(c.filter),
                      c.padding == ops::Padding::kSame ? " same" : " valid");
}

// The filter gradient reads the forward's transformed input where the
// budget for kept columns grants its bytes, and transforms x again where
// it does not (a budget of one byte): both are checked.
TEST_F(WinogradConvTest, Conv2DAndItsGradientsMatchIm2ColInF64) {
  uint64_t seed = 100;
  for (const int64_t budget : {int64_t{0}, int64_t{1}}) {
    ops::internal::SetConvGpuKeptColumnBytes(budget);
    for (const Case& c : TakenCases()) {
      SCOPED_TRACE(absl::StrCat(Describe(c), budget == 0 ? " kept" : " again"));
      const OpRun want = RunConv(c, DType::kF64, false, seed);
      const int64_t calls = ops::internal::WinogradConvCalls();
      const OpRun got = RunConv(c, DType::kF64, true, seed);
      // Forward, input gradient, filter gradient.
      EXPECT_EQ(ops::internal::WinogradConvCalls() - calls, 3);
      EXPECT_TRUE(AllClose(got.y, want.y, 1e-11, 1e-11)) << "forward";
      ASSERT_EQ(got.grads.size(), 2u);
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(got.grads[i].has_value() && want.grads[i].has_value());
        EXPECT_TRUE(AllClose(*got.grads[i], *want.grads[i], 1e-11, 1e-11))
            << (i == 0 ? "input gradient" : "filter gradient");
      }
      seed += 10;
    }
  }
}

// While a recorded forward's transformed input is kept, its bytes are
// reserved in the budget; they return with the record.
TEST_F(WinogradConvTest, TheKeptTransformIsReservedUntilTheBackward) {
  ops::internal::SetConvCpuWinograd(true);
  const Tensor x = RandomTensor({2, 9, 9, 3}, 1);
  const Tensor f = RandomTensor({5, 5, 3, 4}, 2);
  {
    GradientTape tape;
    tape.Watch(f);
    absl::StatusOr<Tensor> y = ops::Conv2D(x, f);
    ASSERT_TRUE(y.ok()) << y.status();
    // 36 points x 50 tiles (2 images of 5 x 5) x 3 channels, f64.
    EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(-1), 36 * 50 * 3 * 8);
    ASSERT_TRUE(tape.Gradient(*y, {f}).ok());
  }
  EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(-1), 0);
}

// A frozen layer's filter is not watched: its gradient is never asked for,
// so no transform of x is kept for it (Conv2D, with bias and relu, and
// with the pool in the output pass), and x's gradient is the same bits as
// when the filter is watched and its transform kept.
TEST_F(WinogradConvTest, AnUnwatchedFilterKeepsNoTransform) {
  ops::internal::SetConvCpuWinograd(true);
  const Tensor x = RandomTensor({2, 10, 10, 3}, 11);
  const Tensor f = RandomTensor({3, 3, 3, 4}, 12);
  const Tensor b = RandomTensor({4}, 13);
  const ops::Pool2DOptions pool;
  const std::vector<
      std::pair<const char*, std::function<absl::StatusOr<Tensor>()>>>
      convs = {
          {"Conv2D", [&] { return ops::Conv2D(x, f); }},
          {"Conv2DBiasRelu", [&] { return ops::Conv2DBiasRelu(x, f, b); }},
          {"Conv2DMaxPool", [&] { return ops::Conv2DMaxPool(x, f, {}, pool); }},
      };
  for (const auto& [name, conv] : convs) {
    SCOPED_TRACE(name);
    // x's gradient with the filter watched or not, and the bytes kept
    // after the forward.
    auto input_gradient = [&](bool watch_filter, int64_t* kept) {
      GradientTape tape;
      tape.Watch(x);
      if (watch_filter) tape.Watch(f);
      const int64_t calls = ops::internal::WinogradConvCalls();
      absl::StatusOr<Tensor> y = conv();
      EXPECT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(ops::internal::WinogradConvCalls() - calls, 1);
      *kept = ops::internal::ConvGpuKeptColumnBytes(-1);
      absl::StatusOr<std::vector<std::optional<Tensor>>> g =
          tape.Gradient(*ops::ReduceSum(*ops::Square(*y)), {x});
      EXPECT_TRUE(g.ok()) << g.status();
      return g.ok() ? (*g)[0]->ToVector<double>() : std::vector<double>{};
    };
    int64_t kept_watched = 0, kept_frozen = 0;
    const std::vector<double> watched = input_gradient(true, &kept_watched);
    const std::vector<double> frozen = input_gradient(false, &kept_frozen);
    // 16 points x 50 tiles (2 images of 5 x 5) x 3 channels, f64.
    EXPECT_EQ(kept_watched, 16 * 50 * 3 * 8);
    EXPECT_EQ(kept_frozen, 0);
    EXPECT_EQ(frozen, watched);
    EXPECT_EQ(ops::internal::ConvGpuKeptColumnBytes(-1), 0);
  }
  // A filter watched only after the op ran still gets its gradient: the
  // transform of x is made again, the same bits as from the kept one.
  auto filter_gradient = [&](bool watch_first) {
    GradientTape tape;
    tape.Watch(x);
    if (watch_first) tape.Watch(f);
    absl::StatusOr<Tensor> y = ops::Conv2D(x, f);
    EXPECT_TRUE(y.ok()) << y.status();
    if (!watch_first) tape.Watch(f);
    absl::StatusOr<std::vector<std::optional<Tensor>>> g =
        tape.Gradient(*ops::ReduceSum(*ops::Square(*y)), {f});
    EXPECT_TRUE(g.ok() && (*g)[0].has_value());
    return g.ok() && (*g)[0].has_value() ? (*g)[0]->ToVector<double>()
                                         : std::vector<double>{};
  };
  const std::vector<double> kept = filter_gradient(true);
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(filter_gradient(false), kept);
}

// In f32 both paths round; each is compared with the f64 result of the same
// inputs, as the worst error relative to the largest value. Measured: for
// 3x3 filters the Winograd path's is im2col's (up to 5.2e-7; im2col up to
// 6e-7); for 5x5 filters the filter gradient's is the largest, and how
// large depends on the order in which the BLAS kernel sums the products
// over the tiles, which the filter transform's adjoint amplifies (G's row
// for the point 2 is 1, 2, 4, 8, 16): the cnn's second conv at batch 4 gave
// 2.5e-6 with OpenBLAS's Sandybridge kernels and 1.5e-5 with its Haswell
// and Zen ones (OPENBLAS_CORETYPE; 4e-6 to 1.5e-5 over twelve seeds), 5e-6
// with both kinds when the upstream gradient has both signs, against
// im2col's 3e-7 to 5e-7; the forward and input gradient up to 1.8e-6 and
// 2.1e-6 with either kernel. The bounds are about twice the worst seen, per
// output; a wrong tap or tile is off by O(0.1).
TEST_F(WinogradConvTest, F32StaysWithinRoundingOfF64) {
  uint64_t seed = 300;
  for (const Case& c : TakenCases()) {
    SCOPED_TRACE(Describe(c));
    const OpRun exact = RunConv(c, DType::kF64, false, seed);
    const OpRun im2col = RunConv(c, DType::kF32, false, seed);
    const OpRun ours = RunConv(c, DType::kF32, true, seed);
    const bool r3 = c.filter[0] == 3;
    // Forward, input gradient, filter gradient.
    const double bounds[3] = {r3 ? 1e-6 : 5e-6, r3 ? 1e-6 : 5e-6,
                              r3 ? 1e-6 : 3e-5};
    auto worst = [](const Tensor& got, const Tensor& want) {
      absl::StatusOr<Tensor> g64 = ops::Cast(got, DType::kF64);
      double scale = 1e-30, err = 0;
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        scale = std::max(scale, std::fabs(want.data<double>()[i]));
        err = std::max(
            err, std::fabs(g64->data<double>()[i] - want.data<double>()[i]));
      }
      return err / scale;
    };
    const double y_ours = worst(ours.y, exact.y);
    const double y_im2col = worst(im2col.y, exact.y);
    EXPECT_LT(y_ours, bounds[0]) << "forward (im2col: " << y_im2col << ")";
    for (int i = 0; i < 2; ++i) {
      const double g_ours = worst(*ours.grads[i], *exact.grads[i]);
      const double g_im2col = worst(*im2col.grads[i], *exact.grads[i]);
      EXPECT_LT(g_ours, bounds[1 + i])
          << (i == 0 ? "input" : "filter") << " gradient (im2col: " << g_im2col
          << ")";
    }
    seed += 10;
  }
}

TEST_F(WinogradConvTest, BiasAndReluGoInTheOutputPass) {
  ops::Conv2DOptions opt;
  const Tensor x = RandomTensor({2, 6, 5, 3}, 7);
  const Tensor f = RandomTensor({5, 5, 3, 4}, 8);
  const Tensor b = RandomTensor({4}, 9);
  const Tensor w = RandomTensor({2, 6, 5, 4}, 10, DType::kF64, 0.5, 1.5);
  auto run = [&](bool winograd) {
    ops::internal::SetConvCpuWinograd(winograd);
    absl::StatusOr<OpRun> r = RunOp(
        [&](const std::vector<Tensor>& in) {
          return ops::Conv2DBiasRelu(in[0], in[1], in[2], opt);
        },
        {x, f, b}, w, true);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const OpRun want = run(false);
  const int64_t calls = ops::internal::WinogradConvCalls();
  const OpRun got = run(true);
  EXPECT_EQ(ops::internal::WinogradConvCalls() - calls, 3);
  EXPECT_TRUE(AllClose(got.y, want.y, 1e-11, 1e-11));
  int zeros = 0;  // Relu clipped some outputs (or the test would not say).
  for (int64_t i = 0; i < got.y.num_elements(); ++i) {
    zeros += got.y.data<double>()[i] == 0.0;
  }
  EXPECT_GT(zeros, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(AllClose(*got.grads[i], *want.grads[i], 1e-11, 1e-11)) << i;
  }
}

// Conv2DMaxPool and Conv2DMaxPoolBiasRelu on the Winograd path pool in
// its output pass (one call for the forward, two for the gradients: the
// pool's gradient, then the convolution's), and equal the ops in turn:
// values, and through the winners, both gradients. Odd output sizes leave
// a last row or column that VALID pooling drops.
TEST_F(WinogradConvTest, MaxPoolGoesInTheOutputPass) {
  struct PoolCase {
    Case c;
    bool bias;
  };
  const PoolCase cases[] = {
      {{{2, 14, 14, 8}, {5, 5, 8, 6}, ops::Padding::kSame}, true},
      {{{1, 9, 7, 3}, {3, 3, 3, 4}, ops::Padding::kSame}, false},
      {{{2, 9, 8, 2}, {5, 5, 2, 3}, ops::Padding::kValid}, true},  // 5x4.
  };
  uint64_t seed = 500;
  for (const PoolCase& pc : cases) {
    SCOPED_TRACE(Describe(pc.c));
    ops::Conv2DOptions opt;
    opt.padding = pc.c.padding;
    const ops::Pool2DOptions pool;  // 2x2, stride 2, VALID.
    std::vector<Tensor> in = {RandomTensor(pc.c.x, seed),
                              RandomTensor(pc.c.filter, seed + 1)};
    if (pc.bias) in.push_back(RandomTensor({pc.c.filter[3]}, seed + 2));
    auto f = [&](const std::vector<Tensor>& t) {
      return pc.bias ? ops::Conv2DMaxPoolBiasRelu(t[0], t[1], t[2], opt, pool)
                     : ops::Conv2DMaxPool(t[0], t[1], opt, pool);
    };
    absl::StatusOr<Tensor> probe = f(in);
    ASSERT_TRUE(probe.ok()) << probe.status();
    const Tensor w =
        RandomTensor(probe->shape(), seed + 3, DType::kF64, 0.5, 1.5);
    absl::StatusOr<OpRun> want = RunOp(f, in, w, true);
    ASSERT_TRUE(want.ok()) << want.status();
    ops::internal::SetConvCpuWinograd(true);
    const int64_t calls = ops::internal::WinogradConvCalls();
    const int64_t fused = ops::internal::FusedConvMaxPoolCalls();
    absl::StatusOr<OpRun> got = RunOp(f, in, w, true);
    ops::internal::SetConvCpuWinograd(false);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(ops::internal::WinogradConvCalls() - calls, 3);
    EXPECT_EQ(ops::internal::FusedConvMaxPoolCalls() - fused, 1);
    EXPECT_TRUE(AllClose(got->y, want->y, 1e-11, 1e-11)) << "forward";
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_TRUE(AllClose(*got->grads[i], *want->grads[i], 1e-11, 1e-11))
          << "gradient " << i;
    }
    seed += 10;
  }
}

TEST_F(WinogradConvTest, OtherConvolutionsKeepTheirPath) {
  using ops::Padding;
  struct Other {
    Case c;
    int64_t stride;
    const char* why;
  };
  const Other others[] = {
      {{{1, 8, 8, 2}, {3, 3, 2, 2}, Padding::kSame}, 2, "stride 2"},
      {{{1, 6, 6, 2}, {1, 1, 2, 2}, Padding::kSame}, 1, "1x1"},
      {{{1, 9, 9, 2}, {7, 7, 2, 2}, Padding::kSame}, 1, "7x7"},
      {{{1, 8, 8, 2}, {3, 5, 2, 2}, Padding::kSame}, 1, "3x5"},
      {{{1, 2, 2, 2}, {3, 3, 2, 2}, Padding::kValid}, 1, "empty output"},
      {{{0, 4, 4, 2}, {3, 3, 2, 2}, Padding::kSame}, 1, "empty batch"},
  };
  ops::internal::SetConvCpuWinograd(true);
  for (const Other& o : others) {
    SCOPED_TRACE(o.why);
    ops::Conv2DOptions opt;
    opt.stride_h = opt.stride_w = o.stride;
    opt.padding = o.c.padding;
    const int64_t calls = ops::internal::WinogradConvCalls();
    EXPECT_TRUE(
        ops::Conv2D(RandomTensor(o.c.x, 1), RandomTensor(o.c.filter, 2), opt)
            .ok());
    EXPECT_EQ(ops::internal::WinogradConvCalls(), calls);
  }
  // f32 products on tensor cores (tf32) keep im2col + GEMM; f64 ignores
  // the precision.
  SetMatMulPrecision(MatMulPrecision::kTf32);
  const int64_t calls = ops::internal::WinogradConvCalls();
  const Shape xs{1, 6, 6, 2}, fs{3, 3, 2, 2};
  EXPECT_TRUE(ops::Conv2D(RandomTensor(xs, 1, DType::kF32),
                          RandomTensor(fs, 2, DType::kF32))
                  .ok());
  EXPECT_EQ(ops::internal::WinogradConvCalls(), calls);
  EXPECT_TRUE(ops::Conv2D(RandomTensor(xs, 1), RandomTensor(fs, 2)).ok());
  EXPECT_EQ(ops::internal::WinogradConvCalls(), calls + 1);
}

// Every buffer a pass makes whole stays within 1 GiB: the transforms, and
// the filter gradient's per-segment sums ([36, segments, c, o] for 5x5),
// which grow with c * o. At 2048 -> 2048 channels (f32, 5x5 SAME) the
// transforms of a 64x64 image are 288 MiB and of a 64x66 one 297 MiB, but
// the sums are 576 MiB for the first's one segment of 1 024 tiles and
// 1.1 GiB for the second's two (1 056 tiles).
TEST_F(WinogradConvTest, TheFilterGradientsSumsStayWithinTheBudget) {
  ops::internal::SetConvCpuWinograd(true);
  cuda::Conv2DGeometry g;
  g.n = 1;
  g.h = g.oh = 64;
  g.w = g.ow = 64;
  g.c = g.o = 2048;
  g.kh = g.kw = 5;
  g.pt = g.pl = 2;
  const Tensor x = RandomTensor({1, 1, 1, 1}, 1, DType::kF32);
  EXPECT_TRUE(ops::internal::WinogradConvTakes(g, x));
  g.w = g.ow = 66;
  EXPECT_FALSE(ops::internal::WinogradConvTakes(g, x));
}

// Dilated windows stay on im2col: none of Winograd (CPU and GPU), the
// direct kernels or the implicit-GEMM input gradient spaces its taps, so
// each refuses a dilated geometry it takes undilated, and a dilated
// convolution with the CPU's Winograd on makes no Winograd call and the
// same bits as with it off.
TEST_F(WinogradConvTest, DilatedWindowsStayOnIm2Col) {
  ops::internal::SetConvCpuWinograd(true);
  cuda::Conv2DGeometry g;
  g.n = 2;
  g.h = g.w = g.oh = g.ow = 9;
  g.c = 1;
  g.o = 16;
  g.kh = g.kw = 3;
  g.pt = g.pl = 1;
  const Tensor x = RandomTensor({2, 9, 9, 1}, 1);
  EXPECT_TRUE(ops::internal::WinogradConvTakes(g, x));
  EXPECT_TRUE(cuda::DirectConvTakes(g));
  EXPECT_TRUE(cuda::ConvInputGradTakes(g));
  for (const auto& [dh, dw] : {std::pair{2, 1}, std::pair{1, 2}}) {
    g.dh = dh;
    g.dw = dw;
    g.pt = dh;
    g.pl = dw;
    EXPECT_FALSE(ops::internal::WinogradConvTakes(g, x)) << dh << dw;
    EXPECT_FALSE(cuda::DirectConvTakes(g)) << dh << dw;
    EXPECT_FALSE(cuda::ConvInputGradTakes(g)) << dh << dw;
  }
  const Tensor f = RandomTensor({3, 3, 1, 16}, 2);
  const ops::Conv2DOptions dilated{.dilation_h = 2, .dilation_w = 2};
  const int64_t calls = ops::internal::WinogradConvCalls();
  absl::StatusOr<Tensor> on = ops::Conv2D(x, f, dilated);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(ops::internal::WinogradConvCalls(), calls);
  ops::internal::SetConvCpuWinograd(false);
  absl::StatusOr<Tensor> off = ops::Conv2D(x, f, dilated);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(testing::SameBits(*on, *off));
}

}  // namespace
}  // namespace mirrortrain
