// Clipping ops on GPU tensors against the CPU kernels. Labelled `gpu`;
// skips with the reason when no GPU is visible.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/math_ops.h"
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

class CudaClipOpsTest : public CudaTest {};

double HostDouble(const Tensor& scalar) {
  return CopyTo(scalar, Device::Cpu()).ToVector<double>()[0];
}

// f32 gradients on one GPU: the norm and the scale are computed there, with
// the host's arithmetic (so bitwise what a host-read norm and Scale give),
// and nothing waits on the host: the clip records into a CUDA graph.
TEST_F(CudaClipOpsTest, ClipsOnTheDeviceAsTheHostWouldAndRecords) {
  std::vector<Tensor> grads;
  for (int i = 0; i < 3; ++i) {
    grads.push_back(
        CopyTo(RandomTensor({50 + i, 7}, 20 + i, DType::kF32), kGpu));
  }
  for (double clip : {0.5, 1e3}) {
    SCOPED_TRACE(clip);
    const double norm = *ops::GlobalNorm(grads);
    auto clipped = ops::ClipByGlobalNorm(grads, clip);
    ASSERT_TRUE(clipped.ok()) << clipped.status();
    EXPECT_EQ(clipped->global_norm.device(), kGpu);
    EXPECT_EQ(HostDouble(clipped->global_norm), norm);
    for (size_t i = 0; i < grads.size(); ++i) {
      const Tensor want = *ops::Scale(grads[i], clip / std::max(norm, clip));
      EXPECT_EQ(CopyTo(clipped->tensors[i], Device::Cpu()).ToVector<float>(),
                CopyTo(want, Device::Cpu()).ToVector<float>());
    }
    const double own = *ops::GlobalNorm({grads[0]});
    const Tensor want = *ops::Scale(grads[0], clip / std::max(own, clip));
    EXPECT_EQ(CopyTo(*ops::ClipByNorm(grads[0], clip), Device::Cpu())
                  .ToVector<float>(),
              CopyTo(want, Device::Cpu()).ToVector<float>());
  }
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  cuda::ScopedCurrentStream current(stream->handle());
  cuda::ScopedCapture capture(0);
  ASSERT_TRUE(capture.Begin().ok());
  auto recorded = ops::ClipByGlobalNorm(grads, 0.5);
  auto by_norm = ops::ClipByNorm(grads[1], 0.5);
  absl::StatusOr<cuda::CudaGraph> graph = capture.End();
  EXPECT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_TRUE(by_norm.ok()) << by_norm.status();
  EXPECT_TRUE(graph.ok()) << graph.status();
}

TEST_F(CudaClipOpsTest, ClipByValueAndGradientMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor x = RandomTensor({13, 29}, 1, dtype, -2, 2);
    // The bounds themselves pass the gradient; a NaN passes through forward
    // and gets none.
    if (dtype == DType::kF32) {
      x.data<float>()[0] = -0.5f;
      x.data<float>()[1] = 0.75f;
      x.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
    } else {
      x.data<double>()[0] = -0.5;
      x.data<double>()[1] = 0.75;
      x.data<double>()[2] = std::numeric_limits<double>::quiet_NaN();
    }
    ExpectGpuMatchesCpu(
        [](const std::vector<Tensor>& in) {
          return ops::ClipByValue(in[0], -0.5, 0.75);
        },
        {x}, 0, 0);
  }
  ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) {
        return ops::ClipByValue(in[0], 0, 1);
      },
      {RandomTensor({0, 4}, 2, DType::kF32)}, 0, 0);
  EXPECT_FALSE(ops::ClipByValue(CopyTo(RandomTensor({2}, 3), kGpu), 1, 0).ok());
}

TEST_F(CudaClipOpsTest, GlobalNormMatchesCpu) {
  std::vector<Tensor> cpu = {
      RandomTensor({300, 7}, 4, DType::kF32), RandomTensor({5}, 5, DType::kF64),
      RandomTensor({0}, 6, DType::kF32), RandomTensor({}, 7, DType::kF64)};
  std::vector<Tensor> gpu;
  for (const Tensor& t : cpu) gpu.push_back(CopyTo(t, kGpu));
  absl::StatusOr<double> expected = ops::GlobalNorm(cpu);
  absl::StatusOr<double> actual = ops::GlobalNorm(gpu);
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_NEAR(*actual, *expected, 1e-12 * *expected);
}

TEST_F(CudaClipOpsTest, ClipByNormAndGlobalNormMatchCpu) {
  for (double clip : {0.5, 1e3}) {  // Clipping and not clipping.
    SCOPED_TRACE(clip);
    ExpectGpuMatchesCpu(
        [clip](const std::vector<Tensor>& in) {
          return ops::ClipByNorm(in[0], clip);
        },
        {RandomTensor({17, 3}, 8, DType::kF32)}, 1e-5, 0,
        /*gradients=*/false);
    std::vector<Tensor> cpu = {RandomTensor({40, 9}, 9, DType::kF32),
                               RandomTensor({9}, 10, DType::kF64)};
    std::vector<Tensor> gpu = {CopyTo(cpu[0], kGpu), CopyTo(cpu[1], kGpu)};
    auto expected = ops::ClipByGlobalNorm(cpu, clip);
    auto actual = ops::ClipByGlobalNorm(gpu, clip);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const double want = expected->global_norm.ToVector<double>()[0];
    EXPECT_NEAR(HostDouble(actual->global_norm), want, 1e-12 * want);
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(actual->tensors[i].device(), kGpu);
      EXPECT_TRUE(AllClose(CopyTo(actual->tensors[i], Device::Cpu()),
                           expected->tensors[i], 1e-5, 0))
          << i;
    }
  }
}

TEST_F(CudaClipOpsTest, NonFiniteGlobalNormMakesEverythingNaNOnGpu) {
  Tensor t = Tensor::FromVector<float>({1, INFINITY}, {2});
  auto r = ops::ClipByGlobalNorm({CopyTo(t, kGpu)}, 5.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(std::isfinite(HostDouble(r->global_norm)));
  for (float v : CopyTo(r->tensors[0], Device::Cpu()).ToVector<float>()) {
    EXPECT_TRUE(std::isnan(v));
  }
}

}  // namespace
}  // namespace mirrortrain
