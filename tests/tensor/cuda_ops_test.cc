// CUDA kernels against their CPU twins. Labelled `gpu`; skips with the
// reason when no GPU is visible (the kernels are still compiled in CI).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/bfloat16.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"
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

// Forward and tape gradients (ReluGrad, SigmoidGrad, TanhGrad, ...) over
// inputs of both signs, in f32 and f64.
TEST_F(CudaOpsTest, UnaryOpsAndGradientsMatchCpuOverBothSigns) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = testing::RandomTensor({300, 7}, 21, dtype, -3.0, 3.0);
    // CUDA's expf/tanhf are within 2 ulps and nvcc contracts 1 - y*y into
    // an FMA: f32 gradients such as g * (1 - y^2) differ by a few 1e-7
    // absolute. f64 must agree to f64 precision (an f32 slip would not).
    const bool f32 = dtype == DType::kF32;
    for (auto* fn : {&ops::Neg, &ops::Exp, &ops::Square, &ops::Relu,
                     &ops::Sigmoid, &ops::Tanh}) {
      testing::ExpectGpuMatchesCpu(
          [fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {x},
          f32 ? 1e-5 : 1e-12, f32 ? 1e-6 : 1e-14);
    }
  }
}

// Relu at the edges: negative zero, tiny negatives, NaN.
TEST_F(CudaOpsTest, ReluOfSpecialValuesMatchesCpu) {
  const Tensor x = Tensor::FromVector<float>(
      {-1.0f, -0.0f, 0.0f, 2.5f, std::nanf(""), -1e-30f, 1e-30f}, {7});
  absl::StatusOr<Tensor> gpu = ops::Relu(*x.To(Device::Cuda(0)));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const Tensor host = *gpu->To(Device::Cpu());
  const Tensor cpu = *ops::Relu(x);
  EXPECT_TRUE(testing::AllClose(host, cpu, 0, 0));  // NaN matches NaN.
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(std::signbit(host.data<float>()[i]),
              std::signbit(cpu.data<float>()[i]))
        << "element " << i;
  }
}

// The logistic's far tail. Silu's logistic is 0 below -88.3 on both sides
// (between -88.72 and -88.3 the GPU's expf has not overflowed yet and gave
// subnormals where the CPU's saturating exp gave 0): bitwise. Sigmoid
// divides by 1 + exp(-x) on both sides: 0 where expf overflows, subnormals
// in that band, whose last bit follows each side's expf (2 ulp of expf move
// the quotient by under one subnormal step).
TEST_F(CudaOpsTest, LogisticTailMatchesCpu) {
  const Tensor x = Tensor::FromVector<float>(
      {-1e30f, -100.0f, -88.7f, -88.5f, -88.31f}, {5});
  const Tensor gx = *x.To(Device::Cuda(0));
  absl::StatusOr<Tensor> silu = ops::Silu(gx);
  ASSERT_TRUE(silu.ok()) << silu.status();
  EXPECT_TRUE(testing::SameBits(*silu->To(Device::Cpu()), *ops::Silu(x)));
  absl::StatusOr<Tensor> sigmoid = ops::Sigmoid(gx);
  ASSERT_TRUE(sigmoid.ok()) << sigmoid.status();
  const Tensor got = *sigmoid->To(Device::Cpu());
  const Tensor want = *ops::Sigmoid(x);
  EXPECT_EQ(got.data<float>()[0], 0.0f);
  EXPECT_EQ(got.data<float>()[1], 0.0f);
  EXPECT_TRUE(testing::AllClose(got, want, 0, 0x1p-148));
}

// Keras's masks compare on the device (masking layers, mask_zero): 1 where
// the values differ, NaN against anything included, as on the CPU (ids
// are compared as floats).
TEST_F(CudaOpsTest, NotEqualMatchesCpuBitwise) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Tensor> cases = {
      Tensor::FromVector<float>({0, 1.5f, -0.0f, nan, 0.25f}, {5}),
      Tensor::FromVector<double>({0, 2, 0.25, -1}, {2, 2})};
  for (const Tensor& a : cases) {
    SCOPED_TRACE(a.DebugString());
    for (double value : {0.0, 0.25}) {
      const Tensor v = *ops::internal::ScalarLike(a, value);
      const Tensor want =
          *ops::internal::BinaryKernel("NotEqual", BinaryKind::kNotEqual, a, v);
      const Tensor ga = *a.To(Device::Cuda(0));
      absl::StatusOr<Tensor> got =
          ops::internal::BinaryKernel("NotEqual", BinaryKind::kNotEqual, ga,
                                      *ops::internal::ScalarLike(ga, value));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(testing::SameBits(*got->To(Device::Cpu()), want));
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

TEST_F(CudaOpsTest, BinaryOpsAndGradientsMatchCpuInBothDtypes) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor a = testing::RandomTensor({129, 5}, 22, dtype);
    const Tensor b = testing::RandomTensor({129, 5}, 23, dtype, 0.5, 2.0);
    for (auto* fn : {&ops::Add, &ops::Sub, &ops::Mul, &ops::Div}) {
      testing::ExpectGpuMatchesCpu(
          [fn](const std::vector<Tensor>& in) { return fn(in[0], in[1]); },
          {a, b}, dtype == DType::kF32 ? 1e-5 : 1e-12,
          dtype == DType::kF32 ? 1e-7 : 1e-14);
    }
  }
}

TEST_F(CudaOpsTest, MissingGpuIsReported) {
  absl::Status s = cuda::CheckDevice(cuda::DeviceCount());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("visible"), std::string::npos) << s;
}

// The start-up's contexts (cuda_backend.h): a GPU listed twice (logical
// replicas) is started once more, harmlessly; a missing one is the
// runtime's error, after the libraries' load has been waited for.
TEST_F(CudaOpsTest, StartDevicesCreatesContextsAndReportsMissingGpus) {
  EXPECT_TRUE(cuda::StartDevices({0, 0}).ok());
  const absl::Status s = cuda::StartDevices({0, cuda::DeviceCount()});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(
                absl::StrCat("gpu:", cuda::DeviceCount(), " requested but")),
            std::string::npos)
      << s;
  // The GPU still works.
  const Tensor x = Tensor::FromVector<float>({1, 2, 3}, {3});
  EXPECT_EQ(x.To(Device::Cuda(0))->To(Device::Cpu())->ToVector<float>(),
            x.ToVector<float>());
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

// A long sum with a small output (a first conv layer's filter gradient:
// 20000 terms for 25x32 outputs), for every transpose, in f32, f64 and
// bf16 (against the CPU's emulation), alone and accumulated into C (beta
// 1, as conv chunks add up their filter gradients), scaled by alpha.
TEST_F(CudaOpsTest, LongSumsWithSmallOutputsMatchCpu) {
  constexpr int64_t kTerms = 20000;
  for (const auto& [dtype, precision] :
       std::vector<std::pair<DType, MatMulPrecision>>{
           {DType::kF32, MatMulPrecision::kFp32},
           {DType::kF64, MatMulPrecision::kFp32},
           {DType::kF32, MatMulPrecision::kBf16}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " precision ",
                                  static_cast<int>(precision), " ta=", ta,
                                  " tb=", tb));
        const Tensor a = testing::RandomTensor(
            ta ? Shape{kTerms, 25} : Shape{25, kTerms}, 81, dtype);
        const Tensor b = testing::RandomTensor(
            tb ? Shape{32, kTerms} : Shape{kTerms, 32}, 82, dtype);
        const Tensor c0 = testing::RandomTensor({25, 32}, 83, dtype);
        SetMatMulPrecision(precision);
        for (const double beta : {0.0, 1.0}) {
          Tensor cpu = *c0.To(Device::Cpu()), gpu = *c0.To(Device::Cuda(0));
          ASSERT_TRUE(
              ops::internal::Gemm(a, b, ta, tb, 0.5, beta, cpu, false).ok());
          const absl::Status s = ops::internal::Gemm(*a.To(Device::Cuda(0)),
                                                     *b.To(Device::Cuda(0)), ta,
                                                     tb, 0.5, beta, gpu, false);
          ASSERT_TRUE(s.ok()) << s;
          const testing::DiffAndNorm d =
              testing::L2DiffAndNorm(*gpu.To(Device::Cpu()), cpu);
          // Sums of 20000 products in another order: ~1e-6 relative in f32.
          EXPECT_LT(d.diff / d.norm, dtype == DType::kF64 ? 1e-12 : 2e-5)
              << "beta " << beta;
        }
        SetMatMulPrecision(MatMulPrecision::kFp32);
      }
    }
  }
}

// An empty inner dimension: zeros, as on the CPU (cuBLAS alone rejects
// the zero leading dimension of an empty operand).
TEST_F(CudaOpsTest, MatMulWithEmptyInnerDimensionIsZeros) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a =
          Tensor::HostZeros(DType::kF32, ta ? Shape{0, 3} : Shape{3, 0});
      const Tensor b =
          Tensor::HostZeros(DType::kF32, tb ? Shape{4, 0} : Shape{0, 4});
      absl::StatusOr<Tensor> gpu =
          ops::MatMul(*a.To(Device::Cuda(0)), *b.To(Device::Cuda(0)), ta, tb);
      ASSERT_TRUE(gpu.ok()) << gpu.status() << " ta=" << ta << " tb=" << tb;
      EXPECT_TRUE(testing::AllClose(*gpu->To(Device::Cpu()),
                                    *ops::MatMul(a, b, ta, tb), 0, 0));
    }
  }
}

// precision: fp32 follows the CPU to f32 rounding; tf32 rounds the inputs
// to 10-bit mantissas, so it is close (~1e-3 relative) but not that close.
TEST_F(CudaOpsTest, Tf32MatMulIsCloseButFp32IsExact) {
  const Tensor a = testing::RandomTensor({256, 512}, 31, DType::kF32);
  const Tensor b = testing::RandomTensor({512, 128}, 32, DType::kF32);
  const Tensor cpu = *ops::MatMul(a, b);
  const Tensor ga = *a.To(Device::Cuda(0)), gb = *b.To(Device::Cuda(0));
  auto relative_error = [&](MatMulPrecision precision) {
    SetMatMulPrecision(precision);
    absl::StatusOr<Tensor> gpu = ops::MatMul(ga, gb);
    SetMatMulPrecision(MatMulPrecision::kFp32);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    if (!gpu.ok()) return 1.0;
    const testing::DiffAndNorm d =
        testing::L2DiffAndNorm(*gpu->To(Device::Cpu()), cpu);
    return d.diff / d.norm;
  };
  const double fp32 = relative_error(MatMulPrecision::kFp32);
  const double tf32 = relative_error(MatMulPrecision::kTf32);
  // Two f32 sums of K = 512 products in different orders: ~4e-7 RMS
  // relative each; tf32 is ~3e-4.
  EXPECT_LT(fp32, 5e-6);
  EXPECT_LT(tf32, 5e-3);
  EXPECT_GT(tf32, 10 * fp32) << "tf32 did not engage the tensor cores";
}

// bf16: the GPU converts the operands to bfloat16 as the CPU emulation
// rounds them, and both sum exact products in f32, so they differ only in
// summation order; the fp32 product is far from both.
TEST_F(CudaOpsTest, Bf16MatMulMatchesTheCpuEmulation) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c :
       std::vector<Case>{{{256, 512}, {512, 128}, false, false},
                         {{512, 256}, {512, 128}, true, false},
                         {{256, 512}, {128, 512}, false, true},
                         {{4, 64, 96}, {4, 96, 32}, false, false}}) {
    SCOPED_TRACE(ShapeToString(c.a) + " @ " + ShapeToString(c.b));
    const Tensor a = testing::RandomTensor(c.a, 41, DType::kF32);
    const Tensor b = testing::RandomTensor(c.b, 42, DType::kF32);
    const Tensor ga = *a.To(Device::Cuda(0)), gb = *b.To(Device::Cuda(0));
    const Tensor fp32 = *ops::MatMul(a, b, c.ta, c.tb);
    SetMatMulPrecision(MatMulPrecision::kBf16);
    const absl::StatusOr<Tensor> cpu = ops::MatMul(a, b, c.ta, c.tb);
    const absl::StatusOr<Tensor> gpu = ops::MatMul(ga, gb, c.ta, c.tb);
    SetMatMulPrecision(MatMulPrecision::kFp32);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const testing::DiffAndNorm same =
        testing::L2DiffAndNorm(*gpu->To(Device::Cpu()), *cpu);
    const testing::DiffAndNorm off = testing::L2DiffAndNorm(fp32, *cpu);
    EXPECT_LT(same.diff / same.norm, 5e-6);
    EXPECT_GT(off.diff / off.norm, 1e-3) << "the operands were not rounded";
  }
}

// bf16 gradients: on the GPU the products keep their 2-byte bf16 operands
// for the backward products and convert the incoming gradient once
// (ops/gemm_operand.h); against the CPU emulation, forward and gradients
// differ only in summation order (a backward product reading an unrounded
// operand would be off by about 1e-3), for every transpose, a batched
// product and the dense fusions.
TEST_F(CudaOpsTest, Bf16ProductGradientsMatchTheCpuEmulation) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  SetMatMulPrecision(MatMulPrecision::kBf16);
  for (const Case& c :
       std::vector<Case>{{{96, 160}, {160, 64}, false, false},
                         {{160, 96}, {160, 64}, true, false},
                         {{96, 160}, {64, 160}, false, true},
                         {{160, 96}, {64, 160}, true, true},
                         {{3, 40, 72}, {3, 72, 24}, false, false}}) {
    SCOPED_TRACE(ShapeToString(c.a) + " @ " + ShapeToString(c.b));
    testing::ExpectGpuMatchesCpu(
        [&c](const std::vector<Tensor>& in) {
          return ops::MatMul(in[0], in[1], c.ta, c.tb);
        },
        {testing::RandomTensor(c.a, 71, DType::kF32),
         testing::RandomTensor(c.b, 72, DType::kF32)},
        1e-4, 1e-4);
  }
  const std::vector<Tensor> dense = {
      testing::RandomTensor({77, 160}, 73, DType::kF32),
      testing::RandomTensor({160, 48}, 74, DType::kF32),
      testing::RandomTensor({48}, 75, DType::kF32, -1.0, 1.0)};
  testing::ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) {
        return ops::MatMulBias(in[0], in[1], in[2]);
      },
      dense, 1e-4, 1e-4);
  testing::ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) {
        return ops::MatMulBiasRelu(in[0], in[1], in[2]);
      },
      dense, 1e-4, 1e-4);
  SetMatMulPrecision(MatMulPrecision::kFp32);
}

// A dense layer's operands on the host and on gpu:0: x [298, 200], rows
// 3.. of a larger tensor, so it starts off the 256-byte alignment cuBLASLt
// assumes (a replica's shard starts at any row); kernel [200, units], bias
// [units]; random from seed, seed + 1 and seed + 2.
struct DenseOperands {
  Tensor x, w, b, gx, gw, gb;
};
DenseOperands MakeDenseOperands(int64_t units, uint64_t seed) {
  const Tensor x_all = testing::RandomTensor({301, 200}, seed, DType::kF32);
  DenseOperands d;
  d.x = *x_all.SliceRows(3, 298);
  d.w = testing::RandomTensor({200, units}, seed + 1, DType::kF32);
  d.b = testing::RandomTensor({units}, seed + 2, DType::kF32);
  d.gx = *x_all.To(Device::Cuda(0))->SliceRows(3, 298);
  d.gw = *d.w.To(Device::Cuda(0));
  d.gb = *d.b.To(Device::Cuda(0));
  return d;
}

// The cuBLASLt epilogue (bias, relu) against the CPU in each precision, on
// operands that start off the 256-byte alignment cuBLASLt assumes; tf32
// and bf16 differ from the CPU's f32 by their rounding of the operands.
TEST_F(CudaOpsTest, FusedDenseEpiloguesMatchCpuInEveryPrecision) {
  const auto [x, w, b, gx, gw, gb] = MakeDenseOperands(129, 51);
  for (auto [precision, tol] : std::vector<std::pair<MatMulPrecision, double>>{
           {MatMulPrecision::kFp32, 1e-5},
           {MatMulPrecision::kTf32, 5e-3},
           {MatMulPrecision::kBf16, 5e-6}}) {
    SCOPED_TRACE(static_cast<int>(precision));
    // bf16: the CPU emulation rounds the operands the same way.
    SetMatMulPrecision(precision == MatMulPrecision::kBf16
                           ? precision
                           : MatMulPrecision::kFp32);
    const Tensor cpu_relu = *ops::MatMulBiasRelu(x, w, b);
    const Tensor cpu_bias = *ops::MatMulBias(x, w, b);
    SetMatMulPrecision(precision);
    const int64_t fused = ops::internal::FusedGemmBiasCalls();
    const absl::StatusOr<Tensor> gpu_relu = ops::MatMulBiasRelu(gx, gw, gb);
    const absl::StatusOr<Tensor> gpu_bias = ops::MatMulBias(gx, gw, gb);
    SetMatMulPrecision(MatMulPrecision::kFp32);
    ASSERT_TRUE(gpu_relu.ok()) << gpu_relu.status();
    ASSERT_TRUE(gpu_bias.ok()) << gpu_bias.status();
    // The unfused fallback computes the same numbers: ask which one ran.
    EXPECT_EQ(ops::internal::FusedGemmBiasCalls() - fused, 2)
        << "an epilogue fell back to the unfused path";
    for (const auto& [gpu, cpu] :
         {std::pair{*gpu_relu, cpu_relu}, std::pair{*gpu_bias, cpu_bias}}) {
      const testing::DiffAndNorm d =
          testing::L2DiffAndNorm(*gpu.To(Device::Cpu()), cpu);
      EXPECT_LT(d.diff / d.norm, tol);
    }
  }
}

// cuBLASLt's answers are kept per problem (shapes, epilogue, alignments):
// the same product again gives the same bits, and the same shapes at
// other alignments (a shard one row further in) are asked again, not
// given an algorithm picked for 256-byte-aligned pointers.
TEST_F(CudaOpsTest, FusedProductsReuseTheirAlgorithmPerProblem) {
  const Tensor x_all = testing::RandomTensor({130, 96}, 57, DType::kF32);
  const Tensor w = testing::RandomTensor({96, 72}, 58, DType::kF32);
  const Tensor b = testing::RandomTensor({72}, 59, DType::kF32);
  const Tensor gx = *x_all.To(Device::Cuda(0));
  const Tensor gw = *w.To(Device::Cuda(0)), gb = *b.To(Device::Cuda(0));
  for (const int64_t first_row : {int64_t{0}, int64_t{1}, int64_t{0}}) {
    SCOPED_TRACE(first_row);
    const Tensor cpu =
        *ops::MatMulBiasRelu(*x_all.SliceRows(first_row, 128), w, b);
    const int64_t fused = ops::internal::FusedGemmBiasCalls();
    const Tensor once =
        *ops::MatMulBiasRelu(*gx.SliceRows(first_row, 128), gw, gb);
    const Tensor again =
        *ops::MatMulBiasRelu(*gx.SliceRows(first_row, 128), gw, gb);
    EXPECT_EQ(ops::internal::FusedGemmBiasCalls() - fused, 2);
    const Tensor host = *once.To(Device::Cpu());
    EXPECT_TRUE(testing::AllClose(*again.To(Device::Cpu()), host, 0, 0));
    const testing::DiffAndNorm d = testing::L2DiffAndNorm(host, cpu);
    EXPECT_LT(d.diff / d.norm, 1e-5);
  }
}

// A 3-layer relu MLP's gradients on the GPU as the CPU's, in fp32 and bf16
// (there with the layers' outputs rounded and their halves kept, as the
// containers ask). The first layer's bias is zero and the first input row
// too, so that row's pre-activations are exactly 0: relu's gradient passes
// nothing there (y > 0, as TensorFlow's ReluGrad). cuBLASLt's relu mask
// (RELU_AUX_BIAS, read by DRELU_BGRAD) passes it there, which this caught
// on the H200: so the masked pass is ours.
TEST_F(CudaOpsTest, ReluMlpGradientsMatchCpuInEveryPrecision) {
  Tensor x = testing::RandomTensor({64, 48}, 81, DType::kF32);
  for (int64_t i = 0; i < 48; ++i) x.data<float>()[i] = 0;
  const std::vector<Tensor> mlp = {
      x,
      testing::RandomTensor({48, 40}, 82, DType::kF32),
      Tensor::HostFull(DType::kF32, {40}, 0.0),
      testing::RandomTensor({40, 32}, 84, DType::kF32),
      testing::RandomTensor({32}, 85, DType::kF32),
      testing::RandomTensor({32, 10}, 86, DType::kF32),
      testing::RandomTensor({10}, 87, DType::kF32)};
  for (const MatMulPrecision precision :
       {MatMulPrecision::kFp32, MatMulPrecision::kBf16}) {
    SCOPED_TRACE(static_cast<int>(precision));
    SetMatMulPrecision(precision);
    const ops::OutputRounding rounding =
        precision == MatMulPrecision::kBf16
            ? ops::OutputRounding::kBf16WithHalves
            : ops::OutputRounding::kNone;
    testing::ExpectGpuMatchesCpu(
        [rounding](const std::vector<Tensor>& in) -> absl::StatusOr<Tensor> {
          MT_ASSIGN_OR_RETURN(Tensor h,
                              ops::MatMulBiasRelu(in[0], in[1], in[2]));
          MT_RETURN_IF_ERROR(ops::RoundOutput(h, rounding));
          MT_ASSIGN_OR_RETURN(h, ops::MatMulBiasRelu(h, in[3], in[4]));
          MT_RETURN_IF_ERROR(ops::RoundOutput(h, rounding));
          return ops::MatMulBias(h, in[5], in[6]);
        },
        mlp, 1e-4, 1e-4);
    SetMatMulPrecision(MatMulPrecision::kFp32);
  }
  // A replica's empty shard: the bias gradients zeros as the CPU's (not a
  // never-written buffer).
  std::vector<Tensor> empty = mlp;
  empty[0] = testing::RandomTensor({0, 48}, 88, DType::kF32);
  testing::ExpectGpuMatchesCpu(
      [](const std::vector<Tensor>& in) -> absl::StatusOr<Tensor> {
        MT_ASSIGN_OR_RETURN(Tensor h, ops::MatMulBiasRelu(in[0], in[1], in[2]));
        MT_ASSIGN_OR_RETURN(h, ops::MatMulBiasRelu(h, in[3], in[4]));
        return ops::MatMulBias(h, in[5], in[6]);
      },
      empty, 0, 0);
}

// With `direct`, the direct kernels must take the conv (forward and filter
// gradient: bias and relu in the forward kernel); without, cuBLASLt's
// epilogue in every chunk.
using testing::OnGrid;

void ExpectFusedConvEpilogueMatchesCpu(int64_t channels, int64_t k,
                                       bool direct) {
  const Tensor x = testing::RandomTensor({5, 11, 9, channels}, 61, DType::kF32);
  const Tensor f = testing::RandomTensor({k, k, channels, 17}, 62, DType::kF32);
  const Tensor b = testing::RandomTensor({17}, 63, DType::kF32);
  const Tensor dy = testing::RandomTensor({5, 11, 9, 17}, 64, DType::kF32);
  constexpr float kStep = 1.0f / 64, kBiasStep = kStep * kStep;
  const Tensor grid_x = OnGrid(x, kStep, 0), grid_f = OnGrid(f, kStep, 0);
  const Tensor grid_b = OnGrid(b, kBiasStep, kBiasStep / 2);
  const Tensor grid_dy = OnGrid(dy, kStep, 0);
  const Device gpu = Device::Cuda(0);
  auto run = [&](const Tensor& xi, const Tensor& fi, const Tensor& bi,
                 const Tensor& dyi) {
    GradientTape tape;
    for (const Tensor& t : {xi, fi, bi}) tape.Watch(t);
    absl::StatusOr<Tensor> y = ops::Conv2DBiasRelu(xi, fi, bi);
    EXPECT_TRUE(y.ok()) << y.status();
    auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dyi)), {xi, fi, bi});
    EXPECT_TRUE(g.ok()) << g.status();
    std::vector<Tensor> out = {*y->To(Device::Cpu())};
    for (const auto& gi : *g) out.push_back(*gi.value().To(Device::Cpu()));
    return out;
  };
  // Two images' columns per chunk: 99 rows each, their starts 16-byte
  // aligned (the patch rounded up to 4 f32 or 8 bf16 values, ColumnStride).
  const int64_t stride = (k * k * channels + 7) / 8 * 8;
  ops::internal::SetConvGpuDirect(direct);
  for (const int64_t column_bytes :
       {int64_t{0}, int64_t{2} * 99 * stride * 4}) {
    if (direct && column_bytes > 0) continue;  // No columns.
    ops::internal::SetConvGpuColumnBytes(column_bytes);
    for (auto [precision, tol] :
         std::vector<std::pair<MatMulPrecision, double>>{
             {MatMulPrecision::kFp32, 1e-5},
             {MatMulPrecision::kTf32, 1e-7},
             {MatMulPrecision::kBf16, 1e-5}}) {
      SCOPED_TRACE(static_cast<int>(precision));
      const bool grid = precision == MatMulPrecision::kTf32;
      const Tensor& xi = grid ? grid_x : x;
      const Tensor& fi = grid ? grid_f : f;
      const Tensor& bi = grid ? grid_b : b;
      const Tensor& dyi = grid ? grid_dy : dy;
      SetMatMulPrecision(precision == MatMulPrecision::kBf16
                             ? precision
                             : MatMulPrecision::kFp32);
      const std::vector<Tensor> cpu = run(xi, fi, bi, dyi);
      SetMatMulPrecision(precision);
      const int64_t fused = ops::internal::FusedGemmBiasCalls();
      const int64_t direct_calls = ops::internal::DirectConvCalls();
      const std::vector<Tensor> on_gpu =
          run(*xi.To(gpu), *fi.To(gpu), *bi.To(gpu), *dyi.To(gpu));
      SetMatMulPrecision(MatMulPrecision::kFp32);
      // One epilogue per chunk (1 or 3 here): none may fall back.
      EXPECT_EQ(ops::internal::FusedGemmBiasCalls() - fused,
                direct ? 0 : (column_bytes == 0 ? 1 : 3));
      EXPECT_EQ(ops::internal::DirectConvCalls() - direct_calls,
                direct ? 2 : 0);
      for (size_t i = 0; i < cpu.size(); ++i) {
        const testing::DiffAndNorm d =
            testing::L2DiffAndNorm(on_gpu[i], cpu[i]);
        EXPECT_LT(d.diff / d.norm, tol) << "output " << i;
      }
    }
  }
  ops::internal::SetConvGpuColumnBytes(0);
  ops::internal::SetConvGpuDirect(true);
}

// The convolution's fused epilogue against the CPU in each precision, in
// one chunk and in several (each chunk's GEMM has its own epilogue, on rows
// that start anywhere in the column buffer's output), forward and backward.
// tf32 runs on grid values (inputs multiples of 2^-6, biases odd multiples
// of 2^-13): tf32 holds them exactly and every product and sum of this
// size is exact in f32, so tf32 must equal the CPU's f32; on random values
// a pre-activation near zero can take the other side of the relu in tf32
// and move a bias gradient by a whole dy value. 3 and 8 input channels:
// with a multiple of 4, im2col and col2im move four channels at a time.
// The direct kernels off: a 3x3 filter over 3 channels would go direct.
TEST_F(CudaOpsTest, FusedConvEpilogueMatchesCpuInEveryPrecision) {
  for (const int64_t channels : {int64_t{3}, int64_t{8}}) {
    SCOPED_TRACE(absl::StrCat(channels, " input channels"));
    ExpectFusedConvEpilogueMatchesCpu(channels, 3, /*direct=*/false);
  }
}

// The same on the direct kernels (bias and relu in the forward kernel; in
// bf16 the operands rounded in the kernels as the CPU rounds them): 3x3
// over 3 channels and 5x5 over one.
TEST_F(CudaOpsTest, DirectConvWithBiasReluMatchesCpuInEveryPrecision) {
  for (const auto& [channels, k] :
       {std::pair<int64_t, int64_t>{3, 3}, std::pair<int64_t, int64_t>{1, 5}}) {
    SCOPED_TRACE(absl::StrCat(k, "x", k, " over ", channels, " channels"));
    ExpectFusedConvEpilogueMatchesCpu(channels, k, /*direct=*/true);
  }
}

// A conv's gradient taken after the precision changed (forward in bf16,
// gradient in fp32, and back): the GPU's forward keeps its columns for the
// filter gradient, and must not pair columns of one precision with a dy of
// the other; it recomputes them, as the CPU (which keeps none) does.
TEST_F(CudaOpsTest, ConvGradientsTakenInAnotherPrecisionMatchCpu) {
  const Tensor x = testing::RandomTensor({4, 10, 10, 3}, 71, DType::kF32);
  const Tensor f = testing::RandomTensor({3, 3, 3, 8}, 72, DType::kF32);
  const Tensor b = testing::RandomTensor({8}, 73, DType::kF32);
  const Tensor dy = testing::RandomTensor({4, 10, 10, 8}, 74, DType::kF32);
  const Device gpu = Device::Cuda(0);
  auto run = [&](MatMulPrecision forward, MatMulPrecision gradient,
                 const Tensor& xi, const Tensor& fi, const Tensor& bi,
                 const Tensor& dyi) {
    GradientTape tape;
    for (const Tensor& t : {xi, fi, bi}) tape.Watch(t);
    SetMatMulPrecision(forward);
    absl::StatusOr<Tensor> y = ops::Conv2DBiasRelu(xi, fi, bi);
    SetMatMulPrecision(gradient);
    EXPECT_TRUE(y.ok()) << y.status();
    auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dyi)), {xi, fi, bi});
    SetMatMulPrecision(MatMulPrecision::kFp32);
    EXPECT_TRUE(g.ok()) << g.status();
    std::vector<Tensor> out;
    if (g.ok()) {
      for (const auto& gi : *g) out.push_back(*gi.value().To(Device::Cpu()));
    }
    return out;
  };
  // The direct kernels keep no columns; each reads the precision of its
  // own call.
  for (const bool direct : {false, true}) {
    ops::internal::SetConvGpuDirect(direct);
    for (auto [forward, gradient] :
         {std::pair{MatMulPrecision::kBf16, MatMulPrecision::kFp32},
          std::pair{MatMulPrecision::kFp32, MatMulPrecision::kBf16}}) {
      SCOPED_TRACE(absl::StrCat("forward ", static_cast<int>(forward),
                                direct ? " direct" : " im2col + GEMM"));
      const std::vector<Tensor> cpu = run(forward, gradient, x, f, b, dy);
      const int64_t calls = ops::internal::DirectConvCalls();
      const std::vector<Tensor> on_gpu = run(
          forward, gradient, *x.To(gpu), *f.To(gpu), *b.To(gpu), *dy.To(gpu));
      EXPECT_EQ(ops::internal::DirectConvCalls() - calls, direct ? 2 : 0);
      ASSERT_EQ(on_gpu.size(), cpu.size());
      for (size_t i = 0; i < cpu.size(); ++i) {
        const testing::DiffAndNorm d =
            testing::L2DiffAndNorm(on_gpu[i], cpu[i]);
        EXPECT_LT(d.diff / d.norm, 1e-5) << "gradient " << i;
      }
    }
  }
  ops::internal::SetConvGpuDirect(true);
}

// The device rounding (__float2bfloat16_rn) and the host's agree bit for
// bit, ties, overflow, denormals and NaNs included: four elements at a
// time with a tail (4099 from an aligned start) and one at a time (a view
// one element in), with and without the halves.
TEST_F(CudaOpsTest, RoundToBFloat16MatchesTheHostBitwise) {
  const Tensor x = testing::Bf16RoundingCases(4099, 43);
  const Tensor on_gpu = *x.To(Device::Cuda(0));
  for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
    for (const bool halves : {false, true}) {
      SCOPED_TRACE(absl::StrCat("offset ", offset, " halves ", halves));
      const int64_t n = x.num_elements() - offset;
      absl::StatusOr<Tensor> gpu =
          ops::RoundedToBFloat16(*on_gpu.SliceRows(offset, n), halves);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      const Tensor host = *gpu->To(Device::Cpu());
      std::vector<uint16_t> bits;
      if (halves) {
        ASSERT_NE(ops::internal::Bf16Halves(*gpu), nullptr);
        bits.resize(static_cast<size_t>(n));
        ASSERT_TRUE(cuda::Copy(bits.data(), Device::Cpu(),
                               ops::internal::Bf16Halves(*gpu), Device::Cuda(0),
                               bits.size() * sizeof(uint16_t))
                        .ok());
      }
      for (int64_t i = 0; i < n; ++i) {
        const float v = x.data<float>()[i + offset];
        const float want = RoundToBFloat16(v);
        const float got = host.data<float>()[i];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << i;
          if (halves) {
            EXPECT_TRUE(std::isnan(BFloat16ToFloat(bits[i]))) << i;
          }
          continue;
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << "element " << i << " = " << v;
        if (halves) {
          ASSERT_EQ(bits[i], BFloat16Bits(v)) << "element " << i;
        }
      }
    }
  }
}

// A product's 2-byte operand (GemmOperand::Of on a GPU tensor, the
// ToBFloat16 kernel) holds the host's bfloat16 bits of every element,
// ties, overflow, denormals and NaNs included: four at a time with a tail
// (1029 elements from an aligned start), and one at a time (a view one
// element in, not 16-byte aligned).
TEST_F(CudaOpsTest, Bf16OperandsHoldTheHostsBits) {
  const Tensor x = testing::Bf16RoundingCases(1029, 44);
  const Tensor on_gpu = *x.To(Device::Cuda(0));
  for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
    SCOPED_TRACE(absl::StrCat("offset ", offset));
    const int64_t n = x.num_elements() - offset;
    const absl::StatusOr<ops::internal::GemmOperand> op =
        ops::internal::GemmOperand::Of(*on_gpu.SliceRows(offset, n),
                                       /*bf16=*/true);
    ASSERT_TRUE(op.ok()) << op.status();
    ASSERT_TRUE(op->bf16());
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    ASSERT_TRUE(cuda::Copy(bits.data(), Device::Cpu(), op->data(),
                           Device::Cuda(0), bits.size() * sizeof(uint16_t))
                    .ok());
    for (int64_t i = 0; i < n; ++i) {
      const float v = x.data<float>()[i + offset];
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(BFloat16ToFloat(bits[i]))) << i;
      } else {
        ASSERT_EQ(bits[i], BFloat16Bits(v)) << "element " << i << " = " << v;
      }
    }
  }
}

// The rounding pass asked for halves (a layer output that feeds a product)
// writes the host's bfloat16 bits of every element next to the rounded f32
// values, and products read those halves, views at their offset, with no
// conversion: the same bits, so the same product as through a conversion.
TEST_F(CudaOpsTest, RoundingWritesTheHalvesThatProductsRead) {
  const Tensor x = testing::Bf16RoundingCases(1029, 45);
  // In the rounding pass, or added to a tensor rounded without them.
  Tensor gpu;
  const Bf16Rendering* r = nullptr;
  for (const bool added_later : {false, true}) {
    SCOPED_TRACE(added_later);
    gpu = *x.To(Device::Cuda(0));
    if (added_later) {
      ASSERT_TRUE(ops::RoundToBFloat16InPlace(gpu).ok());
      ASSERT_EQ(ops::internal::Bf16Halves(gpu), nullptr);
    }
    ASSERT_TRUE(ops::RoundToBFloat16InPlace(gpu, /*halves=*/true).ok());
    r = gpu.bf16_rendering();
    ASSERT_TRUE(r != nullptr && r->halves != nullptr);
    std::vector<uint16_t> bits(static_cast<size_t>(x.num_elements()));
    ASSERT_TRUE(cuda::Copy(bits.data(), Device::Cpu(), r->halves->data(),
                           Device::Cuda(0), bits.size() * sizeof(uint16_t))
                    .ok());
    const Tensor rounded = *gpu.To(Device::Cpu());
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const float v = x.data<float>()[i];
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(BFloat16ToFloat(bits[i]))) << i;
        continue;
      }
      ASSERT_EQ(bits[i], BFloat16Bits(v)) << "element " << i << " = " << v;
      ASSERT_EQ(std::bit_cast<uint32_t>(rounded.data<float>()[i]),
                std::bit_cast<uint32_t>(RoundToBFloat16(v)))
          << i;
    }
  }
  const Tensor view = *gpu.SliceRows(100, 200);
  const absl::StatusOr<ops::internal::GemmOperand> op =
      ops::internal::GemmOperand::Of(view, /*bf16=*/true);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->data(), static_cast<const char*>(r->halves->data()) + 200);
  // Overwritten, the tensor is converted again, not read through its old
  // halves (which the operand above still holds).
  ASSERT_TRUE(gpu.CopyFrom(x).ok());
  EXPECT_EQ(gpu.bf16_rendering(), nullptr);
  const absl::StatusOr<ops::internal::GemmOperand> again =
      ops::internal::GemmOperand::Of(view, /*bf16=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->data(), op->data());

  // [33, 31] @ [31, 17] from rounded values read through their halves and
  // through a conversion pass.
  const Tensor a = testing::RandomTensor({33, 31}, 46, DType::kF32);
  const Tensor b =
      *testing::RandomTensor({31, 17}, 47, DType::kF32).To(Device::Cuda(0));
  const Tensor with_halves =
      *ops::RoundedToBFloat16(*a.To(Device::Cuda(0)), /*halves=*/true);
  const Tensor without = *ops::RoundedToBFloat16(*a.To(Device::Cuda(0)));
  ASSERT_NE(with_halves.bf16_rendering()->halves, nullptr);
  ASSERT_EQ(without.bf16_rendering()->halves, nullptr);
  SetMatMulPrecision(MatMulPrecision::kBf16);
  const absl::StatusOr<Tensor> p1 = ops::MatMul(with_halves, b);
  const absl::StatusOr<Tensor> p2 = ops::MatMul(without, b);
  SetMatMulPrecision(MatMulPrecision::kFp32);
  ASSERT_TRUE(p1.ok() && p2.ok()) << p1.status() << p2.status();
  EXPECT_TRUE(
      testing::AllClose(*p1->To(Device::Cpu()), *p2->To(Device::Cpu()), 0, 0));
}

// A relu layer's rounded output read through its halves (the masked
// gradient pass, then the next layer's product) gives the gradients it
// gives read as f32: the same mask and the same bf16 operand bits, so the
// same numbers bit for bit. Each masked pass: the fused dense op's (dz as
// bf16) with and without the bias gradient, and BiasAddRelu's (dz f32).
TEST_F(CudaOpsTest, ReluLayersReadTheirOutputsHalvesAsTheirValues) {
  const Tensor x =
      *testing::RandomTensor({64, 48}, 48, DType::kF32).To(Device::Cuda(0));
  const Tensor w1 =
      *testing::RandomTensor({48, 40}, 49, DType::kF32).To(Device::Cuda(0));
  const Tensor b1 =
      *testing::RandomTensor({40}, 50, DType::kF32).To(Device::Cuda(0));
  const Tensor w2 =
      *testing::RandomTensor({40, 24}, 51, DType::kF32).To(Device::Cuda(0));
  const Tensor dy =
      *testing::RandomTensor({64, 24}, 52, DType::kF32).To(Device::Cuda(0));
  enum class Pass { kFused, kFusedNoBiasGradient, kBiasAddRelu };
  auto gradients = [&](Pass pass, bool halves) {
    std::vector<Tensor> sources = {x, w1, w2};
    if (pass != Pass::kFusedNoBiasGradient) sources.push_back(b1);
    GradientTape tape;
    for (const Tensor& t : sources) tape.Watch(t);
    Tensor h = pass == Pass::kBiasAddRelu
                   ? *ops::BiasAddRelu(*ops::MatMul(x, w1), b1)
                   : *ops::MatMulBiasRelu(x, w1, b1);
    EXPECT_TRUE(ops::RoundToBFloat16InPlace(h, halves).ok());
    EXPECT_EQ(ops::internal::Bf16Halves(h) != nullptr, halves);
    const Tensor y = *ops::MatMul(h, w2);
    auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(y, dy)), sources);
    EXPECT_TRUE(g.ok()) << g.status();
    std::vector<Tensor> host = {*y.To(Device::Cpu())};
    if (g.ok()) {
      for (const auto& gi : *g) host.push_back(*gi->To(Device::Cpu()));
    }
    return host;
  };
  for (Pass pass :
       {Pass::kFused, Pass::kFusedNoBiasGradient, Pass::kBiasAddRelu}) {
    SCOPED_TRACE(static_cast<int>(pass));
    SetMatMulPrecision(MatMulPrecision::kBf16);
    const std::vector<Tensor> from_f32 = gradients(pass, false);
    const std::vector<Tensor> from_halves = gradients(pass, true);
    SetMatMulPrecision(MatMulPrecision::kFp32);
    ASSERT_GE(from_f32.size(), 4u);
    ASSERT_EQ(from_halves.size(), from_f32.size());
    for (size_t i = 0; i < from_f32.size(); ++i) {
      EXPECT_TRUE(testing::AllClose(from_halves[i], from_f32[i], 0, 0)) << i;
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
