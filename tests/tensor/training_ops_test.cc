// Argument checks of the training ops (their arithmetic is checked bit for
// bit against TensorFlow by trainer/optim/optimizer_golden_test.cc).
#include "tensor/ops/training_ops.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tensor/update_rule_cases.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using ::testing::HasSubstr;
using testing::RandomTensor;
using testing::SameBits;

TEST(TrainingOpsTest, SlotCountShapeAndDtypeAreChecked) {
  Tensor var = RandomTensor({4, 3}, 1, DType::kF32);
  Tensor grad = RandomTensor({4, 3}, 2, DType::kF32);
  UpdateHyperparams h;
  h.lr = 0.1;
  absl::Status s = ops::ApplyUpdate(UpdateRule::kAdam, h, grad, var, {var});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("2 slot(s), got 1"));
  s = ops::ApplyUpdate(UpdateRule::kGradientDescent, h,
                       RandomTensor({3, 4}, 3, DType::kF32), var, {});
  EXPECT_THAT(std::string(s.message()), HasSubstr("same shape"));
  s = ops::ApplyUpdate(UpdateRule::kGradientDescent, h,
                       RandomTensor({4, 3}, 3, DType::kF64), var, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ops::AssignMovingAverage(var, RandomTensor({12}, 4, DType::kF32), 0.1);
  EXPECT_THAT(std::string(s.message()), HasSubstr("AssignMovingAverage"));
}

TEST(TrainingOpsTest, GradientDescentAndMovingAverageUpdateInPlace) {
  Tensor var = Tensor::FromVector<float>({1, 2, 3}, {3});
  Tensor view = *var.Reshaped({3});  // Shares the buffer.
  UpdateHyperparams h;
  h.lr = 0.5;
  ASSERT_TRUE(ops::ApplyUpdate(UpdateRule::kGradientDescent, h,
                               Tensor::FromVector<float>({2, 2, 2}, {3}), var,
                               {})
                  .ok());
  EXPECT_EQ(view.ToVector<float>(), (std::vector<float>{0, 1, 2}));
  Tensor shadow = Tensor::FromVector<float>({4, 4, 4}, {3});
  ASSERT_TRUE(ops::AssignMovingAverage(shadow, var, 0.25).ok());
  EXPECT_EQ(shadow.ToVector<float>(), (std::vector<float>{3, 3.25, 3.5}));
}

// The parameters as a tensor the kernels read: what PackUpdateParams writes
// is UpdateParams<T>::From, field by field, and a packed update equals the
// one given hyperparameters directly, for every rule and both dtypes.
TEST(TrainingOpsTest, PackedParametersAreTheRoundedHyperparameters) {
  const UpdateHyperparams h = testing::EveryHyperparameter();
  Tensor packed = Tensor::HostEmpty(DType::kF32, {ops::kUpdateParamCount});
  ASSERT_TRUE(ops::PackUpdateParams(h, packed).ok());
  const UpdateParams<float> want = UpdateParams<float>::From(h);
  const std::vector<float> got = packed.ToVector<float>();
  EXPECT_EQ(got[0], want.lr);
  EXPECT_EQ(got[3], want.alpha);
  EXPECT_EQ(got[9], want.weight_decay);
  EXPECT_EQ(std::memcmp(got.data(), &want, sizeof(want)), 0);

  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (UpdateRule rule : testing::kEveryUpdateRule) {
      SCOPED_TRACE(static_cast<int>(rule));
      const Tensor grad = RandomTensor({5, 3}, 2, dtype);
      std::vector<Tensor> vars, slots_a, slots_b;
      Tensor var_a = RandomTensor({5, 3}, 3, dtype);
      Tensor var_b = *var_a.Clone();
      for (int i = 0; i < UpdateRuleSlots(rule); ++i) {
        slots_a.push_back(RandomTensor({5, 3}, 4 + i, dtype, 0.1, 1.0));
        slots_b.push_back(*slots_a.back().Clone());
      }
      Tensor params = Tensor::HostEmpty(dtype, {ops::kUpdateParamCount});
      ASSERT_TRUE(ops::PackUpdateParams(h, params).ok());
      ASSERT_TRUE(ops::ApplyUpdate(rule, h, grad, var_a, slots_a).ok());
      ASSERT_TRUE(ops::ApplyUpdate(rule, params, grad, var_b, slots_b).ok());
      EXPECT_EQ(std::memcmp(var_a.raw_data(), var_b.raw_data(), var_a.bytes()),
                0);
      for (size_t i = 0; i < slots_a.size(); ++i) {
        EXPECT_EQ(std::memcmp(slots_a[i].raw_data(), slots_b[i].raw_data(),
                              slots_a[i].bytes()),
                  0);
      }
    }
  }
}

TEST(TrainingOpsTest, ParameterTensorsAreChecked) {
  Tensor var = RandomTensor({4, 3}, 1, DType::kF32);
  Tensor grad = RandomTensor({4, 3}, 2, DType::kF32);
  for (const Tensor& bad :
       {Tensor::HostZeros(DType::kF64, {ops::kUpdateParamCount}),
        Tensor::HostZeros(DType::kF32, {ops::kUpdateParamCount - 1}),
        Tensor()}) {
    absl::Status s =
        ops::ApplyUpdate(UpdateRule::kGradientDescent, bad, grad, var, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("params must be ",
                                       ops::kUpdateParamCount, " f32")));
  }
  absl::Status s =
      ops::AssignMovingAverage(var, grad, Tensor::HostZeros(DType::kF32, {2}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("one_minus_decay must be 1 f32"));
  s = ops::PackUpdateParams(UpdateHyperparams(),
                            Tensor::HostZeros(DType::kF32, {3}));
  EXPECT_THAT(std::string(s.message()), HasSubstr("PackUpdateParams"));
}

TEST(TrainingOpsTest, MovingAverageReadsItsDecayFromATensor) {
  Tensor value = RandomTensor({7}, 1, DType::kF64);
  Tensor a = RandomTensor({7}, 2, DType::kF64);
  Tensor b = *a.Clone();
  ASSERT_TRUE(ops::AssignMovingAverage(a, value, 0.125).ok());
  ASSERT_TRUE(ops::AssignMovingAverage(
                  b, value, Tensor::HostFull(DType::kF64, {1}, 0.125))
                  .ok());
  EXPECT_EQ(a.ToVector<double>(), b.ToVector<double>());
}

// Deep copies, to update separately.
std::vector<ops::UpdateTarget> Clones(
    const std::vector<ops::UpdateTarget>& targets) {
  std::vector<ops::UpdateTarget> out = targets;
  for (ops::UpdateTarget& t : out) {
    t.var = *t.var.Clone();
    for (Tensor& slot : t.slots) slot = *slot.Clone();
  }
  return out;
}

TEST(TrainingOpsTest, AListUpdatesAsOneCallPerVariable) {
  const std::vector<int64_t> sizes = {5, 0, 1, 300, 17};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (UpdateRule rule : testing::kEveryUpdateRule) {
      SCOPED_TRACE(static_cast<int>(rule));
      const std::vector<ops::UpdateTarget> list =
          testing::UpdateTargets(rule, dtype, sizes);
      const std::vector<ops::UpdateTarget> each = Clones(list);
      ASSERT_TRUE(ops::ApplyUpdates(rule, list).ok());
      for (size_t i = 0; i < each.size(); ++i) {
        const ops::UpdateTarget& t = each[i];
        ASSERT_TRUE(
            ops::ApplyUpdate(rule, t.params, t.grad, t.var, t.slots).ok());
        EXPECT_TRUE(SameBits(list[i].var, t.var)) << "variable " << i;
        for (size_t s = 0; s < t.slots.size(); ++s) {
          EXPECT_TRUE(SameBits(list[i].slots[s], t.slots[s])) << i << " " << s;
        }
      }
    }
  }
  // Moving averages: each shadow with a decay of its own.
  std::vector<ops::MovingAverageTarget> averages;
  for (size_t i = 0; i < sizes.size(); ++i) {
    averages.push_back(
        {.shadow = RandomTensor({sizes[i]}, i, DType::kF32),
         .value = RandomTensor({sizes[i]}, 50 + i, DType::kF32),
         .one_minus_decay = Tensor::HostFull(DType::kF32, {1}, 0.1 * (i + 1))});
  }
  std::vector<Tensor> expected;
  for (const ops::MovingAverageTarget& t : averages) {
    expected.push_back(*t.shadow.Clone());
    ASSERT_TRUE(
        ops::AssignMovingAverage(expected.back(), t.value, t.one_minus_decay)
            .ok());
  }
  ASSERT_TRUE(ops::AssignMovingAverages(averages).ok());
  for (size_t i = 0; i < averages.size(); ++i) {
    EXPECT_TRUE(SameBits(averages[i].shadow, expected[i])) << i;
  }
}

// A gradient given as terms updates as their sum would, bit for bit: every
// rule, lists of 2..8 terms, sizes across the loop's 2048-element blocks.
TEST(TrainingOpsTest, AGradientOfTermsUpdatesAsTheirSum) {
  const std::vector<int64_t> sizes = {5, 0, 2049, 4100, 17};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (UpdateRule rule : testing::kEveryUpdateRule) {
      for (int terms : {2, 3, kMaxGradientTerms}) {
        SCOPED_TRACE(absl::StrCat(static_cast<int>(rule), " ", terms));
        std::vector<ops::UpdateTarget> list =
            testing::UpdateTargets(rule, dtype, sizes);
        testing::AddGradientTerms(list, terms);
        const std::vector<ops::UpdateTarget> summed =
            testing::SummedGradients(Clones(list));
        ASSERT_TRUE(ops::ApplyUpdates(rule, list).ok());
        ASSERT_TRUE(ops::ApplyUpdates(rule, summed).ok());
        for (size_t i = 0; i < list.size(); ++i) {
          EXPECT_TRUE(SameBits(list[i].var, summed[i].var)) << "variable " << i;
          for (size_t s = 0; s < list[i].slots.size(); ++s) {
            EXPECT_TRUE(SameBits(list[i].slots[s], summed[i].slots[s]))
                << i << " " << s;
          }
        }
      }
    }
  }
}

TEST(TrainingOpsTest, GradientTermsAreChecked) {
  const UpdateRule rule = UpdateRule::kMomentum;
  std::vector<ops::UpdateTarget> list =
      testing::UpdateTargets(rule, DType::kF32, {{4, 6}});
  const std::vector<ops::UpdateTarget> before = Clones(list);
  testing::AddGradientTerms(list, kMaxGradientTerms + 1);
  absl::Status s = ops::ApplyUpdates(rule, list);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("at most 8 terms, got 9"));
  list = Clones(before);
  list[1].more_grads = {RandomTensor({6}, 1, DType::kF32),
                        RandomTensor({5}, 2, DType::kF32)};
  s = ops::ApplyUpdates(rule, list);
  EXPECT_THAT(std::string(s.message()), HasSubstr("same shape"));
  list[1].more_grads = {RandomTensor({6}, 1, DType::kF64)};
  s = ops::ApplyUpdates(rule, list);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_TRUE(SameBits(list[i].var, before[i].var)) << i;
  }
}

TEST(TrainingOpsTest, ABadListUpdatesNothing) {
  const UpdateRule rule = UpdateRule::kMomentum;
  std::vector<ops::UpdateTarget> list =
      testing::UpdateTargets(rule, DType::kF32, {{4, 6, 8}});
  const std::vector<ops::UpdateTarget> before = Clones(list);
  // The last target's slot has the wrong shape.
  list[2].slots[0] = RandomTensor({7}, 1, DType::kF32);
  absl::Status s = ops::ApplyUpdates(rule, list);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("same shape"));
  // A variable listed twice (here as a view of the same buffer).
  list[2] = before[2];
  list[2].var = *list[0].var.Reshaped({4});
  list[2].grad = list[0].grad;
  list[2].slots = {RandomTensor({4}, 2, DType::kF32)};
  s = ops::ApplyUpdates(rule, list);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overlap"));
  // Views that start apart but overlap: elements 1..2 of the first
  // variable as the third's.
  list[2].var = *list[0].var.SliceRows(1, 2);
  list[2].grad = *list[0].grad.SliceRows(1, 2);
  list[2].slots = {RandomTensor({2}, 2, DType::kF32)};
  s = ops::ApplyUpdates(rule, list);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overlap"));
  // A slot that aliases another target's variable.
  list[2] = before[2];
  list[2].slots = {*list[1].var.Reshaped({6})};
  list[2].var = RandomTensor({6}, 3, DType::kF32);
  list[2].grad = RandomTensor({6}, 4, DType::kF32);
  s = ops::ApplyUpdates(rule, list);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overlap"));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(SameBits(list[i].var, before[i].var)) << i;
    EXPECT_TRUE(SameBits(list[i].slots[0], before[i].slots[0])) << i;
  }
  Tensor shadow = RandomTensor({3}, 1, DType::kF32);
  const Tensor kept = *shadow.Clone();
  const Tensor decay = Tensor::HostFull(DType::kF32, {1}, 0.5);
  const std::vector<ops::MovingAverageTarget> twice = {
      {shadow, RandomTensor({3}, 2, DType::kF32), decay},
      {shadow, RandomTensor({3}, 3, DType::kF32), decay}};
  s = ops::AssignMovingAverages(twice);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overlap"));
  EXPECT_TRUE(SameBits(shadow, kept));
}

}  // namespace
}  // namespace mirrortrain
