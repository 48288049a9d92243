// Helpers for tests that run ops on GPU tensors and compare them with the
// CPU kernels (the oracle). Header-only: each GPU test binary includes it.
#ifndef MIRRORTRAIN_TESTS_TENSOR_CUDA_TEST_UTIL_H_
#define MIRRORTRAIN_TESTS_TENSOR_CUDA_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/tensor.h"
#include "tests/test_util.h"

namespace mirrortrain::testing {

// Skips, with the reason, unless this binary has the CUDA backend and a GPU
// is visible.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::Built()) GTEST_SKIP() << "built without CUDA";
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  }
};

// The f32 tensor `t` moved to the nearest multiple of `step`, plus
// `offset`, on the host: values whose products and sums are exact in f32
// (and, on a coarse enough grid, in bf16 and tf32).
inline Tensor OnGrid(const Tensor& t, float step, float offset = 0) {
  Tensor out = Tensor::HostEmpty(DType::kF32, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    out.data<float>()[i] =
        std::round(t.data<float>()[i] / step) * step + offset;
  }
  return out;
}

// A copy on `device`; an undefined tensor (and a test failure) on error.
inline Tensor CopyTo(const Tensor& t, Device device) {
  absl::StatusOr<Tensor> r = t.To(device);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor();
}

// Runs f on host `inputs` and on their copies on gpu:0 and expects the GPU
// output on gpu:0 and equal to the CPU one within rtol/atol; with
// `gradients` (for floating outputs), the same for the tape gradient of
// sum(f(x) * w), w random, with respect to every floating input.
inline void ExpectGpuMatchesCpu(const TensorFn& f,
                                const std::vector<Tensor>& inputs, double rtol,
                                double atol, bool gradients = true) {
  const Device gpu = Device::Cuda(0);
  absl::StatusOr<Tensor> probe = f(inputs);
  ASSERT_TRUE(probe.ok()) << probe.status();
  gradients = gradients && IsFloating(probe->dtype());
  Tensor w;
  if (gradients) w = RandomTensor(probe->shape(), 77, probe->dtype(), 0.5, 1.5);
  absl::StatusOr<OpRun> cpu = RunOp(f, inputs, w, gradients);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& in : inputs) gpu_inputs.push_back(CopyTo(in, gpu));
  absl::StatusOr<OpRun> on_gpu =
      RunOp(f, gpu_inputs, gradients ? CopyTo(w, gpu) : Tensor(), gradients);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  ASSERT_EQ(on_gpu->y.device(), gpu);
  EXPECT_EQ(on_gpu->y.dtype(), cpu->y.dtype());
  EXPECT_TRUE(AllClose(CopyTo(on_gpu->y, Device::Cpu()), cpu->y, rtol, atol))
      << "forward";
  ASSERT_EQ(on_gpu->grads.size(), cpu->grads.size());
  for (size_t i = 0; i < cpu->grads.size(); ++i) {
    ASSERT_EQ(on_gpu->grads[i].has_value(), cpu->grads[i].has_value()) << i;
    if (!cpu->grads[i].has_value()) continue;
    EXPECT_EQ(on_gpu->grads[i]->device(), gpu) << "gradient " << i;
    EXPECT_TRUE(AllClose(CopyTo(*on_gpu->grads[i], Device::Cpu()),
                         *cpu->grads[i], rtol, atol))
        << "gradient " << i;
  }
}

// f32 values for bfloat16 rounding: random ones after the hard cases
// (ties to even both ways, overflow, denormals, signed zero and infinity,
// NaN), on the host.
inline Tensor Bf16RoundingCases(int64_t n, uint64_t seed) {
  Tensor x = RandomTensor({n}, seed, DType::kF32, -1e3, 1e3);
  const std::vector<float> edges = {1.0f + 0x1p-8f,
                                    1.0f + 3 * 0x1p-8f,
                                    -(1.0f + 0x1p-8f),
                                    std::numeric_limits<float>::max(),
                                    0x1p-149f,
                                    0x1p-133f,
                                    -0.0f,
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    std::nanf("")};
  for (size_t i = 0; i < edges.size() && i < static_cast<size_t>(n); ++i) {
    x.data<float>()[i] = edges[i];
  }
  return x;
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TENSOR_CUDA_TEST_UTIL_H_
