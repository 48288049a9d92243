// The GradientTape cases TensorFlow users know.
#include "tensor/gradient_tape.h"

#include "gtest/gtest.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/variable.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

Tensor F(double v) { return Tensor::Scalar<double>(v); }

// With a = 0 and b = 2a: d(a+b)/d[a,b] is [3, 1], or [1, 1] when a and b
// are stop sources (tf.gradients' stop_gradients example).
TEST(GradientTapeTest, StopSourcesBlockFlowThroughThem) {
  for (bool stop : {false, true}) {
    GradientTape tape;
    Tensor a = F(0);
    tape.Watch(a);
    Tensor two = F(2);
    Tensor b = *ops::Mul(two, a);
    Tensor sum = *ops::Add(a, b);
    GradientOptions options;
    if (stop) options.stop_gradients = {a, b};
    auto grads = tape.Gradient(sum, {a, b}, options);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_TRUE((*grads)[0].has_value() && (*grads)[1].has_value());
    EXPECT_EQ((*grads)[0]->ScalarAt(0), stop ? 1.0 : 3.0);
    EXPECT_EQ((*grads)[1]->ScalarAt(0), 1.0);
  }
}

TEST(GradientTapeTest, StopGradientOpBlocksFlow) {
  GradientTape tape;
  Tensor a = F(3);
  tape.Watch(a);
  Tensor b = *ops::StopGradient(*ops::Square(a));
  Tensor y = *ops::Add(*ops::Mul(b, a), a);  // b is a constant 9 here.
  auto grads = tape.Gradient(y, {a});
  ASSERT_TRUE(grads.ok());
  EXPECT_EQ((*grads)[0]->ScalarAt(0), 10.0);
}

TEST(GradientTapeTest, UnconnectedSourcesAreEmptyOrZero) {
  for (auto mode : {UnconnectedGradients::kNone, UnconnectedGradients::kZero}) {
    GradientTape tape;
    Tensor x = F(2), unused = Tensor::FromVector<double>({1, 2}, {2});
    tape.Watch(x);
    tape.Watch(unused);
    Tensor y = *ops::Square(x);
    GradientOptions options;
    options.unconnected = mode;
    auto grads = tape.Gradient(y, {x, unused}, options);
    ASSERT_TRUE(grads.ok());
    EXPECT_EQ((*grads)[0]->ScalarAt(0), 4.0);
    if (mode == UnconnectedGradients::kNone) {
      EXPECT_FALSE((*grads)[1].has_value());
    } else {
      ASSERT_TRUE((*grads)[1].has_value());
      EXPECT_EQ((*grads)[1]->ToVector<double>(), (std::vector<double>{0, 0}));
    }
  }
}

TEST(GradientTapeTest, OutputGradientsScaleTheResult) {
  GradientTape tape;
  Tensor x = Tensor::FromVector<double>({1, 2, 3}, {3});
  tape.Watch(x);
  Tensor y = *ops::Square(x);
  GradientOptions options;
  options.output_gradient = Tensor::FromVector<double>({1, 10, 100}, {3});
  auto grads = tape.Gradient(y, {x}, options);
  ASSERT_TRUE(grads.ok());
  EXPECT_EQ((*grads)[0]->ToVector<double>(), (std::vector<double>{2, 40, 600}));

  GradientTape tape2;
  tape2.Watch(x);
  Tensor y2 = *ops::Square(x);
  options.output_gradient = Tensor::FromVector<double>({1, 2}, {2});
  EXPECT_EQ(tape2.Gradient(y2, {x}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The refused call did not use the (non-persistent) tape up.
  auto retried = tape2.Gradient(y2, {x});
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ((*retried)[0]->ToVector<double>(), (std::vector<double>{2, 4, 6}));
}

TEST(GradientTapeTest, NonPersistentTapeAnswersOnce) {
  Tensor x = F(3);
  {
    GradientTape tape;
    tape.Watch(x);
    Tensor y = *ops::Square(x);
    EXPECT_TRUE(tape.Gradient(y, {x}).ok());
    EXPECT_EQ(tape.Gradient(y, {x}).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  GradientTape tape(/*persistent=*/true);
  tape.Watch(x);
  Tensor y = *ops::Square(x);
  Tensor z = *ops::Exp(y);
  EXPECT_EQ((*tape.Gradient(y, {x}).value()[0]).ScalarAt(0), 6.0);
  EXPECT_NEAR((*tape.Gradient(z, {x}).value()[0]).ScalarAt(0),
              6.0 * std::exp(9.0), 1e-6);
}

TEST(GradientTapeTest, UnwatchedTensorsAreNotRecorded) {
  GradientTape tape;
  Tensor x = F(3);
  Tensor y = *ops::Square(x);
  auto grads = tape.Gradient(y, {x});
  ASSERT_TRUE(grads.ok());
  EXPECT_FALSE((*grads)[0].has_value());
}

TEST(GradientTapeTest, TrainableVariablesAreWatchedAutomatically) {
  Variable v = *Variable::Create("v", F(2));
  Variable frozen = *Variable::Create("frozen", F(5), /*trainable=*/false);
  GradientTape tape;
  Tensor y = *ops::Mul(*ops::Square(v.value()), frozen.value());
  auto grads = tape.Gradient(y, {v.value(), frozen.value()});
  ASSERT_TRUE(grads.ok());
  EXPECT_EQ((*grads)[0]->ScalarAt(0), 20.0);
  EXPECT_FALSE((*grads)[1].has_value());
}

// Whether a gradient with respect to a tensor can still be asked for: a
// watched tensor, a trainable variable read in scope and a recorded op's
// output, on a tape that records; not a frozen variable, an unrecorded
// op's output, or anything once no tape records (inside the only tape's
// Gradient, where the gradient functions run).
TEST(GradientTapeTest, AnyRecordingTapeWatchesWhatAGradientCanReach) {
  Variable v = *Variable::Create("v", F(2));
  Variable frozen = *Variable::Create("frozen", F(5), /*trainable=*/false);
  Tensor x = F(3);
  EXPECT_FALSE(tape::AnyRecordingTapeWatches(x));
  GradientTape tape;
  tape.Watch(x);
  const Tensor unrecorded = *ops::Square(frozen.value());
  const Tensor y = *ops::Mul(*ops::Square(x), v.value());
  EXPECT_TRUE(tape::AnyRecordingTapeWatches(x));
  EXPECT_TRUE(tape::AnyRecordingTapeWatches(v.value()));
  EXPECT_TRUE(tape::AnyRecordingTapeWatches(y));
  EXPECT_FALSE(tape::AnyRecordingTapeWatches(frozen.value()));
  EXPECT_FALSE(tape::AnyRecordingTapeWatches(unrecorded));
  GradientOptions options;
  bool asked = false;
  options.on_gradient_ready = [&](size_t, std::optional<Tensor>) {
    asked = true;
    EXPECT_FALSE(tape::AnyRecordingTapeWatches(x));
  };
  ASSERT_TRUE(tape.Gradient(y, {x}, options).ok());
  EXPECT_TRUE(asked);
}

TEST(GradientTapeTest, GradientOfATargetWithRespectToItself) {
  GradientTape tape;
  Tensor x = F(3);
  tape.Watch(x);
  auto grads = tape.Gradient(x, {x});
  ASSERT_TRUE(grads.ok());
  EXPECT_EQ((*grads)[0]->ScalarAt(0), 1.0);
}

TEST(GradientTapeTest, ReusedTensorsAccumulate) {
  GradientTape tape;
  Tensor x = F(3);
  tape.Watch(x);
  Tensor y = *ops::Add(*ops::Mul(x, x), x);  // x^2 + x
  EXPECT_EQ((*tape.Gradient(y, {x}).value()[0]).ScalarAt(0), 7.0);
}

TEST(GradientTapeTest, NestedTapesBothRecord) {
  Tensor x = F(2);
  GradientTape outer;
  outer.Watch(x);
  GradientTape inner;
  inner.Watch(x);
  Tensor y = *ops::Mul(*ops::Square(x), x);  // x^3
  auto dy = inner.Gradient(y, {x});
  ASSERT_TRUE(dy.ok());
  EXPECT_EQ((*dy)[0]->ScalarAt(0), 12.0);
  // The outer tape recorded the inner gradient computation (through Mul,
  // Square's 2x and Add): d/dx 3x^2 = 6x.
  auto d2y = outer.Gradient(*(*dy)[0], {x});
  ASSERT_TRUE(d2y.ok()) << d2y.status();
  ASSERT_TRUE((*d2y)[0].has_value());
  EXPECT_EQ((*d2y)[0]->ScalarAt(0), 12.0);
}

// Sigmoid's gradient is one unrecorded kernel (OpDef::gradient_recorded is
// false): an outer tape cannot differentiate it again, which is an error
// naming the op, where the outer gradient used to come back empty. The
// outer tape still differentiates the forward pass it recorded.
TEST(GradientTapeTest, AGradientOfUnrecordedKernelsIsNotDifferentiatedAgain) {
  Tensor x = F(0.5);
  GradientTape outer(/*persistent=*/true);
  outer.Watch(x);
  GradientTape inner;
  inner.Watch(x);
  const Tensor y = *ops::Sigmoid(*ops::Mul(x, x));
  auto dy = inner.Gradient(y, {x});
  ASSERT_TRUE(dy.ok()) << dy.status();
  auto d2y = outer.Gradient(*(*dy)[0], {x});
  EXPECT_EQ(d2y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(d2y.status().message()),
            "GradientTape.Gradient: the gradient of op Sigmoid cannot be "
            "differentiated again (its kernels are not recorded); the target "
            "depends on a source through it");
  auto again = outer.Gradient(y, {x});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ((*again)[0]->ScalarAt(0), (*dy)[0]->ScalarAt(0));
}

}  // namespace
}  // namespace mirrortrain

namespace mirrortrain {
namespace {

TEST(GradientTapeTest, GradientReadyCallbackFiresOnceFinalInBackwardOrder) {
  // y = (x0 * 2) * x1 + x2 where x1 is also used first, and x3 unused.
  Tensor x0 = Tensor::Scalar<double>(1), x1 = Tensor::Scalar<double>(3),
         x2 = Tensor::Scalar<double>(5), x3 = Tensor::Scalar<double>(7);
  GradientTape tape;
  for (const Tensor& x : {x0, x1, x2, x3}) tape.Watch(x);
  Tensor a = *ops::Mul(x1, x1);     // First use of x1.
  Tensor b = *ops::Scale(x0, 2.0);  // First use of x0.
  Tensor c = *ops::Mul(*ops::Mul(b, a), x1);
  Tensor y = *ops::Add(c, x2);
  std::vector<size_t> order;
  std::vector<double> seen(4, -1);
  GradientOptions options;
  options.unconnected = UnconnectedGradients::kZero;
  options.on_gradient_ready = [&](size_t k, std::optional<Tensor> g) {
    order.push_back(k);
    ASSERT_TRUE(g.has_value());
    seen[k] = g->ScalarAt(0);
  };
  auto grads = tape.Gradient(y, {x0, x1, x2, x3}, options);
  ASSERT_TRUE(grads.ok());
  // x2 is final first (last used), then x0, x1 (its first use is earliest),
  // then the unconnected x3 at the end.
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 1, 3}));
  // y = 2*x0*x1^3 + x2.
  EXPECT_EQ(seen, (std::vector<double>{2.0 * 27, 6.0 * 9, 1.0, 0.0}));
  // The listener was handed the gradients; the tape returns none.
  for (const std::optional<Tensor>& g : *grads) EXPECT_FALSE(g.has_value());
}

TEST(GradientTapeTest, ReadyGradientsAreHandedOverExclusiveUnlessShared) {
  // y = sum((w * x + b) * c): b's gradient is the one Add passes on to the
  // product too (shared until the walk reaches w); w's is a fresh product.
  Tensor w = Tensor::FromVector<float>({1, 2}, {2});
  Tensor b = Tensor::FromVector<float>({3, 4}, {2});
  Tensor x = Tensor::FromVector<float>({5, 6}, {2});
  Tensor c = Tensor::FromVector<float>({7, 8}, {2});
  GradientTape tape;
  tape.Watch(w);
  tape.Watch(b);
  Tensor y = *ops::ReduceSum(*ops::Mul(*ops::Add(*ops::Mul(w, x), b), c));
  std::vector<bool> exclusive(2, false);
  std::vector<std::vector<float>> seen(2);
  GradientOptions options;
  options.on_gradient_ready = [&](size_t k, std::optional<Tensor> g) {
    ASSERT_TRUE(g.has_value());
    exclusive[k] = g->IsExclusive();
    seen[k] = g->ToVector<float>();
  };
  ASSERT_TRUE(tape.Gradient(y, {w, b}, options).ok());
  EXPECT_TRUE(exclusive[0]);
  EXPECT_FALSE(exclusive[1]);
  EXPECT_EQ(seen[0], (std::vector<float>{35, 48}));  // c * x.
  EXPECT_EQ(seen[1], (std::vector<float>{7, 8}));    // c.
}

}  // namespace
}  // namespace mirrortrain
