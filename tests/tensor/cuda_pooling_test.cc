// MaxPool2D on GPU tensors against the CPU kernel: forward and gradient
// must agree exactly, ties and NaNs included (both record the same winner,
// and the GPU backward adds in the CPU's order). Labelled `gpu`; skips with
// the reason when no GPU is visible.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops/pooling_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::CopyTo;
using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;

class CudaPoolingTest : public CudaTest {};

// Values from {0, 1, 2, 3} (many ties inside windows), some NaN.
Tensor TiedInput(const Shape& shape, DType dtype, uint64_t seed,
                 bool with_nans) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::HostEmpty(dtype, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = static_cast<double>(rng() % 4);
    if (with_nans && rng() % 11 == 0) v = std::nan("");
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(v);
    } else {
      t.data<double>()[i] = v;
    }
  }
  return t;
}

struct PoolCase {
  Shape shape;
  ops::Pool2DOptions opt;
};

std::vector<PoolCase> Cases() {
  auto opt = [](int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                ops::Padding p) {
    ops::Pool2DOptions o;
    o.ksize_h = kh;
    o.ksize_w = kw;
    o.stride_h = sh;
    o.stride_w = sw;
    o.padding = p;
    return o;
  };
  using ops::Padding;
  return {
      {{2, 6, 6, 3}, opt(2, 2, 2, 2, Padding::kValid)},
      {{1, 7, 5, 2}, opt(3, 3, 2, 2, Padding::kSame)},   // Overlap + padding.
      {{3, 5, 5, 1}, opt(3, 3, 1, 1, Padding::kValid)},  // Heavy overlap.
      {{2, 4, 4, 5}, opt(2, 2, 1, 1, Padding::kSame)},
      {{2, 9, 8, 7}, opt(3, 3, 3, 3, Padding::kSame)},
      {{1, 6, 9, 2}, opt(2, 3, 1, 2, Padding::kSame)},  // Non-square.
      {{1, 1, 1, 1}, opt(2, 2, 2, 2, Padding::kSame)},
      {{0, 4, 4, 2}, opt(2, 2, 2, 2, Padding::kValid)},  // Empty batch.
      {{1, 3, 3, 2}, opt(4, 4, 1, 1, Padding::kValid)},  // Empty output.
      {{4, 33, 17, 3}, opt(2, 2, 2, 2, Padding::kValid)},
      // Strides past the window: cells between windows get no gradient.
      {{2, 8, 7, 3}, opt(2, 2, 3, 3, Padding::kValid)},
      {{2, 8, 7, 3}, opt(2, 1, 3, 2, Padding::kSame)},
      // Channels a multiple of 4: the backward moves four at once (f32).
      {{2, 8, 8, 4}, opt(2, 2, 2, 2, Padding::kValid)},
      {{2, 7, 9, 8}, opt(3, 3, 2, 2, Padding::kSame)},
      {{1, 8, 7, 4}, opt(2, 2, 3, 3, Padding::kSame)},
      {{1, 7, 7, 4}, opt(3, 3, 3, 3, Padding::kSame)},  // Leading padding.
      // The whole image as one window (global_max_pooling2d), four
      // channels at once and one.
      {{2, 7, 6, 4}, opt(7, 6, 7, 6, Padding::kValid)},
      {{3, 5, 9, 3}, opt(5, 9, 5, 9, Padding::kValid)},
      // One-row images: the 1-D pools' windows over steps.
      {{2, 1, 9, 3}, opt(1, 3, 1, 2, Padding::kValid)},
      {{2, 1, 9, 4}, opt(1, 4, 1, 3, Padding::kSame)},
      {{2, 1, 9, 3}, opt(1, 9, 1, 9, Padding::kValid)},
  };
}

TEST_F(CudaPoolingTest, ForwardAndGradientMatchCpuExactly) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (bool nans : {false, true}) {
      for (const PoolCase& c : Cases()) {
        SCOPED_TRACE(::testing::Message()
                     << ShapeToString(c.shape) << " k" << c.opt.ksize_h << "x"
                     << c.opt.ksize_w << " s" << c.opt.stride_h << "x"
                     << c.opt.stride_w << " same "
                     << (c.opt.padding == ops::Padding::kSame) << " nans "
                     << nans << " " << DTypeName(dtype));
        const ops::Pool2DOptions opt = c.opt;
        ExpectGpuMatchesCpu(
            [opt](const std::vector<Tensor>& in) {
              return ops::MaxPool2D(in[0], opt);
            },
            {TiedInput(c.shape, dtype, ++seed, nans)}, 0, 0);
      }
    }
  }
}

TEST_F(CudaPoolingTest, ForwardWithoutTapeMatchesCpu) {
  // No tape: no argmax is recorded and the kernel skips writing it (one
  // channel at a time, and four).
  for (const int64_t channels : {3, 8}) {
    Tensor x = TiedInput({2, 7, 7, channels}, DType::kF32, 99, true);
    ops::Pool2DOptions opt;
    opt.ksize_h = opt.ksize_w = 3;
    opt.padding = ops::Padding::kSame;
    Tensor cpu = *ops::MaxPool2D(x, opt);
    absl::StatusOr<Tensor> gpu =
        ops::MaxPool2D(CopyTo(x, Device::Cuda(0)), opt);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_TRUE(testing::AllClose(CopyTo(*gpu, Device::Cpu()), cpu, 0, 0))
        << channels << " channels";
  }
}

}  // namespace
}  // namespace mirrortrain
