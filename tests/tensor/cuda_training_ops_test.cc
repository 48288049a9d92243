// Optimizer and moving-average updates on GPU tensors against the CPU loops.
// Both run the same per-element code (tensor/update_rules.h) and the CUDA
// file is built without FMA contraction, with IEEE division and square
// root, so the results must agree bit for bit, not just within a tolerance.
#include "gtest/gtest.h"
#include "tensor/ops/training_ops.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/tensor/update_rule_cases.h"

namespace mirrortrain {
namespace {

using testing::AllClose;
using testing::CopyTo;
using testing::RandomTensor;

class CudaTrainingOpsTest : public testing::CudaTest {};

TEST_F(CudaTrainingOpsTest, EveryRuleMatchesTheCpuBitwise) {
  UpdateHyperparams h = testing::EveryHyperparameter();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (UpdateRule rule : testing::kEveryUpdateRule) {
      SCOPED_TRACE(::testing::Message() << "rule " << static_cast<int>(rule)
                                        << " dtype " << DTypeName(dtype));
      // Odd size: several blocks and a partial one. Accumulators positive
      // (they hold sums of squares).
      const Shape shape{1000, 37};
      Tensor var = RandomTensor(shape, 1, dtype);
      std::vector<Tensor> slots;
      for (int s = 0; s < UpdateRuleSlots(rule); ++s) {
        slots.push_back(RandomTensor(shape, 10 + s, dtype, 0.1, 1.0));
      }
      Tensor gpu_var = CopyTo(var, Device::Cuda(0));
      std::vector<Tensor> gpu_slots;
      for (const Tensor& s : slots)
        gpu_slots.push_back(CopyTo(s, Device::Cuda(0)));
      for (int step = 1; step <= 3; ++step) {
        h.beta1_power = std::pow(h.beta1, step);
        h.beta2_power = std::pow(h.beta2, step);
        Tensor grad = RandomTensor(shape, 100 + step, dtype);
        ASSERT_TRUE(ops::ApplyUpdate(rule, h, grad, var, slots).ok());
        absl::Status s = ops::ApplyUpdate(
            rule, h, CopyTo(grad, Device::Cuda(0)), gpu_var, gpu_slots);
        ASSERT_TRUE(s.ok()) << s;
      }
      EXPECT_TRUE(AllClose(CopyTo(gpu_var, Device::Cpu()), var, 0, 0));
      for (size_t s = 0; s < slots.size(); ++s) {
        EXPECT_TRUE(
            AllClose(CopyTo(gpu_slots[s], Device::Cpu()), slots[s], 0, 0))
            << "slot " << s;
      }
    }
  }
}

TEST_F(CudaTrainingOpsTest, MovingAverageMatchesTheCpuBitwise) {
  Tensor shadow = RandomTensor({4099}, 1, DType::kF32);
  Tensor gpu_shadow = CopyTo(shadow, Device::Cuda(0));
  for (int step = 0; step < 5; ++step) {
    Tensor value = RandomTensor({4099}, 20 + step, DType::kF32);
    const double one_minus_decay = 1.0f - 0.999f;
    ASSERT_TRUE(ops::AssignMovingAverage(shadow, value, one_minus_decay).ok());
    absl::Status s = ops::AssignMovingAverage(
        gpu_shadow, CopyTo(value, Device::Cuda(0)), one_minus_decay);
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_TRUE(AllClose(CopyTo(gpu_shadow, Device::Cpu()), shadow, 0, 0));
}

// A list longer than one launch takes (24 tensors), sizes around the
// kernel's 4096-element chunks, an empty one, and f32 and f64 lists in one
// call, aligned tensors (16 bytes at a time, with tails) and misaligned
// ones (one element at a time), gradients of one to three terms and of
// the most (kMaxGradientTerms; a misaligned term too): each target updated
// with its own parameters, bit for bit as on the CPU.
TEST_F(CudaTrainingOpsTest, ListsOfManyVariablesMatchTheCpuBitwise) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 30; ++i) {
    constexpr int64_t kCycle[] = {1, 4095, 4096, 4097, 0, 37, 70001};
    sizes.push_back(kCycle[i % 7]);
  }
  // Every fourth variable a view one element into its buffer: not 16-byte
  // aligned, so that tensor is updated one element at a time.
  auto misaligned = [](const Tensor& t) {
    const Tensor buffer =
        *Tensor::Empty(t.dtype(), {t.num_elements() + 1}, Device::Cuda(0));
    Tensor view = *buffer.SliceRows(1, t.num_elements());
    EXPECT_TRUE(view.CopyFrom(t).ok());
    return view;
  };
  auto on_gpu = [&](std::vector<ops::UpdateTarget> targets) {
    for (size_t i = 0; i < targets.size(); ++i) {
      ops::UpdateTarget& t = targets[i];
      t.params = CopyTo(t.params, Device::Cuda(0));
      t.grad = CopyTo(t.grad, Device::Cuda(0));
      for (size_t k = 0; k < t.more_grads.size(); ++k) {
        t.more_grads[k] = i % 5 == 2 && k == 0
                              ? misaligned(t.more_grads[k])
                              : CopyTo(t.more_grads[k], Device::Cuda(0));
      }
      t.var = i % 4 == 1 ? misaligned(t.var) : CopyTo(t.var, Device::Cuda(0));
      for (Tensor& slot : t.slots) slot = CopyTo(slot, Device::Cuda(0));
    }
    return targets;
  };
  for (UpdateRule rule : testing::kEveryUpdateRule) {
    SCOPED_TRACE(static_cast<int>(rule));
    std::vector<ops::UpdateTarget> cpu =
        testing::UpdateTargets(rule, DType::kF32, sizes);
    for (ops::UpdateTarget& t :
         testing::UpdateTargets(rule, DType::kF64, {{5000, 3}})) {
      cpu.push_back(std::move(t));
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      // Every fifth (a 4095-element one among them) of the most terms.
      const size_t more = i % 5 == 3 ? kMaxGradientTerms - 1 : i % 3;
      for (size_t k = 0; k < more; ++k) {
        cpu[i].more_grads.push_back(RandomTensor(
            cpu[i].grad.shape(), 500 + 10 * i + k, cpu[i].grad.dtype()));
      }
    }
    const std::vector<ops::UpdateTarget> gpu = on_gpu(cpu);
    ASSERT_TRUE(ops::ApplyUpdates(rule, cpu).ok());
    absl::Status s = ops::ApplyUpdates(rule, gpu);
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_TRUE(AllClose(CopyTo(gpu[i].var, Device::Cpu()), cpu[i].var, 0, 0))
          << "variable " << i;
      for (size_t k = 0; k < cpu[i].slots.size(); ++k) {
        EXPECT_TRUE(AllClose(CopyTo(gpu[i].slots[k], Device::Cpu()),
                             cpu[i].slots[k], 0, 0))
            << "variable " << i << " slot " << k;
      }
    }
  }
  std::vector<ops::MovingAverageTarget> cpu, gpu;
  for (size_t i = 0; i < sizes.size(); ++i) {
    cpu.push_back({.shadow = RandomTensor({sizes[i]}, i, DType::kF32),
                   .value = RandomTensor({sizes[i]}, 50 + i, DType::kF32),
                   .one_minus_decay =
                       Tensor::HostFull(DType::kF32, {1}, 0.01 * (i + 1))});
    gpu.push_back({.shadow = i % 4 == 1
                                 ? misaligned(cpu.back().shadow)
                                 : CopyTo(cpu.back().shadow, Device::Cuda(0)),
                   .value = CopyTo(cpu.back().value, Device::Cuda(0)),
                   .one_minus_decay =
                       CopyTo(cpu.back().one_minus_decay, Device::Cuda(0))});
  }
  ASSERT_TRUE(ops::AssignMovingAverages(cpu).ok());
  absl::Status s = ops::AssignMovingAverages(gpu);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(
        AllClose(CopyTo(gpu[i].shadow, Device::Cpu()), cpu[i].shadow, 0, 0))
        << "shadow " << i;
  }
}

TEST_F(CudaTrainingOpsTest, MixedDevicesAreRejected) {
  Tensor var = RandomTensor({8}, 1, DType::kF32);
  Tensor grad = CopyTo(RandomTensor({8}, 2, DType::kF32), Device::Cuda(0));
  UpdateHyperparams h;
  h.lr = 0.1;
  absl::Status s =
      ops::ApplyUpdate(UpdateRule::kGradientDescent, h, grad, var, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace mirrortrain
