// A variable's bfloat16 copy (Buffer::bf16_copy, ops::KeepBf16Copy): made
// only where the products read bfloat16, equal to the host's rounding of the
// f32 values after every writer (Assign, AssignAdd, the optimizer updates of
// every rule, one variable or a list), read by the products with no
// conversion, and training through it computes bit for bit what converting
// the weights every step computes. Labelled `gpu`; skips with the reason
// without one.
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/bfloat16.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/ops/training_ops.h"
#include "tensor/variable.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/tensor/update_rule_cases.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::Bf16RoundingCases;
using testing::CopyTo;

// Runs under precision bf16 with copies on; restores fp32 after.
class CudaBf16CopyTest : public testing::CudaTest {
 protected:
  void SetUp() override {
    testing::CudaTest::SetUp();
    SetMatMulPrecision(MatMulPrecision::kBf16);
  }
  void TearDown() override {
    SetMatMulPrecision(MatMulPrecision::kFp32);
    ops::internal::SetBf16Copies(true);
  }
};

// The copy of the GPU tensor `t` holds the host's bfloat16 bits of t's
// values as they are now (any NaN for a NaN).
void ExpectCopyOf(const Tensor& t, const std::string& when) {
  SCOPED_TRACE(when);
  const std::shared_ptr<void> copy = t.bf16_copy();
  ASSERT_NE(copy, nullptr);
  const Tensor values = CopyTo(t, Device::Cpu());
  std::vector<uint16_t> bits(static_cast<size_t>(t.num_elements()));
  ASSERT_TRUE(cuda::Copy(bits.data(), Device::Cpu(), copy.get(), t.device(),
                         bits.size() * sizeof(uint16_t))
                  .ok());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const float v = values.data<float>()[i];
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(BFloat16ToFloat(bits[i]))) << i;
    } else {
      ASSERT_EQ(bits[i], BFloat16Bits(v)) << "element " << i << " = " << v;
    }
  }
}

// KeepBf16Copy(t): whether it made a copy (an error fails the test).
bool Made(const Tensor& t) {
  const absl::StatusOr<bool> made = ops::KeepBf16Copy(t);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() && *made;
}

TEST_F(CudaBf16CopyTest, MadeOnceAndOnlyWhereProductsReadBf16) {
  const Tensor host = testing::RandomTensor({40, 3}, 1, DType::kF32);
  const Tensor gpu = CopyTo(host, Device::Cuda(0));
  absl::StatusOr<bool> made = ops::KeepBf16Copy(host);
  ASSERT_TRUE(made.ok() && !*made) << "CPU products read f32 storage";
  made = ops::KeepBf16Copy(
      CopyTo(testing::RandomTensor({8}, 2, DType::kF64), Device::Cuda(0)));
  ASSERT_TRUE(made.ok() && !*made) << "f64 products stay f64";
  SetMatMulPrecision(MatMulPrecision::kTf32);
  made = ops::KeepBf16Copy(gpu);
  ASSERT_TRUE(made.ok() && !*made) << "tf32 products read f32";
  SetMatMulPrecision(MatMulPrecision::kBf16);
  ops::internal::SetBf16Copies(false);
  made = ops::KeepBf16Copy(gpu);
  ASSERT_TRUE(made.ok() && !*made) << "switched off";
  EXPECT_EQ(gpu.bf16_copy(), nullptr);
  ops::internal::SetBf16Copies(true);

  // A view into a buffer cannot have the whole buffer's copy made for it.
  EXPECT_EQ(ops::KeepBf16Copy(*gpu.SliceRows(1, 39)).status().code(),
            absl::StatusCode::kInvalidArgument);
  made = ops::KeepBf16Copy(gpu);
  ASSERT_TRUE(made.ok() && *made) << made.status();
  const std::shared_ptr<void> copy = gpu.bf16_copy();
  made = ops::KeepBf16Copy(gpu);
  ASSERT_TRUE(made.ok() && !*made);
  EXPECT_EQ(gpu.bf16_copy(), copy) << "kept, not made again";
  ExpectCopyOf(gpu, "made");

  // Products read it, views at their offset, instead of converting.
  const absl::StatusOr<ops::internal::GemmOperand> whole =
      ops::internal::GemmOperand::Of(gpu);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->data(), copy.get());
  const absl::StatusOr<ops::internal::GemmOperand> rows =
      ops::internal::GemmOperand::Of(*gpu.SliceRows(10, 5));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->data(),
            static_cast<const void*>(static_cast<const char*>(copy.get()) +
                                     10 * 3 * 2));
  // A reshaped view (a conv's kernel as a matrix) reads it too.
  const absl::StatusOr<ops::internal::GemmOperand> flat =
      ops::internal::GemmOperand::Of(*gpu.Reshaped({120}));
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->data(), copy.get());
}

// Every in-place writer of a variable leaves the copy equal to the
// rounding of the values it wrote: ties, overflow, denormals and NaNs
// included, four elements at a time and the tail one at a time.
TEST_F(CudaBf16CopyTest, EveryWriterKeepsTheCopyCurrent) {
  absl::StatusOr<Variable> var = Variable::Create(
      "v", CopyTo(Bf16RoundingCases(4099, 3), Device::Cuda(0)));
  ASSERT_TRUE(var.ok()) << var.status();
  ASSERT_TRUE(Made(var->value()));
  const std::shared_ptr<void> copy = var->value().bf16_copy();
  ExpectCopyOf(var->value(), "made");
  ASSERT_TRUE(var->Assign(Bf16RoundingCases(4099, 4)).ok());
  ExpectCopyOf(var->value(), "Assign from the host");
  ASSERT_TRUE(
      var->Assign(CopyTo(Bf16RoundingCases(4099, 5), Device::Cuda(0))).ok());
  ExpectCopyOf(var->value(), "Assign on the GPU");
  ASSERT_TRUE(
      var->AssignAdd(CopyTo(testing::RandomTensor({4099}, 6, DType::kF32),
                            Device::Cuda(0)))
          .ok());
  ExpectCopyOf(var->value(), "AssignAdd");
  ASSERT_TRUE(
      var->AssignSub(CopyTo(testing::RandomTensor({4099}, 7, DType::kF32),
                            Device::Cuda(0)))
          .ok());
  ExpectCopyOf(var->value(), "AssignSub");
  ASSERT_TRUE(var->Reinitialize().ok());
  ExpectCopyOf(var->value(), "Reinitialize");
  EXPECT_EQ(var->value().bf16_copy(), copy) << "never moved";

  const UpdateHyperparams h = testing::EveryHyperparameter();
  for (UpdateRule rule : testing::kEveryUpdateRule) {
    const std::string name = absl::StrCat("rule ", static_cast<int>(rule));
    // Finite values: a NaN would stay a NaN through every update.
    ASSERT_TRUE(
        var->Assign(testing::RandomTensor({4099}, 8, DType::kF32)).ok());
    std::vector<Tensor> slots;
    for (int s = 0; s < UpdateRuleSlots(rule); ++s) {
      slots.push_back(
          CopyTo(testing::RandomTensor({4099}, 10 + s, DType::kF32, 0.1, 1.0),
                 Device::Cuda(0)));
    }
    const Tensor grad =
        CopyTo(testing::RandomTensor({4099}, 9, DType::kF32), Device::Cuda(0));
    const absl::Status s = ops::ApplyUpdate(rule, h, grad, var->value(), slots);
    ASSERT_TRUE(s.ok()) << s;
    ExpectCopyOf(var->value(), name);
  }
}

// One launch over a list of variables, some with copies and some without
// (sizes around the kernel's chunks, one that is not a multiple of four):
// each copy gets its own variable's values, and the variables are updated
// exactly as without copies.
TEST_F(CudaBf16CopyTest, ListUpdatesWriteEachVariablesCopy) {
  const std::vector<int64_t> sizes = {1, 4095, 4096, 4097, 70001, 6};
  std::vector<Tensor> with, without, grads;
  std::vector<std::vector<Tensor>> slots_with, slots_without;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Tensor v = testing::RandomTensor({sizes[i]}, 20 + i, DType::kF32);
    with.push_back(CopyTo(v, Device::Cuda(0)));
    without.push_back(CopyTo(v, Device::Cuda(0)));
    grads.push_back(
        CopyTo(testing::RandomTensor({sizes[i]}, 40 + i, DType::kF32),
               Device::Cuda(0)));
    slots_with.push_back(
        {CopyTo(Tensor::HostZeros(DType::kF32, {sizes[i]}), Device::Cuda(0))});
    slots_without.push_back(
        {CopyTo(Tensor::HostZeros(DType::kF32, {sizes[i]}), Device::Cuda(0))});
    if (i % 3 != 2) {
      ASSERT_TRUE(Made(with.back()));
    }
  }
  Tensor params = Tensor::HostEmpty(DType::kF32, {ops::kUpdateParamCount});
  ASSERT_TRUE(
      ops::PackUpdateParams(testing::EveryHyperparameter(), params).ok());
  params = CopyTo(params, Device::Cuda(0));
  for (int step = 0; step < 2; ++step) {
    for (auto* vars : {&with, &without}) {
      std::vector<ops::UpdateTarget> targets;
      for (size_t i = 0; i < sizes.size(); ++i) {
        targets.push_back(
            {.params = params,
             .grad = grads[i],
             .var = (*vars)[i],
             .slots = vars == &with ? slots_with[i] : slots_without[i]});
      }
      const absl::Status s = ops::ApplyUpdates(UpdateRule::kMomentum, targets);
      ASSERT_TRUE(s.ok()) << s;
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("variable ", i, " of ", sizes[i]));
    EXPECT_TRUE(testing::AllClose(CopyTo(with[i], Device::Cpu()),
                                  CopyTo(without[i], Device::Cpu()), 0, 0));
    if (i % 3 != 2) {
      ExpectCopyOf(with[i], "updated");
    } else {
      EXPECT_EQ(with[i].bf16_copy(), nullptr);
    }
  }
}

// Three momentum steps of a two-layer relu net whose weights have copies
// (what an optimizer makes them) end bit for bit where the same steps end
// when every product converts the weights: the products read the same
// bits either way.
TEST_F(CudaBf16CopyTest, TrainingThroughCopiesMatchesConvertingEveryStep) {
  const Tensor x =
      CopyTo(testing::RandomTensor({64, 48}, 60, DType::kF32), Device::Cuda(0));
  const Tensor dy =
      CopyTo(testing::RandomTensor({64, 24}, 61, DType::kF32), Device::Cuda(0));
  auto train = [&](bool copies) {
    std::vector<Tensor> vars = {
        CopyTo(testing::RandomTensor({48, 40}, 62, DType::kF32),
               Device::Cuda(0)),
        CopyTo(testing::RandomTensor({40}, 63, DType::kF32), Device::Cuda(0)),
        CopyTo(testing::RandomTensor({40, 24}, 64, DType::kF32),
               Device::Cuda(0))};
    std::vector<Tensor> momenta;
    for (const Tensor& v : vars) {
      momenta.push_back(*Tensor::Zeros(DType::kF32, v.shape(), v.device()));
      if (copies) {
        EXPECT_TRUE(Made(v));
      }
    }
    UpdateHyperparams h;
    h.lr = 0.05;
    h.momentum = 0.9;
    for (int step = 0; step < 3; ++step) {
      GradientTape tape;
      for (const Tensor& v : vars) tape.Watch(v);
      Tensor hidden = *ops::MatMulBiasRelu(x, vars[0], vars[1]);
      EXPECT_TRUE(ops::RoundToBFloat16InPlace(hidden, /*halves=*/true).ok());
      const Tensor y = *ops::MatMul(hidden, vars[2]);
      auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(y, dy)), vars);
      EXPECT_TRUE(g.ok()) << g.status();
      if (!g.ok()) break;
      for (size_t i = 0; i < vars.size(); ++i) {
        const absl::Status s = ops::ApplyUpdate(
            UpdateRule::kMomentum, h, *(*g)[i], vars[i], {&momenta[i], 1});
        EXPECT_TRUE(s.ok()) << s;
      }
    }
    std::vector<Tensor> host;
    for (const Tensor& v : vars) {
      EXPECT_EQ(v.bf16_copy() != nullptr, copies);
      host.push_back(CopyTo(v, Device::Cpu()));
    }
    return host;
  };
  const std::vector<Tensor> through_copies = train(true);
  const std::vector<Tensor> converting = train(false);
  ASSERT_EQ(through_copies.size(), converting.size());
  for (size_t i = 0; i < converting.size(); ++i) {
    EXPECT_TRUE(testing::AllClose(through_copies[i], converting[i], 0, 0))
        << "variable " << i;
  }
}

}  // namespace
}  // namespace mirrortrain
