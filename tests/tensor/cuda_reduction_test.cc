// Reductions, BroadcastTo and SumToShape on GPU tensors, forward and
// gradient, against the CPU kernels. Labelled `gpu`; skips with the reason
// when no GPU is visible.
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::AllClose;
using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;
using testing::RandomTensor;
using testing::TensorFn;

struct ReduceCase {
  Shape shape;
  std::vector<int> axes;
};

// Leading, trailing, inner and all axes; negative axes; size-0 and size-1
// dimensions; reductions short enough for one thread per output and long
// enough for one block per output; more outputs than a grid holds blocks.
const std::vector<ReduceCase>& Cases() {
  static const auto* cases = new std::vector<ReduceCase>{
      {{7}, {}},
      {{7}, {0}},
      {{}, {}},
      {{5, 300}, {0}},
      {{5, 300}, {1}},
      {{5, 300}, {-1}},
      {{5, 300}, {0, 1}},
      {{17, 40}, {0}},
      {{17, 40}, {1}},
      {{3, 4, 5, 6}, {1, 3}},
      {{3, 4, 5, 6}, {0, 2}},
      {{3, 4, 5, 6}, {2}},
      {{3, 4, 5, 6}, {-3, 0}},
      {{3, 4, 5, 6}, {0, 1, 2, 3}},
      {{2, 1, 33}, {1}},
      {{2, 1, 33}, {0, 2}},
      {{0, 5}, {0}},
      {{0, 5}, {1}},
      {{4, 0, 3}, {1}},
      {{1, 1}, {}},
      {{999}, {}},
      {{70001, 35}, {1}},
  };
  return *cases;
}

class CudaReductionTest : public CudaTest {};

TEST_F(CudaReductionTest, ReduceSumAndMeanMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const double rtol = dtype == DType::kF32 ? 1e-5 : 1e-12;
    uint64_t seed = 100;
    for (const ReduceCase& c : Cases()) {
      // Positive values: no cancellation, so relative error is meaningful.
      Tensor x = RandomTensor(c.shape, ++seed, dtype, 0.5, 1.5);
      for (bool keepdims : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << ShapeToString(c.shape) << " axes "
                     << ::testing::PrintToString(c.axes) << " keepdims "
                     << keepdims << " " << DTypeName(dtype));
        const std::vector<int> axes = c.axes;
        ExpectGpuMatchesCpu(
            [axes, keepdims](const std::vector<Tensor>& in) {
              return ops::ReduceSum(in[0], axes, keepdims);
            },
            {x}, rtol, 0);
        ExpectGpuMatchesCpu(
            [axes, keepdims](const std::vector<Tensor>& in) {
              return ops::ReduceMean(in[0], axes, keepdims);
            },
            {x}, rtol, 0);
      }
    }
  }
}

// Reductions long enough to be split over several blocks per output (and,
// for comparison, one just below the split size). The CPU kernel adds f32
// values in f32, whose error over 10^5-10^6 terms exceeds f32 resolution;
// the GPU adds in double. So both dtypes are checked against the CPU's f64
// reduction of the same values: the f32 result is that sum rounded once.
TEST_F(CudaReductionTest, LongReductionsMatchADoubleReference) {
  const std::vector<ReduceCase> cases = {
      {{1 << 20}, {}},         {{3, 100003}, {1}}, {{100003, 3}, {0}},
      {{2, 70001, 2}, {0, 1}}, {{65535}, {}},      {{70, 70001}, {1}},
  };
  uint64_t seed = 500;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    // f32: one rounding of the double sum (6e-8) with room; f64: well above
    // either sum's rounding (~1e-14 here), below a single-precision slip.
    const double rtol = dtype == DType::kF32 ? 1e-6 : 1e-10;
    for (const ReduceCase& c : cases) {
      SCOPED_TRACE(::testing::Message() << ShapeToString(c.shape) << " axes "
                                        << ::testing::PrintToString(c.axes)
                                        << " " << DTypeName(dtype));
      const Tensor x = RandomTensor(c.shape, ++seed, dtype, 0.5, 1.5);
      const Tensor x64 = *ops::Cast(x, DType::kF64);
      const Tensor gx = testing::CopyTo(x, Device::Cuda(0));
      using Reduction =
          absl::StatusOr<Tensor> (*)(const Tensor&, std::vector<int>, bool);
      for (Reduction reduce :
           {Reduction{&ops::ReduceSum}, Reduction{&ops::ReduceMean}}) {
        absl::StatusOr<Tensor> gpu = reduce(gx, c.axes, false);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        const Tensor expected = *reduce(x64, c.axes, false);
        EXPECT_TRUE(AllClose(
            *ops::Cast(testing::CopyTo(*gpu, Device::Cpu()), DType::kF64),
            expected, rtol, 0));
      }
      if (c.axes.empty()) {
        absl::StatusOr<Tensor> gpu = ops::L2Loss(gx);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        EXPECT_TRUE(AllClose(
            *ops::Cast(testing::CopyTo(*gpu, Device::Cpu()), DType::kF64),
            *ops::L2Loss(x64), rtol, 0));
      }
    }
  }
}

TEST_F(CudaReductionTest, RepeatedAxisIsAnErrorOnGpu) {
  Tensor x = testing::CopyTo(RandomTensor({2, 3}, 1), Device::Cuda(0));
  EXPECT_FALSE(ops::ReduceSum(x, {1, -1}).ok());
}

TEST_F(CudaReductionTest, L2LossMatchesCpu) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const double rtol = dtype == DType::kF32 ? 1e-5 : 1e-12;
    for (const Shape& shape : {Shape{37, 11}, Shape{}, Shape{0}, Shape{3000}}) {
      SCOPED_TRACE(ShapeToString(shape));
      ExpectGpuMatchesCpu(
          [](const std::vector<Tensor>& in) { return ops::L2Loss(in[0]); },
          {RandomTensor(shape, 5, dtype, 0.5, 1.5)}, rtol, 0);
    }
  }
}

TEST_F(CudaReductionTest, BroadcastToMatchesCpu) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 1}, {2, 3, 4}},    {{}, {5}},
      {{5}, {3, 5}},          {{1}, {4, 0}},
      {{2, 1, 3}, {2, 7, 3}}, {{4, 5}, {4, 5}},
      {{1, 1}, {1, 1}},       {{6, 1, 1}, {2, 6, 3, 9}}};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const auto& [from, to] : cases) {
      SCOPED_TRACE(ShapeToString(from) + " -> " + ShapeToString(to));
      const Shape target = to;
      const TensorFn broadcast = [target](const std::vector<Tensor>& in) {
        return ops::BroadcastTo(in[0], target);
      };
      const std::vector<Tensor> inputs = {RandomTensor(from, 9, dtype)};
      // The forward pass is a copy: bit for bit.
      ExpectGpuMatchesCpu(broadcast, inputs, 0, 0, /*gradients=*/false);
      // Its gradient sums up to 54 terms per element in another order than
      // the CPU: f32 differs by a few ulps.
      ExpectGpuMatchesCpu(broadcast, inputs,
                          dtype == DType::kF32 ? 1e-5 : 1e-12, 0);
    }
  }
}

TEST_F(CudaReductionTest, BroadcastToCopiesIntegersExactly) {
  Tensor x = Tensor::FromVector<int64_t>({7, -3, 1LL << 40}, {3, 1});
  Tensor cpu = *ops::BroadcastTo(x, {2, 3, 5});
  absl::StatusOr<Tensor> gpu =
      ops::BroadcastTo(testing::CopyTo(x, Device::Cuda(0)), {2, 3, 5});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(testing::CopyTo(*gpu, Device::Cpu()).ToVector<int64_t>(),
            cpu.ToVector<int64_t>());
}

TEST_F(CudaReductionTest, SumToShapeMatchesCpu) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 5, 6}, {5, 1}}, {{4, 5, 6}, {1, 6}},    {{4, 5, 6}, {6}},
      {{4, 5, 6}, {}},     {{4, 5, 6}, {4, 1, 6}}, {{0, 3}, {3}},
      {{3, 0}, {1, 0}}};
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(ShapeToString(from) + " -> " + ShapeToString(to));
    const Shape target = to;
    ExpectGpuMatchesCpu(
        [target](const std::vector<Tensor>& in) {
          return ops::SumToShape(in[0], target);
        },
        {RandomTensor(from, 4, DType::kF32, 0.5, 1.5)}, 1e-5, 0);
  }
}

}  // namespace
}  // namespace mirrortrain
