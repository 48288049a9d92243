// The CUDA entry points of tensor/cuda/cuda_kernel.h: a CUDA build defines
// every declared kernel, a CPU-only build none (and needs no stubs).
#include "tensor/cuda/cuda_kernel.h"

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/cuda_training.h"

namespace mirrortrain::cuda {
namespace {

TEST(CudaKernelTest, EveryDeclaredKernelIsDefinedExactlyWhenCudaIsBuilt) {
  const auto entries = CudaKernelRegistry::Global().Entries();
  EXPECT_GE(entries.size(), 28u);
  for (const CudaKernelInfo* kernel : entries) {
    EXPECT_EQ(kernel->defined(), Built()) << kernel->name;
  }
}

TEST(CudaKernelTest, WithoutCudaACallSaysWhichKernelIsMissing) {
  if (Built()) GTEST_SKIP() << "CUDA is built: every kernel is defined";
  const absl::Status s = Fill(DType::kF32, nullptr, 0.0, 0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("CUDA kernel Fill"), std::string::npos) << s;
}

}  // namespace
}  // namespace mirrortrain::cuda
