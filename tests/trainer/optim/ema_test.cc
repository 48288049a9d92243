// ExponentialMovingAverage against tf.compat.v1.train.ExponentialMovingAverage
// (ema/* in tests/golden/ema_schedules.txt, written by
// scripts/golden/ema_schedules.py), and ScopedEmaWeights.
#include "trainer/optim/ema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/variable.h"
#include "tests/test_util.h"

namespace mirrortrain::trainer {
namespace {

const std::map<std::string, Tensor>& Golden() {
  return testing::CachedGolden("ema_schedules.txt");
}

Tensor Row(const Tensor& t, int64_t row) {
  return *t.SliceRows(row, 1)->Reshaped({t.dim(1)});
}

// The golden protocol: shadow_0 = init; for k = 1..10 the variable takes
// ema/values[k-1] (as an optimizer step would), then Apply(k).
void CheckGolden(bool use_num_updates, const std::string& name) {
  const auto& g = Golden();
  ASSERT_FALSE(g.empty()) << "cannot load "
                          << testing::GoldenPath("ema_schedules.txt");
  const double decay = 0.99;
  ASSERT_EQ(static_cast<float>(decay), g.at("ema/decay").data<float>()[0]);
  auto var = Variable::Create("dense/kernel", g.at("ema/init"));
  ASSERT_TRUE(var.ok()) << var.status();
  auto ema = ExponentialMovingAverage::Create(decay, use_num_updates);
  ASSERT_TRUE(ema.ok()) << ema.status();
  ASSERT_TRUE((*ema)->Track({&*var}).ok());
  Variable* shadow = (*ema)->Shadow(*var);
  ASSERT_NE(shadow, nullptr);
  EXPECT_TRUE(testing::SameBits(shadow->value(), g.at("ema/init")));
  const Tensor& want = g.at(name);
  double worst = 0;
  for (int k = 1; k <= 10; ++k) {
    ASSERT_TRUE(var->Assign(Row(g.at("ema/values"), k - 1)).ok());
    ASSERT_TRUE((*ema)->Apply(k).ok());
    const Tensor row = Row(want, k - 1);
    // Bit for bit: the same f32 operations in the same order.
    EXPECT_TRUE(testing::SameBits(shadow->value(), row))
        << name << " after apply " << k;
    for (int64_t i = 0; i < row.num_elements(); ++i) {
      worst = std::max(worst,
                       std::abs(shadow->value().ScalarAt(i) - row.ScalarAt(i)));
    }
  }
  std::printf("[ golden   ] %s: max |diff| vs TF %.3g\n", name.c_str(), worst);
}

TEST(EmaGoldenTest, WithNumUpdates) {
  CheckGolden(true, "ema/shadow_num_updates");
}

TEST(EmaGoldenTest, PlainDecay) { CheckGolden(false, "ema/shadow_plain"); }

TEST(EmaTest, DecayAt) {
  ExponentialMovingAverage with(0.999, true), without(0.999, false);
  EXPECT_EQ(with.DecayAt(1), static_cast<double>(2.0f / 11.0f));
  EXPECT_EQ(with.DecayAt(100000), static_cast<double>(0.999f));
  // float32, as TensorFlow's decay tensor.
  EXPECT_EQ(without.DecayAt(1), static_cast<double>(0.999f));
}

TEST(EmaTest, ShadowsStartAtTheInitialValueAndAreNamed) {
  Variable w =
      *Variable::Create("dense/bias", Tensor::FromVector<float>({1, 2}, {2}));
  ASSERT_TRUE(w.Assign(Tensor::FromVector<float>({5, 6}, {2})).ok());
  Variable k =
      *Variable::Create("dense/kernel", Tensor::FromVector<double>({3}, {1}));
  ExponentialMovingAverage ema(0.5, false);
  ASSERT_TRUE(ema.Track({&w, &k}).ok());
  ASSERT_TRUE(ema.Track({&w}).ok());  // no-op
  ASSERT_EQ(ema.ShadowVariables().size(), 2u);
  Variable* s = ema.Shadow(w);
  EXPECT_EQ(s, ema.ShadowVariables()[0]);
  EXPECT_EQ(s->name(), "dense/bias/ExponentialMovingAverage");
  EXPECT_FALSE(s->trainable());
  EXPECT_EQ(s->value().ToVector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(ema.ShadowVariables()[1]->name(),
            "dense/kernel/ExponentialMovingAverage");
  EXPECT_EQ(ema.ShadowVariables()[1]->dtype(), DType::kF64);
  Variable other = *Variable::Create("x", Tensor::FromVector<float>({1}, {1}));
  EXPECT_EQ(ema.Shadow(other), nullptr);

  ASSERT_TRUE(ema.Apply(1).ok());
  EXPECT_EQ(s->value().ToVector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(ema.ShadowVariables()[1]->value().ToVector<double>(),
            (std::vector<double>{3}));
}

TEST(EmaTest, BadArguments) {
  EXPECT_EQ(ExponentialMovingAverage::Create(1.5, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ExponentialMovingAverage::Create(-0.1, true)
                .status()
                .message()
                .find("ema.decay"),
            std::string::npos);
  ExponentialMovingAverage ema(0.9, true);
  EXPECT_FALSE(ema.Track({nullptr}).ok());
  Variable ints = *Variable::Create("step", Tensor::Scalar<int64_t>(0));
  EXPECT_FALSE(ema.Track({&ints}).ok());
  EXPECT_FALSE(ema.Apply(-1).ok());
}

// Stage + ApplyStaged (a replayed CUDA graph's halves) equal Apply, with
// the decay changing every update (use_num_updates) and two dtypes.
TEST(EmaTest, StagedUpdatesEqualApply) {
  Variable f1 = *Variable::Create("f", Tensor::FromVector<float>({1, 2}, {2}));
  Variable d1 = *Variable::Create("d", Tensor::FromVector<double>({3}, {1}));
  Variable f2 = *Variable::Create("f", Tensor::FromVector<float>({1, 2}, {2}));
  Variable d2 = *Variable::Create("d", Tensor::FromVector<double>({3}, {1}));
  ExponentialMovingAverage a(0.99, true), b(0.99, true);
  ASSERT_TRUE(a.Track({&f1, &d1}).ok());
  ASSERT_TRUE(b.Track({&f2, &d2}).ok());
  EXPECT_EQ(b.ApplyStaged().code(), absl::StatusCode::kFailedPrecondition);
  for (int64_t n = 1; n <= 5; ++n) {
    for (Variable* v : {&f1, &f2}) {
      ASSERT_TRUE(
          v->AssignAdd(Tensor::FromVector<float>({0.5f, -0.25f}, {2})).ok());
    }
    for (Variable* v : {&d1, &d2}) {
      ASSERT_TRUE(v->AssignAdd(Tensor::FromVector<double>({0.125}, {1})).ok());
    }
    ASSERT_TRUE(a.Apply(n).ok());
    ASSERT_TRUE(b.Stage(n).ok());
    ASSERT_TRUE(b.ApplyStaged().ok());
    EXPECT_EQ(a.Shadow(f1)->value().ToVector<float>(),
              b.Shadow(f2)->value().ToVector<float>());
    EXPECT_EQ(a.Shadow(d1)->value().ToVector<double>(),
              b.Shadow(d2)->value().ToVector<double>());
  }
  EXPECT_NE(a.Shadow(f1)->value().ToVector<float>(),
            (std::vector<float>{1, 2}));
}

TEST(EmaTest, ScopedEmaWeightsSwapsAndRestoresBitwise) {
  const Tensor init = testing::RandomTensor({7}, 3, DType::kF32);
  Variable w = *Variable::Create("w", init);
  ExponentialMovingAverage ema(0.9, true);
  ASSERT_TRUE(ema.Track({&w}).ok());
  for (int k = 1; k <= 5; ++k) {
    ASSERT_TRUE(w.Assign(testing::RandomTensor({7}, 10 + k, DType::kF32)).ok());
    ASSERT_TRUE(ema.Apply(k).ok());
  }
  const Tensor trained = *w.value().Clone();
  const Tensor shadow = *ema.Shadow(w)->value().Clone();
  ASSERT_FALSE(testing::SameBits(trained, shadow));
  {
    auto swapped = ScopedEmaWeights::Create(ema);
    ASSERT_TRUE(swapped.ok()) << swapped.status();
    EXPECT_TRUE(testing::SameBits(w.value(), shadow));
    // Moving the guard hands over the restore duty exactly once.
    ScopedEmaWeights moved = *std::move(swapped);
    EXPECT_TRUE(testing::SameBits(w.value(), shadow));
  }
  EXPECT_TRUE(testing::SameBits(w.value(), trained));
  EXPECT_TRUE(testing::SameBits(ema.Shadow(w)->value(), shadow));

  auto swapped = ScopedEmaWeights::Create(ema);
  ASSERT_TRUE(swapped.ok());
  EXPECT_TRUE(testing::SameBits(w.value(), shadow));
  EXPECT_TRUE(swapped->Restore().ok());
  EXPECT_TRUE(testing::SameBits(w.value(), trained));
  // Restoring again (explicitly or on destruction) is a no-op.
  ASSERT_TRUE(w.Assign(init).ok());
  EXPECT_TRUE(swapped->Restore().ok());
  EXPECT_TRUE(testing::SameBits(w.value(), init));
}

}  // namespace
}  // namespace mirrortrain::trainer
