// CUDA kernels against their CPU twins. Labelled `gpu`; skips with the
// reason when no GPU is visible (the kernels are still compiled in CI).
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/variable.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

class CudaOpsTest : public testing::CudaTest {};

TEST_F(CudaOpsTest, UnaryKernelsMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor x = testing::RandomTensor({1000, 37}, 1, dtype, 0.1, 3.0);
    Tensor gx = *x.To(Device::Cuda(0));
    for (auto* fn : {&ops::Neg, &ops::Exp, &ops::Log, &ops::Sqrt, &ops::Square,
                     &ops::Relu, &ops::Sigmoid, &ops::Tanh}) {
      Tensor cpu = *fn(x);
      absl::StatusOr<Tensor> gpu = fn(gx);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_TRUE(testing::AllClose(*gpu->To(Device::Cpu()), cpu, 1e-5, 1e-6));
    }
  }
}

TEST_F(CudaOpsTest, BinaryKernelsMatchCpu) {
  Tensor a = testing::RandomTensor({513, 9}, 2, DType::kF32);
  Tensor b = testing::RandomTensor({513, 9}, 3, DType::kF32, 0.5, 2.0);
  Tensor ga = *a.To(Device::Cuda(0)), gb = *b.To(Device::Cuda(0));
  for (auto* fn : {&ops::Add, &ops::Sub, &ops::Mul, &ops::Div}) {
    absl::StatusOr<Tensor> gpu = fn(ga, gb);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_TRUE(testing::AllClose(*gpu->To(Device::Cpu()), *fn(a, b), 1e-6, 0));
  }
}

TEST_F(CudaOpsTest, MissingGpuIsReported) {
  absl::Status s = cuda::CheckDevice(cuda::DeviceCount());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("visible"), std::string::npos) << s;
}

TEST_F(CudaOpsTest, MatMulOnCublasMatchesCpuForEveryTranspose) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a =
            testing::RandomTensor(ta ? Shape{67, 45} : Shape{45, 67}, 5, dtype);
        Tensor b =
            testing::RandomTensor(tb ? Shape{33, 67} : Shape{67, 33}, 6, dtype);
        Tensor cpu = *ops::MatMul(a, b, ta, tb);
        absl::StatusOr<Tensor> gpu =
            ops::MatMul(*a.To(Device::Cuda(0)), *b.To(Device::Cuda(0)), ta, tb);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        EXPECT_EQ(gpu->device(), Device::Cuda(0));
        EXPECT_TRUE(testing::AllClose(*gpu->To(Device::Cpu()), cpu, 1e-5, 1e-5))
            << "ta=" << ta << " tb=" << tb;
      }
    }
  }
}

}  // namespace
}  // namespace mirrortrain

namespace mirrortrain {
namespace {

TEST_F(CudaOpsTest, VariableAssignAddAndSubOnGpuMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor init = testing::RandomTensor({33, 7}, 11, dtype);
    const Tensor delta = testing::RandomTensor({33, 7}, 12, dtype);
    Variable cpu = *Variable::Create("v", init);
    Variable gpu = *Variable::Create("v", *init.To(Device::Cuda(0)));
    ASSERT_TRUE(cpu.AssignAdd(delta).ok());
    ASSERT_TRUE(cpu.AssignSub(testing::RandomTensor({33, 7}, 13, dtype)).ok());
    absl::Status s = gpu.AssignAdd(*delta.To(Device::Cuda(0)));
    ASSERT_TRUE(s.ok()) << s;
    s = gpu.AssignSub(
        *testing::RandomTensor({33, 7}, 13, dtype).To(Device::Cuda(0)));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(gpu.value().device(), Device::Cuda(0));
    EXPECT_TRUE(
        testing::AllClose(*gpu.value().To(Device::Cpu()), cpu.value(), 0, 0));
    // A host delta for a GPU variable is an error, not a crash.
    EXPECT_FALSE(gpu.AssignAdd(delta).ok());
  }
}

}  // namespace
}  // namespace mirrortrain
