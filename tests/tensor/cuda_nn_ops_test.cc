// nn ops (BiasAdd, Softmax, LogSoftmax, SparseSoftmaxCrossEntropyWithLogits,
// Dropout) and the fused BiasAddRelu on GPU tensors, forward and gradient,
// against the CPU kernels. Labelled `gpu`; skips with the reason when no
// GPU is visible.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::AllClose;
using testing::CopyTo;
using testing::CudaTest;
using testing::ExpectGpuMatchesCpu;
using testing::RandomTensor;

const Device kGpu = Device::Cuda(0);

class CudaNnOpsTest : public CudaTest {};

// Shapes [..., cols] for the bias ops: odd sizes, empty ones, more rows
// than one column-sum chunk (64 to 512 rows: column_sum::ChunkRows), more
// chunks than pass 2 has lanes (32: 65 chunks of 64 rows for 4099 rows),
// and more columns than one tile (32), with a partial last tile.
const std::vector<Shape>& BiasShapes() {
  static const std::vector<Shape> shapes = {
      {5, 7},     {3, 4, 5, 6}, {1, 1},    {0, 4},     {4, 0},
      {1031, 33}, {2000, 3},    {4099, 3}, {2, 3, 70}, {300, 1030}};
  return shapes;
}

Tensor Labels(int64_t batch, int64_t classes, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::HostEmpty(dtype, {batch});
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t v = classes > 0 ? static_cast<int64_t>(rng() % classes) : 0;
    if (dtype == DType::kI32) {
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
    } else {
      t.data<int64_t>()[i] = v;
    }
  }
  return t;
}

TEST_F(CudaNnOpsTest, BiasAddMatchesCpu) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const Shape& shape : BiasShapes()) {
      SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " ", DTypeName(dtype)));
      ExpectGpuMatchesCpu(
          [](const std::vector<Tensor>& in) {
            return ops::BiasAdd(in[0], in[1]);
          },
          {RandomTensor(shape, ++seed, dtype),
           RandomTensor({shape.back()}, ++seed, dtype)},
          1e-5, 1e-6);
    }
  }
}

// The column sums' other chunk sizes (column_sum::ChunkRows; BiasShapes
// all get 64-row chunks): 128 rows for [131073, 1] (1025 chunks, 32 or 33
// per pass-2 lane), 256 for [1024, 8192], 512 for [600, 16384] (a short
// last chunk). In f64, where the CPU's sequential sums and the GPU's
// chunked ones agree to rounding.
TEST_F(CudaNnOpsTest, BiasGradientMatchesCpuAtEveryChunkSize) {
  uint64_t seed = 50;
  for (const Shape& shape :
       std::vector<Shape>{{131073, 1}, {1024, 8192}, {600, 16384}}) {
    SCOPED_TRACE(ShapeToString(shape));
    ExpectGpuMatchesCpu(
        [](const std::vector<Tensor>& in) {
          return ops::BiasAdd(in[0], in[1]);
        },
        {RandomTensor(shape, ++seed, DType::kF64),
         RandomTensor({shape.back()}, ++seed, DType::kF64)},
        1e-12, 1e-12);
  }
}

TEST_F(CudaNnOpsTest, BiasAddReluMatchesCpu) {
  uint64_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const Shape& shape : BiasShapes()) {
      SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " ", DTypeName(dtype)));
      ExpectGpuMatchesCpu(
          [](const std::vector<Tensor>& in) {
            return ops::BiasAddRelu(in[0], in[1]);
          },
          {RandomTensor(shape, ++seed, dtype),
           RandomTensor({shape.back()}, ++seed, dtype)},
          1e-5, 1e-6);
    }
  }
}

// Only x watched: the backward masks dy without a bias sum.
TEST_F(CudaNnOpsTest, BiasAddReluInputGradientAlone) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor x = RandomTensor({37, 11}, 5, dtype);
    const Tensor b = RandomTensor({11}, 6, dtype);
    const Tensor w = RandomTensor({37, 11}, 7, dtype);
    auto grad = [&](Device device) -> Tensor {
      Tensor xd = CopyTo(x, device), bd = CopyTo(b, device);
      GradientTape tape;
      tape.Watch(xd);
      absl::StatusOr<Tensor> y = ops::BiasAddRelu(xd, bd);
      EXPECT_TRUE(y.ok()) << y.status();
      GradientOptions options;
      options.output_gradient = CopyTo(w, device);
      auto g = tape.Gradient(*y, {xd}, options);
      EXPECT_TRUE(g.ok()) << g.status();
      return CopyTo(*(*g)[0], Device::Cpu());
    };
    EXPECT_TRUE(AllClose(grad(kGpu), grad(Device::Cpu()), 0, 0));
  }
}

TEST_F(CudaNnOpsTest, SoftmaxAndLogSoftmaxMatchCpu) {
  const std::vector<Shape> shapes = {{4, 10}, {3, 5, 7}, {1, 1},    {0, 5},
                                     {5, 0},  {37, 100}, {6, 1000}, {7}};
  uint64_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const Shape& shape : shapes) {
      for (double scale : {1.0, 20.0}) {
        SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " ", DTypeName(dtype),
                                  " scale ", scale));
        const Tensor x = RandomTensor(shape, ++seed, dtype, -scale, scale);
        // The GPU sums exp() in double, the CPU in T: f32 results differ by
        // an ulp or two of the values they are computed from (softmax and
        // its gradient: of 1, 1.2e-7; log-softmax: of the log-sum-exp, up to
        // ~1.9e-6 at scale 20), hence atol at ~8 such ulps. A wrong kernel
        // is off by O(1e-2) or more.
        const bool f32 = dtype == DType::kF32;
        ExpectGpuMatchesCpu(
            [](const std::vector<Tensor>& in) { return ops::Softmax(in[0]); },
            {x}, 1e-5, f32 ? 1e-6 : 1e-7);
        ExpectGpuMatchesCpu(
            [](const std::vector<Tensor>& in) {
              return ops::LogSoftmax(in[0]);
            },
            {x}, 1e-5, f32 ? 1.6e-5 : 1e-6);
      }
    }
  }
}

TEST_F(CudaNnOpsTest, SparseSoftmaxCrossEntropyMatchesCpu) {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {8, 10}, {1, 1}, {0, 5}, {300, 37}, {5, 1000}, {33, 2}};
  uint64_t seed = 300;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (DType label_dtype : {DType::kI32, DType::kI64}) {
      for (auto [batch, classes] : sizes) {
        SCOPED_TRACE(::testing::Message()
                     << batch << "x" << classes << " " << DTypeName(dtype)
                     << " labels " << DTypeName(label_dtype));
        ExpectGpuMatchesCpu(
            [](const std::vector<Tensor>& in) {
              return ops::SparseSoftmaxCrossEntropyWithLogits(in[0], in[1]);
            },
            {RandomTensor({batch, classes}, ++seed, dtype, -5, 5),
             Labels(batch, classes, label_dtype, ++seed)},
            1e-5, 1e-6);
      }
    }
  }
}

// Out-of-range labels: the CPU kernel fails naming the first bad row; the
// GPU kernel, like TensorFlow's, gives NaN loss and gradient rows for them
// and the exact values elsewhere.
TEST_F(CudaNnOpsTest, CrossEntropyLabelOutOfRangeIsNanOnGpu) {
  const Tensor logits_cpu = RandomTensor({6, 10}, 1, DType::kF32);
  const Tensor logits = CopyTo(logits_cpu, kGpu);
  for (int64_t bad : {10, -1}) {
    for (DType label_dtype : {DType::kI32, DType::kI64}) {
      SCOPED_TRACE(::testing::Message()
                   << "label " << bad << " " << DTypeName(label_dtype));
      const Tensor good_labels = Labels(6, 10, label_dtype, 2);
      Tensor labels = *good_labels.Clone();
      for (int64_t row : {3, 5}) {
        if (label_dtype == DType::kI32) {
          labels.data<int32_t>()[row] = static_cast<int32_t>(bad);
        } else {
          labels.data<int64_t>()[row] = bad;
        }
      }
      absl::StatusOr<Tensor> cpu =
          ops::SparseSoftmaxCrossEntropyWithLogits(logits_cpu, labels);
      ASSERT_FALSE(cpu.ok());
      EXPECT_NE(cpu.status().message().find(absl::StrCat(
                    "label ", bad, " in row 3 is outside [0, 10)")),
                absl::string_view::npos)
          << cpu.status();
      absl::StatusOr<Tensor> reference =
          ops::SparseSoftmaxCrossEntropyWithLogits(logits_cpu, good_labels);
      ASSERT_TRUE(reference.ok()) << reference.status();

      Tensor watched = *logits.Clone();
      GradientTape tape;
      tape.Watch(watched);
      absl::StatusOr<Tensor> gpu = ops::SparseSoftmaxCrossEntropyWithLogits(
          watched, CopyTo(labels, kGpu));
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      absl::StatusOr<Tensor> total = ops::ReduceSum(*gpu);
      ASSERT_TRUE(total.ok()) << total.status();
      auto grads = tape.Gradient(*total, {watched});
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_TRUE((*grads)[0].has_value());
      const Tensor loss = CopyTo(*gpu, Device::Cpu());
      const Tensor grad = CopyTo(*(*grads)[0], Device::Cpu());
      for (int64_t row = 0; row < 6; ++row) {
        const bool is_bad = row == 3 || row == 5;
        if (is_bad) {
          EXPECT_TRUE(std::isnan(loss.ScalarAt(row))) << "row " << row;
        } else {
          EXPECT_NEAR(loss.ScalarAt(row), reference->ScalarAt(row), 1e-5)
              << "row " << row;
        }
        for (int64_t c = 0; c < 10; ++c) {
          EXPECT_EQ(std::isnan(grad.ScalarAt(row * 10 + c)), is_bad)
              << "row " << row << " class " << c;
        }
      }
    }
  }
}

TEST_F(CudaNnOpsTest, CrossEntropyLabelsOnAnotherDeviceAreAnError) {
  const Tensor logits = CopyTo(RandomTensor({2, 3}, 1, DType::kF32), kGpu);
  EXPECT_FALSE(ops::SparseSoftmaxCrossEntropyWithLogits(
                   logits, Tensor::FromVector<int32_t>({0, 1}, {2}))
                   .ok());
}

// The mask is a pure function of (seed, index + offset): the GPU's must be
// the CPU's bit for bit, and so outputs and gradients are equal exactly.
TEST_F(CudaNnOpsTest, DropoutMatchesCpuExactly) {
  const std::vector<Shape> shapes = {{0}, {1}, {1000, 37}, {3, 5, 7}};
  uint64_t seed = 400;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const Shape& shape : shapes) {
      for (double rate : {0.0, 0.4, 0.9}) {
        for (int64_t offset : {int64_t{0}, int64_t{12345}}) {
          SCOPED_TRACE(::testing::Message()
                       << ShapeToString(shape) << " " << DTypeName(dtype)
                       << " rate " << rate << " offset " << offset);
          const uint64_t op_seed = ++seed;
          ExpectGpuMatchesCpu(
              [=](const std::vector<Tensor>& in) {
                return ops::Dropout(in[0], rate, op_seed, offset);
              },
              {RandomTensor(shape, ++seed, dtype)}, 0, 0);
        }
      }
    }
  }
}

// A step's seed in device memory (what a replayed CUDA graph reads) draws
// the CPU's mask.
TEST_F(CudaNnOpsTest, DropoutReadsItsStepSeedOnTheDevice) {
  const Tensor x = RandomTensor({999, 7}, 5, DType::kF32);
  for (uint64_t step : {uint64_t{3}, ~uint64_t{0} - 5}) {
    const Tensor seed =
        Tensor::FromVector<int64_t>({static_cast<int64_t>(step)}, {1});
    const Tensor cpu = *ops::Dropout(x, 0.3, seed, 11, 0x55, 7);
    absl::StatusOr<Tensor> gpu = ops::Dropout(
        *x.To(Device::Cuda(0)), 0.3, *seed.To(Device::Cuda(0)), 11, 0x55, 7);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ(cpu.ToVector<float>(), gpu->To(Device::Cpu())->ToVector<float>());
  }
}

}  // namespace
}  // namespace mirrortrain
