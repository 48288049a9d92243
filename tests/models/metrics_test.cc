// The metrics registry (models/metrics.h): top-k accuracy against
// tf.math.in_top_k (scripts/golden/top_k.py), its weights and its checks.
#include "models/metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "models/losses.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

// Integer logits tie at every rank: a label tied with the k-th largest is
// in the top k, as in_top_k counts it.
TEST(MetricsTest, TopKMatchesTensorFlowsInTopK) {
  const auto& golden = testing::CachedGolden("top_k.txt");
  ASSERT_FALSE(golden.empty()) << "cannot load top_k.txt";
  const Tensor& logits = golden.at("logits");
  const Tensor& labels = golden.at("labels");
  const MetricType& top_k = **FindMetric("sparse_top_k_categorical_accuracy");
  for (int64_t k : {1, 2, 3, 5}) {
    SCOPED_TRACE(k);
    const Tensor& want = golden.at("in_top_k/" + std::to_string(k));
    double hits = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      hits += want.ScalarAt(i);
      // Each row alone: which ones.
      absl::StatusOr<double> one =
          CountInTopK(*logits.SliceRows(i, 1), *labels.SliceRows(i, 1), k);
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_EQ(*one, want.ScalarAt(i)) << "row " << i;
    }
    Params params;
    params.Set("k", k);
    absl::StatusOr<double> all = top_k.sum(logits, labels, Tensor(), params);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(*all, hits);
    EXPECT_GT(hits, 0);
    EXPECT_LT(hits, 40);
  }
}

// A row holding a non-finite logit is wrong whatever k (in_top_k's:
// checked with TensorFlow 2.21, rows [inf, 1, 2, 3], [-inf, 1, 2, 3],
// [nan, 1, 2, 3] with label 3 and k = 2 are all false); weights count
// each label by its weight; sequences' labels are their tokens.
TEST(MetricsTest, TopKSkipsNonFiniteRowsAndWeighsLabels) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor logits = Tensor::FromVector<float>(
      {inf, 1, 2, 3, -inf, 1, 2, 3, nan, 1, 2, 3, 1, 2, 3, 4}, {4, 4});
  const Tensor labels = Tensor::FromVector<int64_t>({3, 3, 3, 3}, {4});
  absl::StatusOr<double> hits = CountInTopK(logits, labels, 2);
  ASSERT_TRUE(hits.ok()) << hits.status();
  EXPECT_EQ(*hits, 1);
  const Tensor sequences = testing::RandomTensor({2, 3, 5}, 4, DType::kF32);
  const Tensor tokens = Tensor::FromVector<int64_t>({0, 1, 2, 3, 4, 0}, {2, 3});
  const Tensor weights = Tensor::FromVector<float>({1, 0, 1, 1, 0, 0}, {2, 3});
  absl::StatusOr<double> all = CountInTopK(sequences, tokens, 5);
  absl::StatusOr<double> weighted = CountInTopK(sequences, tokens, 5, weights);
  ASSERT_TRUE(all.ok() && weighted.ok());
  EXPECT_EQ(*all, 6);  // k = classes: every finite row.
  EXPECT_EQ(*weighted, 3);
  EXPECT_FALSE(
      CountInTopK(logits, Tensor::FromVector<int64_t>({1, 1, 1}, {3}), 1)
          .ok());  // 16 logits do not split into 3 rows.
  EXPECT_FALSE(
      CountInTopK(logits, Tensor::FromVector<int64_t>({3, 3, 4, 3}, {4}), 1)
          .ok());  // Class 4 of 4.
}

TEST(MetricsTest, TopKReadsTheCategoricalLossesLogitsOnly) {
  const MetricType& top_k = **FindMetric("sparse_top_k_categorical_accuracy");
  EXPECT_TRUE(top_k.check(**FindLoss(kDefaultLoss)).ok());
  const absl::Status binary = top_k.check(**FindLoss("binary_crossentropy"));
  EXPECT_FALSE(binary.ok());
  EXPECT_TRUE(absl::StrContains(binary.message(), "binary_crossentropy"));
  EXPECT_FALSE(FindMetric("top5").ok());
}

}  // namespace
}  // namespace mirrortrain::models
