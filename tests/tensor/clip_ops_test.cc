#include "tensor/ops/clip_ops.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mirrortrain {
namespace {

TEST(ClipOpsTest, ClipByNormOfEachGradient) {
  // Gradients [9.0] and [12.0] clipped to norm 5 are both [5.0].
  for (float g : {9.0f, 12.0f}) {
    auto c = ops::ClipByNorm(Tensor::FromVector<float>({g}, {1}), 5.0);
    ASSERT_TRUE(c.ok());
    EXPECT_FLOAT_EQ(c->ToVector<float>()[0], 5.0f);
  }
  // Below the clip: unchanged.
  auto c = ops::ClipByNorm(Tensor::FromVector<float>({3, 4}, {2}), 10.0);
  EXPECT_EQ(c->ToVector<float>(), (std::vector<float>{3, 4}));
  EXPECT_FALSE(ops::ClipByNorm(Tensor::FromVector<float>({1}, {1}), 0).ok());
}

TEST(ClipOpsTest, ClipByGlobalNorm) {
  // Global norm of [9] and [12] is 15; each is scaled by 5/15.
  auto r = ops::ClipByGlobalNorm({Tensor::FromVector<float>({9}, {1}),
                                  Tensor::FromVector<float>({12}, {1})},
                                 5.0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->global_norm.shape(), Shape{});
  EXPECT_DOUBLE_EQ(r->global_norm.ToVector<double>()[0], 15.0);
  EXPECT_FLOAT_EQ(r->tensors[0].ToVector<float>()[0], 3.0f);
  EXPECT_FLOAT_EQ(r->tensors[1].ToVector<float>()[0], 4.0f);
  auto small =
      ops::ClipByGlobalNorm({Tensor::FromVector<float>({3, 4}, {2})}, 10.0);
  EXPECT_EQ(small->tensors[0].ToVector<float>(), (std::vector<float>{3, 4}));
}

TEST(ClipOpsTest, NonFiniteGlobalNormMakesEverythingNaN) {
  auto r = ops::ClipByGlobalNorm({Tensor::FromVector<float>({1, INFINITY}, {2}),
                                  Tensor::FromVector<float>({2}, {1})},
                                 5.0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(std::isfinite(r->global_norm.ToVector<double>()[0]));
  for (const Tensor& t : r->tensors) {
    for (float v : t.ToVector<float>()) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(ClipOpsTest, ClipByValue) {
  auto c =
      ops::ClipByValue(Tensor::FromVector<float>({-3, 0.5, 7}, {3}), -1, 2);
  EXPECT_EQ(c->ToVector<float>(), (std::vector<float>{-1, 0.5, 2}));
  EXPECT_FALSE(
      ops::ClipByValue(Tensor::FromVector<float>({1}, {1}), 2, 1).ok());
}

}  // namespace
}  // namespace mirrortrain
