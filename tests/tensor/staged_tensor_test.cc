// StagedTensor: the host writes, kernels read. On a CPU both sides are one
// tensor; on a GPU each Upload() lands in the device tensor in stream
// order, and rewriting the host side after an Upload() never changes what
// an earlier upload delivered.
#include "tensor/staged_tensor.h"

#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/ops/math_ops.h"
#include "tests/tensor/cuda_test_util.h"

namespace mirrortrain {
namespace {

TEST(StagedTensorTest, OnTheCpuTheHostIsTheDeviceTensor) {
  absl::StatusOr<StagedTensor> t =
      StagedTensor::Create(DType::kF32, {2, 3}, Device::Cpu());
  ASSERT_TRUE(t.ok()) << t.status();
  const Tensor host = *t->Host();
  EXPECT_TRUE(host.SharesBufferWith(t->device()));
  EXPECT_EQ(t->device().shape(), (Shape{2, 3}));
  host.data<float>()[4] = 7;
  ASSERT_TRUE(t->Upload().ok());
  EXPECT_EQ(t->device().ToVector<float>()[4], 7);
  // Moving keeps the buffer.
  const void* data = t->device().raw_data();
  StagedTensor moved = *std::move(t);
  EXPECT_EQ(moved.device().raw_data(), data);
}

class StagedTensorGpuTest : public testing::CudaTest {};

// Each upload is copied before the kernel that follows it reads it, while
// the host moves on to the next values without waiting for that kernel.
TEST_F(StagedTensorGpuTest, EachUploadReachesTheKernelsAfterIt) {
  absl::StatusOr<StagedTensor> t =
      StagedTensor::Create(DType::kF32, {1000}, Device::Cuda(0));
  ASSERT_TRUE(t.ok()) << t.status();
  const Tensor ones =
      *Tensor::HostFull(DType::kF32, {1000}, 1.0).To(Device::Cuda(0));
  std::vector<Tensor> sums;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Tensor> host = t->Host();
    ASSERT_TRUE(host.ok()) << host.status();
    for (int k = 0; k < 1000; ++k) host->data<float>()[k] = 10.0f * i + k;
    ASSERT_TRUE(t->Upload().ok());
    absl::StatusOr<Tensor> sum = ops::Add(t->device(), ones);
    ASSERT_TRUE(sum.ok()) << sum.status();
    sums.push_back(*std::move(sum));
  }
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> got = sums[i].To(Device::Cpu())->ToVector<float>();
    EXPECT_EQ(got[0], 10.0f * i + 1);
    EXPECT_EQ(got[999], 10.0f * i + 1000);
  }
}

}  // namespace
}  // namespace mirrortrain
