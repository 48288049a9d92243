// Array ops (Transpose, Concat, Gather, OneHot, Cast, ArgMax) on GPU
// tensors, forward and gradient, against the CPU kernels. Labelled `gpu`;
// skips with the reason when no GPU is visible.
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::CopyTo;
using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;
using testing::RandomTensor;

const Device kGpu = Device::Cuda(0);

class CudaArrayTest : public CudaTest {};

// Values that survive a round trip through every dtype exactly.
Tensor SmallIntegers(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor r = RandomTensor(shape, seed, DType::kF64, -50, 50);
  double* v = r.data<double>();
  for (int64_t i = 0; i < r.num_elements(); ++i) v[i] = std::floor(v[i]);
  return *ops::Cast(r, dtype);
}

TEST_F(CudaArrayTest, TransposeMatchesCpu) {
  const std::vector<std::pair<Shape, std::vector<int>>> cases = {
      {{2, 3, 4}, {0, 1, 2}},
      {{2, 3, 4}, {0, 2, 1}},
      {{2, 3, 4}, {1, 0, 2}},
      {{2, 3, 4}, {1, 2, 0}},
      {{2, 3, 4}, {2, 0, 1}},
      {{2, 3, 4}, {2, 1, 0}},
      {{33, 17}, {1, 0}},
      {{5, 1, 7, 0}, {3, 0, 2, 1}},
      {{}, {}},
      {{1, 9, 1}, {2, 1, 0}},
      {{3, 2, 5, 2, 3}, {4, 2, 0, 3, 1}}};
  for (const auto& [shape, perm] : cases) {
    SCOPED_TRACE(ShapeToString(shape) + " perm " +
                 ::testing::PrintToString(perm));
    const std::vector<int> p = perm;
    auto f = [p](const std::vector<Tensor>& in) {
      return ops::Transpose(in[0], p);
    };
    ExpectGpuMatchesCpu(f, {RandomTensor(shape, 1, DType::kF32)}, 0, 0);
    ExpectGpuMatchesCpu(f, {SmallIntegers(shape, DType::kI64, 2)}, 0, 0);
  }
}

TEST_F(CudaArrayTest, ConcatMatchesCpu) {
  struct Case {
    std::vector<Shape> shapes;
    int axis;
  };
  const std::vector<Case> cases = {
      {{{2, 3}, {4, 3}, {0, 3}}, 0}, {{{2, 3, 4}, {2, 1, 4}, {2, 5, 4}}, 1},
      {{{3, 2}, {3, 7}}, -1},        {{{3, 2}}, 1},
      {{{1, 0, 2}, {1, 3, 2}}, 1},   {{{4, 1}, {4, 1}, {4, 1}}, 1}};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << "axis " << c.axis << " " << DTypeName(dtype) << " first "
                   << ShapeToString(c.shapes[0]));
      std::vector<Tensor> inputs;
      uint64_t seed = 20;
      for (const Shape& s : c.shapes) {
        inputs.push_back(SmallIntegers(s, dtype, ++seed));
      }
      const int axis = c.axis;
      ExpectGpuMatchesCpu(
          [axis](const std::vector<Tensor>& in) {
            return ops::Concat(in, axis);
          },
          inputs, 0, 0);
    }
  }
}

TEST_F(CudaArrayTest, ConcatRejectsMixedDevices) {
  Tensor a = RandomTensor({2, 2}, 1);
  EXPECT_FALSE(ops::Concat({a, CopyTo(a, kGpu)}, 0).ok());
}

TEST_F(CudaArrayTest, GatherAndItsGradientMatchCpu) {
  // Repeated indices make the gradient add several rows into one.
  const Tensor idx32 = Tensor::FromVector<int32_t>({3, 0, 9, 3, 3, 7}, {6});
  const Tensor idx64 = Tensor::FromVector<int64_t>({1, 1, 0, 4, 2, 1}, {2, 3});
  const Tensor none = Tensor::FromVector<int64_t>({}, {0});
  auto gather = [](const std::vector<Tensor>& in) {
    return ops::Gather(in[0], in[1]);
  };
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const double rtol = dtype == DType::kF32 ? 1e-6 : 1e-14;
    ExpectGpuMatchesCpu(gather, {RandomTensor({10, 4}, 3, dtype), idx32}, rtol,
                        0);
    ExpectGpuMatchesCpu(gather, {RandomTensor({5, 3, 2}, 4, dtype), idx64},
                        rtol, 0);
    ExpectGpuMatchesCpu(gather, {RandomTensor({7}, 5, dtype), idx64}, rtol, 0);
    ExpectGpuMatchesCpu(gather, {RandomTensor({7, 3}, 6, dtype), none}, rtol,
                        0);
  }
  // Integer params gather too (no gradient).
  ExpectGpuMatchesCpu(gather, {SmallIntegers({10, 3}, DType::kI32, 7), idx32},
                      0, 0);
}

// The embedding gradient: thousands of updates into a few rows (and rows
// wider than one block of columns) give the CPU's bits exactly, on every
// run: the GPU adds each row's updates in index order, as the CPU.
TEST_F(CudaArrayTest, GatherGradientHasTheCpuBitsWithManyRepeatedIndices) {
  std::vector<int64_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 7 + i / 13) % 5;
  const Tensor idx = Tensor::FromVector<int64_t>(ids, {3000});
  const Tensor table = RandomTensor({6, 300}, 1, DType::kF32);
  const Tensor up = RandomTensor({3000, 300}, 2, DType::kF32);
  auto gradient = [&](const Device& d) {
    const Tensor t = CopyTo(table, d);
    GradientTape tape;
    tape.Watch(t);
    absl::StatusOr<Tensor> y = ops::Gather(t, CopyTo(idx, d));
    EXPECT_TRUE(y.ok()) << y.status();
    GradientOptions options;
    options.output_gradient = CopyTo(up, d);
    auto g = tape.Gradient(*y, {t}, options);
    EXPECT_TRUE(g.ok()) << g.status();
    return CopyTo(*(*g)[0], Device::Cpu());
  };
  const Tensor cpu = gradient(Device::Cpu());
  EXPECT_TRUE(testing::AllClose(gradient(kGpu), cpu, 0, 0));
  EXPECT_TRUE(testing::AllClose(gradient(kGpu), cpu, 0, 0));
}

TEST_F(CudaArrayTest, GatherOutOfRangeIsAnErrorOnGpu) {
  Tensor params = CopyTo(RandomTensor({4, 2}, 1), kGpu);
  for (int64_t bad : {4, -1}) {
    Tensor idx = CopyTo(Tensor::FromVector<int64_t>({0, bad}, {2}), kGpu);
    absl::StatusOr<Tensor> y = ops::Gather(params, idx);
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(y.status().message().find("out of range"), std::string::npos)
        << y.status();
  }
  // Indices on another device than params.
  EXPECT_FALSE(ops::Gather(params, Tensor::FromVector<int64_t>({0}, {1})).ok());
}

TEST_F(CudaArrayTest, OneHotMatchesCpu) {
  // -1 and 5 are out of range for depth 5: all-`off` rows.
  const Tensor idx = Tensor::FromVector<int32_t>({0, 4, -1, 2, 5, 2}, {2, 3});
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    SCOPED_TRACE(DTypeName(dtype));
    for (int64_t depth : {5, 1, 0}) {
      ExpectGpuMatchesCpu(
          [dtype, depth](const std::vector<Tensor>& in) {
            return ops::OneHot(in[0], depth, dtype, 3.0, -1.0);
          },
          {idx}, 0, 0);
    }
  }
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) { return ops::OneHot(in[0], 3); },
      {Tensor::FromVector<int64_t>({2, 0, 1, 1}, {4})}, 0, 0);
}

TEST_F(CudaArrayTest, CastMatchesCpuBetweenAllDtypes) {
  const std::vector<DType> all = {DType::kF32, DType::kF64, DType::kI32,
                                  DType::kI64};
  for (DType from : all) {
    for (DType to : all) {
      SCOPED_TRACE(absl::StrCat(DTypeName(from), " -> ", DTypeName(to)));
      ExpectGpuMatchesCpu(
          [to](const std::vector<Tensor>& in) { return ops::Cast(in[0], to); },
          {SmallIntegers({7, 5}, from, 8)}, 0, 0);
    }
  }
  // Fractions truncate toward zero, as static_cast does on the CPU.
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) {
        return ops::Cast(in[0], DType::kI32);
      },
      {RandomTensor({40}, 9, DType::kF64, -3, 3)}, 0, 0);
  // f32 <-> f64 are differentiable: the gradient is cast back.
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) {
        return ops::Cast(in[0], DType::kF64);
      },
      {RandomTensor({3, 4}, 10, DType::kF32)}, 0, 0);
}

// A float with no integer value is the same error on both devices.
TEST_F(CudaArrayTest, CastToIntegerChecksTheRangeAsTheCpuDoes) {
  const Tensor x = Tensor::FromVector<float>(
      {1, 2, std::numeric_limits<float>::quiet_NaN()}, {3});
  for (DType to : {DType::kI32, DType::kI64}) {
    const absl::StatusOr<Tensor> cpu = ops::Cast(x, to);
    const absl::StatusOr<Tensor> gpu = ops::Cast(CopyTo(x, kGpu), to);
    ASSERT_FALSE(cpu.ok());
    ASSERT_FALSE(gpu.ok());
    EXPECT_EQ(gpu.status().code(), cpu.status().code());
    EXPECT_NE(gpu.status().message().find("element 2 is nan"),
              std::string::npos)
        << gpu.status();
  }
}

TEST_F(CudaArrayTest, ArgMaxMatchesCpuIncludingTiesAndNaNs) {
  // Few distinct values: many ties, where the first index must win.
  Tensor ties = SmallIntegers({6, 7, 5}, DType::kF32, 11);
  for (int64_t i = 0; i < ties.num_elements(); ++i) {
    ties.data<float>()[i] = std::floor(ties.data<float>()[i] / 40.0f);
  }
  Tensor nans = RandomTensor({4, 6}, 12, DType::kF64);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  nans.data<double>()[0] = nan;   // Row 0, position 0: stays the winner.
  nans.data<double>()[9] = nan;   // Row 1, position 3: never wins.
  nans.data<double>()[17] = nan;  // Row 2.
  for (int axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(axis);
    ExpectGpuMatchesCpu(
        [axis](const std::vector<Tensor>& in) {
          return ops::ArgMax(in[0], axis);
        },
        {ties}, 0, 0);
  }
  for (int axis : {0, 1}) {
    ExpectGpuMatchesCpu(
        [axis](const std::vector<Tensor>& in) {
          return ops::ArgMax(in[0], axis);
        },
        {nans}, 0, 0);
  }
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) { return ops::ArgMax(in[0], 1); },
      {SmallIntegers({9, 13}, DType::kI32, 13)}, 0, 0);
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) { return ops::ArgMax(in[0], 0); },
      {RandomTensor({3, 0}, 14, DType::kF32)}, 0, 0);
  EXPECT_FALSE(ops::ArgMax(CopyTo(RandomTensor({0, 3}, 15), kGpu), 0).ok());
}

}  // namespace
}  // namespace mirrortrain
