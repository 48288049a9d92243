// Forward values and gradients against TensorFlow
// (scripts/golden/nn_ops.py -> tests/golden/nn_ops.txt).
#include <cmath>

#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using testing::AllClose;

// f32 against TF's f32 kernels: different summation orders.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

class GoldenNnOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = testing::LoadGolden(testing::GoldenPath("nn_ops.txt"));
    ASSERT_TRUE(g.ok()) << g.status();
    golden_ = *std::move(g);
  }
  const Tensor& G(const std::string& name) {
    auto it = golden_.find(name);
    EXPECT_NE(it, golden_.end()) << name;
    return it->second;
  }
  std::map<std::string, Tensor> golden_;
};

TEST_F(GoldenNnOpsTest, SparseSoftmaxCrossEntropy) {
  const Tensor& logits = G("xent/logits");
  GradientTape tape;
  tape.Watch(logits);
  auto loss =
      ops::SparseSoftmaxCrossEntropyWithLogits(logits, G("xent/labels"));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(AllClose(*loss, G("xent/loss"), kRtol, kAtol));
  GradientOptions options;
  options.output_gradient = G("xent/upstream");
  auto grads = tape.Gradient(*loss, {logits}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(AllClose(*(*grads)[0], G("xent/grad_logits"), kRtol, kAtol));
}

TEST_F(GoldenNnOpsTest, SoftmaxAndLogSoftmax) {
  EXPECT_TRUE(
      AllClose(*ops::Softmax(G("xent/logits")), G("softmax/y"), kRtol, kAtol));
  EXPECT_TRUE(AllClose(*ops::LogSoftmax(G("xent/logits")), G("log_softmax/y"),
                       kRtol, kAtol));
}

// (x - max) - log(sum), as TensorFlow computes it: against a max of 1e8,
// max + log(sum) rounds to the max, and the result was 0 for every class.
TEST(LogSoftmaxTest, KeepsTheLogSumForLargeLogits) {
  const Tensor x =
      Tensor::FromVector<float>({1e8f, 1e8f, 1e4f, 1e4f + 1}, {2, 2});
  absl::StatusOr<Tensor> y = ops::LogSoftmax(x);
  ASSERT_TRUE(y.ok()) << y.status();
  const double tail = std::log1p(std::exp(-1.0));  // log(1 + e^-1).
  const Tensor expected = Tensor::FromVector<float>(
      {static_cast<float>(-std::log(2.0)), static_cast<float>(-std::log(2.0)),
       static_cast<float>(-1.0 - tail), static_cast<float>(-tail)},
      {2, 2});
  EXPECT_TRUE(AllClose(*y, expected, 1e-6, 1e-6));
}

TEST_F(GoldenNnOpsTest, Conv2DForwardAndGradients) {
  for (const char* prefix :
       {"conv2d_same_s1", "conv2d_same_s2", "conv2d_valid_s1",
        "conv2d_valid_s2", "conv2d_same_s1_k5", "conv2d_same_s2_k4"}) {
    SCOPED_TRACE(prefix);
    std::string p = prefix;
    const Tensor& x = G(p + "/x");
    const Tensor& w = G(p + "/w");
    const int64_t stride = static_cast<int64_t>(G(p + "/stride").ScalarAt(0));
    ops::Conv2DOptions opt{stride, stride,
                           G(p + "/same").ScalarAt(0) != 0
                               ? ops::Padding::kSame
                               : ops::Padding::kValid};
    GradientTape tape;
    tape.Watch(x);
    tape.Watch(w);
    auto y = ops::Conv2D(x, w, opt);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(AllClose(*y, G(p + "/y"), kRtol, kAtol));
    GradientOptions options;
    options.output_gradient = G(p + "/dy");
    auto grads = tape.Gradient(*y, {x, w}, options);
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_TRUE(AllClose(*(*grads)[0], G(p + "/dx"), kRtol, kAtol));
    EXPECT_TRUE(AllClose(*(*grads)[1], G(p + "/dw"), kRtol, kAtol));
  }
}

TEST_F(GoldenNnOpsTest, MaxPool2DForwardAndGradient) {
  for (const char* prefix : {"maxpool_k2_s2_valid", "maxpool_k3_s2_same",
                             "maxpool_k3_s1_same", "maxpool_k2_s2_same"}) {
    SCOPED_TRACE(prefix);
    std::string p = prefix;
    const Tensor& x = G(p + "/x");
    const int64_t k = static_cast<int64_t>(G(p + "/ksize").ScalarAt(0));
    const int64_t s = static_cast<int64_t>(G(p + "/stride").ScalarAt(0));
    ops::Pool2DOptions opt{k, k, s, s,
                           G(p + "/same").ScalarAt(0) != 0
                               ? ops::Padding::kSame
                               : ops::Padding::kValid};
    GradientTape tape;
    tape.Watch(x);
    auto y = ops::MaxPool2D(x, opt);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(AllClose(*y, G(p + "/y"), 0, 0));  // A max is exact.
    GradientOptions options;
    options.output_gradient = G(p + "/dy");
    auto grads = tape.Gradient(*y, {x}, options);
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_TRUE(AllClose(*(*grads)[0], G(p + "/dx"), kRtol, kAtol));
  }
}

}  // namespace
}  // namespace mirrortrain
