// Finite-difference checks (float64) of every differentiable op's gradient.
#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::ExpectGradientsMatch;
using testing::RandomTensor;
using Inputs = std::vector<Tensor>;

TEST(GradientCheck, MatMulAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      Tensor a = RandomTensor(ta ? Shape{4, 3} : Shape{3, 4}, 1);
      Tensor b = RandomTensor(tb ? Shape{5, 4} : Shape{4, 5}, 2);
      ExpectGradientsMatch(
          [&](const Inputs& in) { return ops::MatMul(in[0], in[1], ta, tb); },
          {a, b});
    }
  }
}

struct BinaryCase {
  Shape a, b;
};

class BroadcastBinaryTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BroadcastBinaryTest, AddSubMulDiv) {
  const BinaryCase& c = GetParam();
  Tensor a = RandomTensor(c.a, 3);
  // Denominators away from zero.
  Tensor b = RandomTensor(c.b, 4, DType::kF64, 0.5, 2.0);
  for (auto* fn : {&ops::Add, &ops::Sub, &ops::Mul, &ops::Div}) {
    ExpectGradientsMatch([fn](const Inputs& in) { return fn(in[0], in[1]); },
                         {a, b});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BroadcastBinaryTest,
    ::testing::Values(BinaryCase{{2, 3}, {2, 3}}, BinaryCase{{2, 3}, {3}},
                      BinaryCase{{2, 3}, {}}, BinaryCase{{}, {2, 3}},
                      BinaryCase{{2, 1, 4}, {3, 1}}, BinaryCase{{1, 3}, {2, 1}},
                      BinaryCase{{2, 3, 4}, {2, 1, 4}}));

TEST(GradientCheck, UnaryOps) {
  Tensor x = RandomTensor({3, 4}, 5, DType::kF64, -2.0, 2.0);
  Tensor pos = RandomTensor({3, 4}, 6, DType::kF64, 0.5, 3.0);
  for (auto* fn : {&ops::Neg, &ops::Exp, &ops::Square, &ops::Relu,
                   &ops::Sigmoid, &ops::Tanh}) {
    ExpectGradientsMatch([fn](const Inputs& in) { return fn(in[0]); }, {x});
  }
  for (auto* fn : {&ops::Log, &ops::Sqrt}) {
    ExpectGradientsMatch([fn](const Inputs& in) { return fn(in[0]); }, {pos});
  }
}

TEST(GradientCheck, BiasAdd) {
  ExpectGradientsMatch(
      [](const Inputs& in) { return ops::BiasAdd(in[0], in[1]); },
      {RandomTensor({2, 3, 4}, 7), RandomTensor({4}, 8)});
}

TEST(GradientCheck, BiasAddRelu) {
  ExpectGradientsMatch(
      [](const Inputs& in) { return ops::BiasAddRelu(in[0], in[1]); },
      {RandomTensor({2, 3, 4}, 7), RandomTensor({4}, 8)});
}

// The fused op against the chain it replaces, on enough rows for several
// bias partial-sum blocks.
TEST(GradientCheck, BiasAddReluEqualsBiasAddThenRelu) {
  Tensor x = RandomTensor({5003, 7}, 21);
  Tensor b = RandomTensor({7}, 22);
  Tensor dy = RandomTensor({5003, 7}, 23);
  auto run = [&](bool fused) {
    GradientTape tape;
    tape.Watch(x);
    tape.Watch(b);
    absl::StatusOr<Tensor> y =
        fused ? ops::BiasAddRelu(x, b) : ops::Relu(*ops::BiasAdd(x, b));
    EXPECT_TRUE(y.ok()) << y.status();
    GradientOptions options;
    options.output_gradient = dy;
    auto grads = tape.Gradient(*y, {x, b}, options);
    EXPECT_TRUE(grads.ok()) << grads.status();
    return std::vector<Tensor>{*y, *(*grads)[0], *(*grads)[1]};
  };
  std::vector<Tensor> fused = run(true), chain = run(false);
  EXPECT_TRUE(testing::AllClose(fused[0], chain[0], 0, 0));
  EXPECT_TRUE(testing::AllClose(fused[1], chain[1], 0, 0));
  EXPECT_TRUE(testing::AllClose(fused[2], chain[2], 1e-12, 1e-12));
  EXPECT_FALSE(ops::BiasAddRelu(x, RandomTensor({6}, 1)).ok());
}

TEST(GradientCheck, SoftmaxAndLogSoftmax) {
  Tensor x = RandomTensor({3, 5}, 9, DType::kF64, -3, 3);
  ExpectGradientsMatch([](const Inputs& in) { return ops::Softmax(in[0]); },
                       {x});
  ExpectGradientsMatch([](const Inputs& in) { return ops::LogSoftmax(in[0]); },
                       {x});
}

TEST(GradientCheck, SparseSoftmaxCrossEntropy) {
  Tensor logits = RandomTensor({4, 6}, 10, DType::kF64, -3, 3);
  Tensor labels = Tensor::FromVector<int64_t>({0, 5, 2, 2}, {4});
  ExpectGradientsMatch(
      [](const Inputs& in) {
        return ops::SparseSoftmaxCrossEntropyWithLogits(in[0], in[1]);
      },
      {logits, labels});
}

TEST(GradientCheck, Reductions) {
  Tensor x = RandomTensor({2, 3, 4}, 11);
  for (std::vector<int> axes : std::vector<std::vector<int>>{
           {}, {0}, {1}, {2}, {-1}, {0, 2}, {0, 1}, {1, 2}}) {
    for (bool keep : {false, true}) {
      ExpectGradientsMatch(
          [&](const Inputs& in) { return ops::ReduceSum(in[0], axes, keep); },
          {x});
      ExpectGradientsMatch(
          [&](const Inputs& in) { return ops::ReduceMean(in[0], axes, keep); },
          {x});
    }
  }
  ExpectGradientsMatch([](const Inputs& in) { return ops::L2Loss(in[0]); },
                       {x});
  ExpectGradientsMatch(
      [](const Inputs& in) {
        return ops::BroadcastTo(in[0], {2, 3, 4});
      },
      {RandomTensor({3, 1}, 12)});
}

TEST(GradientCheck, ShapeOps) {
  Tensor x = RandomTensor({2, 3, 4}, 13);
  ExpectGradientsMatch(
      [](const Inputs& in) {
        return ops::Reshape(in[0], {4, -1});
      },
      {x});
  ExpectGradientsMatch(
      [](const Inputs& in) {
        return ops::Transpose(in[0], {2, 0, 1});
      },
      {x});
  for (int axis : {0, 1, 2}) {
    Shape other = {2, 3, 4};
    other[axis] = 2;
    ExpectGradientsMatch(
        [axis](const Inputs& in) { return ops::Concat(in, axis); },
        {x, RandomTensor(other, 14)});
  }
}

TEST(GradientCheck, GatherScatterAddsRepeatedRows) {
  Tensor params = RandomTensor({5, 3}, 15);
  Tensor ids = Tensor::FromVector<int32_t>({4, 0, 4, 2, 4, 1}, {2, 3});
  ExpectGradientsMatch(
      [](const Inputs& in) { return ops::EmbeddingLookup(in[0], in[1]); },
      {params, ids});
}

TEST(GradientCheck, CastBetweenFloatTypes) {
  // Through f32 and back: the function is the identity up to f32 rounding,
  // so the finite difference uses a step f32 resolves.
  ExpectGradientsMatch(
      [](const Inputs& in) -> absl::StatusOr<Tensor> {
        auto f = ops::Cast(in[0], DType::kF32);
        if (!f.ok()) return f.status();
        return ops::Cast(*f, DType::kF64);
      },
      {RandomTensor({3, 2}, 16)}, /*eps=*/1e-2, /*tol=*/1e-4);
}

TEST(GradientCheck, Dropout) {
  ExpectGradientsMatch(
      [](const Inputs& in) { return ops::Dropout(in[0], 0.4, 99); },
      {RandomTensor({4, 5}, 17)});
}

TEST(GradientCheck, ClipByValue) {
  ExpectGradientsMatch(
      [](const Inputs& in) { return ops::ClipByValue(in[0], -0.5, 0.3); },
      {RandomTensor({4, 5}, 18)});
}

struct ConvCase {
  Shape x, w;
  int64_t stride;
  ops::Padding padding;
};

class Conv2DGradientTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DGradientTest, MatchesFiniteDifferences) {
  const ConvCase& c = GetParam();
  ops::Conv2DOptions opt{c.stride, c.stride, c.padding};
  ExpectGradientsMatch(
      [&](const Inputs& in) { return ops::Conv2D(in[0], in[1], opt); },
      {RandomTensor(c.x, 19), RandomTensor(c.w, 20)});
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Conv2DGradientTest,
    ::testing::Values(
        ConvCase{{2, 5, 4, 2}, {3, 3, 2, 3}, 1, ops::Padding::kSame},
        ConvCase{{2, 5, 4, 2}, {3, 3, 2, 3}, 1, ops::Padding::kValid},
        ConvCase{{1, 6, 7, 2}, {3, 2, 2, 2}, 2, ops::Padding::kSame},
        ConvCase{{1, 6, 7, 2}, {4, 4, 2, 2}, 2, ops::Padding::kValid},
        ConvCase{{1, 5, 5, 1}, {2, 2, 1, 2}, 3, ops::Padding::kSame}));

TEST(GradientCheck, MaxPool2D) {
  // Random values are distinct, so each window has one winner.
  Tensor x = RandomTensor({2, 5, 6, 3}, 21);
  for (auto padding : {ops::Padding::kSame, ops::Padding::kValid}) {
    for (int64_t k : {2, 3}) {
      for (int64_t s : {1, 2}) {
        ops::Pool2DOptions opt{k, k, s, s, padding};
        ExpectGradientsMatch(
            [&](const Inputs& in) { return ops::MaxPool2D(in[0], opt); }, {x});
      }
    }
  }
}

TEST(GradientCheck, ComposedMlpLayer) {
  // relu(x @ w + b) -> xent, the MLP's inner loop.
  Tensor x = RandomTensor({4, 5}, 22);
  Tensor w = RandomTensor({5, 3}, 23);
  Tensor b = RandomTensor({3}, 24);
  Tensor labels = Tensor::FromVector<int32_t>({0, 2, 1, 2}, {4});
  ExpectGradientsMatch(
      [](const Inputs& in) -> absl::StatusOr<Tensor> {
        auto h = ops::MatMul(in[0], in[1]);
        if (!h.ok()) return h.status();
        auto z = ops::BiasAdd(*h, in[2]);
        if (!z.ok()) return z.status();
        auto r = ops::Tanh(*z);
        if (!r.ok()) return r.status();
        return ops::SparseSoftmaxCrossEntropyWithLogits(*r, in[3]);
      },
      {x, w, b, labels});
}

}  // namespace
}  // namespace mirrortrain
