// Argument checks of the training ops (their arithmetic is checked bit for
// bit against TensorFlow by trainer/optim/optimizer_golden_test.cc).
#include "tensor/ops/training_ops.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using ::testing::HasSubstr;
using testing::RandomTensor;

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

}  // namespace
}  // namespace mirrortrain
