// Average pooling against TensorFlow (scripts/golden/normalization.py ->
// tests/golden/normalization.txt): tf.nn.avg_pool2d VALID and SAME (padded
// cells not counted) and Keras GlobalAveragePooling2D (a mean over height
// and width), forward and gradient, float64.
#include <functional>

#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

void ExpectMatches(
    const std::string& prefix,
    const std::function<absl::StatusOr<Tensor>(const Tensor&)>& pool) {
  SCOPED_TRACE(prefix);
  const auto& g = testing::CachedGolden("normalization.txt");
  ASSERT_FALSE(g.empty()) << "cannot load normalization.txt";
  const Tensor& x = g.at("pool_x");
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = pool(x);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, g.at(prefix + "/y"), 1e-12, 1e-12));
  GradientOptions options;
  options.output_gradient = g.at(prefix + "/upstream");
  auto dx = tape.Gradient(*y, {x}, options);
  ASSERT_TRUE(dx.ok()) << dx.status();
  EXPECT_TRUE(testing::AllClose(*(*dx)[0], g.at(prefix + "/dx"), 1e-12, 1e-12));
}

TEST(GoldenPoolingTest, AvgPoolValidMatchesTensorFlow) {
  ExpectMatches("avg_pool_valid", [](const Tensor& x) {
    return ops::AvgPool2D(x, {2, 2, 2, 2, ops::Padding::kValid});
  });
}

TEST(GoldenPoolingTest, AvgPoolSameCountsOnlyCellsInsideTheImage) {
  ExpectMatches("avg_pool_same", [](const Tensor& x) {
    return ops::AvgPool2D(x, {3, 3, 2, 2, ops::Padding::kSame});
  });
}

TEST(GoldenPoolingTest, GlobalAveragePoolingMatchesKeras) {
  ExpectMatches("global_avg_pool", [](const Tensor& x) {
    return ops::ReduceMean(x, {1, 2});
  });
}

}  // namespace
}  // namespace mirrortrain
