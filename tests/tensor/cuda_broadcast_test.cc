// Broadcasting binary arithmetic on GPU tensors against the CPU kernels.
// Labelled `gpu`; skips with the reason when no GPU is visible.
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops/math_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;
using testing::RandomTensor;

struct ShapePair {
  Shape a, b;
};

// Stretching on either side, rank differences, scalars, empty and size-1
// dimensions, odd sizes, and a rank-10 pair that collapses to rank 2.
const std::vector<ShapePair>& Pairs() {
  static const auto* pairs = new std::vector<ShapePair>{
      {{5, 7}, {7}},
      {{5, 7}, {5, 1}},
      {{7}, {5, 7}},
      {{3, 1, 4}, {1, 5, 1}},
      {{33, 1, 17}, {33, 9, 1}},
      {{2, 3, 4, 5}, {3, 1, 5}},
      {{}, {4, 3}},
      {{6}, {}},
      {{1}, {1, 1, 1}},
      {{0, 3}, {3}},
      {{4, 0}, {4, 1}},
      {{2, 1, 3}, {2, 0, 1}},
      {{2, 2, 2, 2, 2, 2, 2, 2, 2, 3}, {3}},
  };
  return *pairs;
}

using BinaryFn = absl::StatusOr<Tensor> (*)(const Tensor&, const Tensor&);

class CudaBroadcastTest : public CudaTest {};

TEST_F(CudaBroadcastTest, ArithmeticAndGradientsMatchCpu) {
  const std::vector<std::pair<const char*, BinaryFn>> fns = {
      {"Add", &ops::Add},
      {"Sub", &ops::Sub},
      {"Mul", &ops::Mul},
      {"Div", &ops::Div}};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const double rtol = dtype == DType::kF32 ? 1e-5 : 1e-12;
    uint64_t seed = 10;
    for (const ShapePair& p : Pairs()) {
      // b away from 0 so Div and its gradient stay well conditioned.
      Tensor a = RandomTensor(p.a, ++seed, dtype);
      Tensor b = RandomTensor(p.b, ++seed, dtype, 0.5, 2.0);
      for (const auto& [name, fn] : fns) {
        SCOPED_TRACE(::testing::Message()
                     << name << " " << ShapeToString(p.a) << " "
                     << ShapeToString(p.b) << " " << DTypeName(dtype));
        ExpectGpuMatchesCpu(
            [fn](const std::vector<Tensor>& x) { return fn(x[0], x[1]); },
            {a, b}, rtol, 1e-6, /*gradients=*/true);
      }
    }
  }
}

TEST_F(CudaBroadcastTest, ScaleByHostScalarRunsOnGpu) {
  Tensor x = RandomTensor({17, 3}, 3, DType::kF32);
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) { return ops::Scale(in[0], -2.5); },
      {x}, 1e-6, 0);
}

TEST_F(CudaBroadcastTest, TooManyUnmergeableDimensionsIsAnError) {
  // Alternating stretched dimensions cannot merge: 12 remain (> 8).
  Shape sa, sb;
  for (int i = 0; i < 12; ++i) {
    sa.push_back(i % 2 == 0 ? 2 : 1);
    sb.push_back(i % 2 == 0 ? 1 : 2);
  }
  Tensor a = testing::CopyTo(RandomTensor(sa, 1, DType::kF32), Device::Cuda(0));
  Tensor b = testing::CopyTo(RandomTensor(sb, 2, DType::kF32), Device::Cuda(0));
  absl::StatusOr<Tensor> y = ops::Add(a, b);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented) << y.status();
  EXPECT_NE(y.status().message().find("Add"), std::string::npos) << y.status();
}

}  // namespace
}  // namespace mirrortrain
