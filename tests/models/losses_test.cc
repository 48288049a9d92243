// The sequence loss: per-token sparse cross-entropy over logits [b, T, C]
// and labels [b, T], summed and divided by the global number of tokens, so
// two shards' losses (and gradients) add up to the whole batch's mean.
#include "models/losses.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

constexpr int64_t kBatch = 3, kTime = 4, kClasses = 5;
constexpr const char* kRegressionLosses[] = {
    "mean_squared_error", "mean_absolute_error", "huber", "log_cosh"};

Tensor Labels() {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < kBatch * kTime; ++i) {
    v.push_back(static_cast<int32_t>((i * 7 + 2) % kClasses));
  }
  return Tensor::FromVector(v, {kBatch, kTime});
}

// The mean over tokens of -log softmax(logits)[label], in double.
double ReferenceMeanLoss(const Tensor& logits, const Tensor& labels) {
  double sum = 0;
  for (int64_t t = 0; t < kBatch * kTime; ++t) {
    double max = -INFINITY, z = 0;
    for (int64_t c = 0; c < kClasses; ++c) {
      max = std::max(max, logits.ScalarAt(t * kClasses + c));
    }
    for (int64_t c = 0; c < kClasses; ++c) {
      z += std::exp(logits.ScalarAt(t * kClasses + c) - max);
    }
    const int64_t label = static_cast<int64_t>(labels.ScalarAt(t));
    sum += -(logits.ScalarAt(t * kClasses + label) - max - std::log(z));
  }
  return sum / (kBatch * kTime);
}

TEST(SequenceLossTest, MeanOverEveryTokenOfTheGlobalBatch) {
  const Tensor logits = testing::RandomTensor({kBatch, kTime, kClasses}, 1);
  const Tensor labels = Labels();
  auto loss = SparseCategoricalCrossentropy(logits, labels, kBatch * kTime);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(loss->ScalarAt(0), ReferenceMeanLoss(logits, labels), 1e-12);

  // Shards of 1 and 2 rows, each divided by the global tokens, add up to it.
  double shards = 0;
  for (auto [begin, rows] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}}) {
    auto part = SparseCategoricalCrossentropy(*logits.SliceRows(begin, rows),
                                              *labels.SliceRows(begin, rows),
                                              kBatch * kTime);
    ASSERT_TRUE(part.ok()) << part.status();
    shards += part->ScalarAt(0);
  }
  EXPECT_NEAR(shards, loss->ScalarAt(0), 1e-12);
}

TEST(SequenceLossTest, GradientMatchesFiniteDifferences) {
  const Tensor labels = Labels();
  testing::ExpectGradientsMatch(
      [&](const std::vector<Tensor>& in) {
        return SparseCategoricalCrossentropy(in[0], labels, kBatch * kTime);
      },
      {testing::RandomTensor({kBatch, kTime, kClasses}, 2)});
}

TEST(SequenceLossTest, CountCorrectCountsTokens) {
  // Logits that pick class (token index) % kClasses.
  std::vector<double> v(kBatch * kTime * kClasses, 0.0);
  for (int64_t t = 0; t < kBatch * kTime; ++t)
    v[t * kClasses + t % kClasses] = 1;
  const Tensor logits = Tensor::FromVector(v, {kBatch, kTime, kClasses});
  const Tensor labels = Labels();
  int64_t expected = 0;
  for (int64_t t = 0; t < kBatch * kTime; ++t) {
    expected += static_cast<int64_t>(labels.ScalarAt(t)) == t % kClasses;
  }
  ASSERT_GT(expected, 0);
  auto correct = CountCorrect(logits, labels);
  ASSERT_TRUE(correct.ok()) << correct.status();
  EXPECT_EQ(*correct, expected);
}

TEST(SequenceLossTest, LabelsOfTheWrongRankAreAnError) {
  const Tensor logits = testing::RandomTensor({kBatch, kTime, kClasses}, 3);
  auto loss = SparseCategoricalCrossentropy(
      logits, *Labels().Reshaped({kBatch * kTime}), kBatch * kTime);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
}

// Label smoothing against Keras's CategoricalCrossentropy(label_smoothing)
// (scripts/golden/label_smoothing.py): the loss and its gradient for a
// classifier's rows and a sequence model's tokens, f32.
TEST(LabelSmoothingTest, MatchesKeras) {
  absl::StatusOr<std::map<std::string, Tensor>> golden =
      testing::LoadGolden(testing::GoldenPath("label_smoothing.txt"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto g = [&](const std::string& name) -> const Tensor& {
    auto it = golden->find(name);
    EXPECT_NE(it, golden->end()) << name;
    return it->second;
  };
  int checked = 0;
  for (const std::string c : {"rows", "tokens"}) {
    const Tensor& logits = g(c + "/logits");
    const int64_t global =
        static_cast<int64_t>(g(c + "/global_batch").ScalarAt(0));
    for (const std::string e : {"e01", "e05", "e10"}) {
      SCOPED_TRACE(c + "/" + e);
      const std::string p = c + "/" + e;
      GradientTape tape;
      tape.Watch(logits);
      absl::StatusOr<Tensor> loss =
          SparseCategoricalCrossentropy(logits, g(c + "/labels"), global,
                                        g(p + "/label_smoothing").ScalarAt(0));
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_TRUE(testing::AllClose(*loss, g(p + "/loss"), 1e-6, 1e-6));
      auto grads = tape.Gradient(*loss, {logits});
      ASSERT_TRUE(grads.ok()) << grads.status();
      EXPECT_TRUE(testing::AllClose(*(*grads)[0], g(p + "/grad"), 1e-6, 1e-7));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

// No smoothing is the plain cross-entropy, bit for bit; shards divided by
// the global batch add up to the whole batch's smoothed loss; the gradient
// matches finite differences; a smoothing outside [0, 1] is an error.
TEST(LabelSmoothingTest, ZeroIsPlainAndShardsAddUp) {
  const Tensor logits = testing::RandomTensor({kBatch, kTime, kClasses}, 4);
  const Tensor labels = Labels();
  const int64_t global = kBatch * kTime;
  EXPECT_EQ(SparseCategoricalCrossentropy(logits, labels, global, 0)
                ->ToVector<double>(),
            SparseCategoricalCrossentropy(logits, labels, global)
                ->ToVector<double>());
  auto loss = SparseCategoricalCrossentropy(logits, labels, global, 0.2);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_GT(loss->ScalarAt(0),
            SparseCategoricalCrossentropy(logits, labels, global)->ScalarAt(0));
  double shards = 0;
  for (auto [begin, rows] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}}) {
    auto part = SparseCategoricalCrossentropy(*logits.SliceRows(begin, rows),
                                              *labels.SliceRows(begin, rows),
                                              global, 0.2);
    ASSERT_TRUE(part.ok()) << part.status();
    shards += part->ScalarAt(0);
  }
  EXPECT_NEAR(shards, loss->ScalarAt(0), 1e-12);
  testing::ExpectGradientsMatch(
      [&](const std::vector<Tensor>& in) {
        return SparseCategoricalCrossentropy(in[0], labels, global, 0.2);
      },
      {testing::RandomTensor({kBatch, kTime, kClasses}, 5)});
  for (const double bad : {-0.1, 1.5, std::nan("")}) {
    auto refused = SparseCategoricalCrossentropy(logits, labels, global, bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("label smoothing"),
              std::string::npos);
  }
}

// binary_crossentropy against Keras's BinaryCrossentropy(from_logits=True)
// and binary_accuracy (scripts/golden/binary_crossentropy.py): logits [9, 1]
// with labels [9], and multi-label [5, 3], with logits up to +-100 and an
// exact 0, f32. Keras's reduction="sum" sums each example's mean over its
// k labels: ours divided by k.
TEST(BinaryCrossentropyTest, MatchesKeras) {
  absl::StatusOr<std::map<std::string, Tensor>> golden =
      testing::LoadGolden(testing::GoldenPath("binary_crossentropy.txt"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto g = [&](const std::string& name) -> const Tensor& {
    auto it = golden->find(name);
    EXPECT_NE(it, golden->end()) << name;
    return it->second;
  };
  int checked = 0;
  for (const auto& [c, k] :
       {std::pair<std::string, int64_t>{"binary", 1}, {"multi", 3}}) {
    const Tensor& logits = g(c + "/logits");
    const Tensor& labels = g(c + "/labels");
    absl::StatusOr<double> correct = CountCorrectBinary(logits, labels);
    ASSERT_TRUE(correct.ok()) << correct.status();
    EXPECT_FLOAT_EQ(static_cast<float>(*correct) / labels.num_elements(),
                    g(c + "/accuracy").ScalarAt(0))
        << c;
    for (const std::string e : {"e00", "e01", "e10"}) {
      SCOPED_TRACE(c + "/" + e);
      const std::string p = c + "/" + e;
      GradientTape tape;
      tape.Watch(logits);
      absl::StatusOr<Tensor> loss = BinaryCrossentropy(
          logits, labels, k, g(p + "/label_smoothing").ScalarAt(0));
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_TRUE(testing::AllClose(*loss, g(p + "/loss"), 1e-6, 1e-6));
      auto grads = tape.Gradient(*loss, {logits});
      ASSERT_TRUE(grads.ok()) << grads.status();
      EXPECT_TRUE(testing::AllClose(*(*grads)[0], g(p + "/grad"), 1e-6, 1e-7));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

// A confident logit keeps its loss's digits (e^-30, not 0 from a
// cancellation of log(1 + e^30) - 30); shards divided by the global count
// add up; the gradient matches finite differences, at 0 too; shapes that
// are not one logit per label, and smoothing outside [0, 1], are errors.
TEST(BinaryCrossentropyTest, StableShardableAndChecked) {
  const Tensor confident = Tensor::FromVector(std::vector<float>{30, -30}, {2});
  const Tensor right = Tensor::FromVector(std::vector<int32_t>{1, 0}, {2});
  absl::StatusOr<Tensor> tiny = BinaryCrossentropy(confident, right, 2);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_NEAR(tiny->ScalarAt(0), std::exp(-30.0), 1e-3 * std::exp(-30.0));

  const Tensor logits = testing::RandomTensor({4, 3}, 6);
  const Tensor labels = Tensor::FromVector(
      std::vector<int32_t>{1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1}, {4, 3});
  auto whole = BinaryCrossentropy(logits, labels, 12, 0.2);
  ASSERT_TRUE(whole.ok()) << whole.status();
  double shards = 0;
  for (auto [begin, rows] : {std::pair<int64_t, int64_t>{0, 3}, {3, 1}}) {
    auto part = BinaryCrossentropy(*logits.SliceRows(begin, rows),
                                   *labels.SliceRows(begin, rows), 12, 0.2);
    ASSERT_TRUE(part.ok()) << part.status();
    shards += part->ScalarAt(0);
  }
  EXPECT_NEAR(shards, whole->ScalarAt(0), 1e-12);
  Tensor with_zero = testing::RandomTensor({4, 3}, 7);
  with_zero.data<double>()[0] = 0;
  testing::ExpectGradientsMatch(
      [&](const std::vector<Tensor>& in) {
        return BinaryCrossentropy(in[0], labels, 12, 0.2);
      },
      {with_zero});

  EXPECT_FALSE(BinaryCrossentropy(logits, *labels.SliceRows(0, 2), 12).ok());
  const Tensor two_per_row = testing::RandomTensor({12, 2}, 8);
  auto wide = BinaryCrossentropy(two_per_row, *labels.Reshaped({12}), 12);
  ASSERT_FALSE(wide.ok());
  EXPECT_THAT(std::string(wide.status().message()),
              ::testing::HasSubstr("one logit per label, got logits [12,2] "
                                   "for labels [12]"));
  for (const double bad : {-0.1, 1.5, std::nan("")}) {
    EXPECT_FALSE(BinaryCrossentropy(logits, labels, 12, bad).ok()) << bad;
  }
  EXPECT_FALSE(BinaryCrossentropy(logits, labels, 0).ok());
  // Labels are 0 or 1, integers: a 2 would make a loss without a lower
  // bound; float labels are not class labels.
  std::vector<int32_t> two(12, 0);
  two[7] = 2;
  const Tensor with_two = Tensor::FromVector(two, {4, 3});
  for (const Tensor& bad :
       {with_two, Tensor::FromVector(std::vector<float>(12, 1.0f), {4, 3})}) {
    EXPECT_FALSE(BinaryCrossentropy(logits, bad, 12).ok());
    EXPECT_FALSE(CountCorrectBinary(logits, bad).ok());
  }
  EXPECT_THAT(
      std::string(BinaryCrossentropy(logits, with_two, 12).status().message()),
      ::testing::HasSubstr("takes labels 0 and 1, got 2 at index 7"));
}

// mean_squared_error and mean_absolute_error: Keras's means (over an
// example's targets, then the batch) as sums over every target divided by
// the global count; integer targets cast; shards add up; gradients match
// finite differences (MAE's is 0 at an exact hit, TensorFlow's sign(0)),
// as huber's and log_cosh's do; shapes that are not one output per target,
// and Huber deltas that are not > 0, are errors.
TEST(RegressionLossTest, MeansShardsAndGradients) {
  const Tensor outputs =
      Tensor::FromVector<double>({0.5, -1.0, 2.0, 3.0, 0.25, -0.5}, {3, 2});
  const Tensor targets =
      Tensor::FromVector<float>({1.0f, -1.0f, 0.0f, 3.5f, 0.25f, 1.5f}, {3, 2});
  // Differences -0.5, 0 (exact), 2, -0.5, 0, -2.
  auto mse = MeanSquaredError(outputs, targets, 6);
  ASSERT_TRUE(mse.ok()) << mse.status();
  EXPECT_DOUBLE_EQ(mse->ScalarAt(0), (0.25 + 0 + 4 + 0.25 + 0 + 4) / 6);
  auto mae = MeanAbsoluteError(outputs, targets, 6);
  ASSERT_TRUE(mae.ok()) << mae.status();
  EXPECT_DOUBLE_EQ(mae->ScalarAt(0), (0.5 + 0 + 2 + 0.5 + 0 + 2) / 6);
  absl::StatusOr<double> sum = SumAbsoluteError(outputs, targets);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_DOUBLE_EQ(*sum, 5.0);
  const Tensor integers =
      Tensor::FromVector<int32_t>({1, -1, 0, 3, 0, 1}, {3, 2});
  auto cast = MeanSquaredError(outputs, integers, 6);
  ASSERT_TRUE(cast.ok()) << cast.status();
  EXPECT_DOUBLE_EQ(cast->ScalarAt(0), (0.25 + 0 + 4 + 0 + 0.0625 + 2.25) / 6);
  // Shards divided by the global count add up (every regression loss,
  // through the registry, under its default keys).
  for (const char* name : kRegressionLosses) {
    SCOPED_TRACE(name);
    const LossType& loss = **FindLoss(name);
    const Params keys = DefaultLossParams(name);
    double shards = 0;
    for (auto [begin, rows] : {std::pair<int64_t, int64_t>{0, 2}, {2, 1}}) {
      auto part =
          loss.compute(*outputs.SliceRows(begin, rows),
                       *targets.SliceRows(begin, rows), Tensor(), 6, keys);
      ASSERT_TRUE(part.ok()) << part.status();
      shards += part->ScalarAt(0);
    }
    auto whole = loss.compute(outputs, targets, Tensor(), 6, keys);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_NEAR(shards, whole->ScalarAt(0), 1e-12);
  }
  // One target per example against outputs [b, 1].
  auto column =
      MeanAbsoluteError(*outputs.Reshaped({6, 1}), *targets.Reshaped({6}), 6);
  ASSERT_TRUE(column.ok()) << column.status();
  EXPECT_DOUBLE_EQ(column->ScalarAt(0), mae->ScalarAt(0));
  const Tensor away = testing::RandomTensor({3, 2}, 9);
  for (const char* name : kRegressionLosses) {
    SCOPED_TRACE(name);
    const LossType& loss = **FindLoss(name);
    testing::ExpectGradientsMatch(
        [&](const std::vector<Tensor>& in) {
          return loss.compute(in[0], targets, Tensor(), 6,
                              DefaultLossParams(name));
        },
        {away});
  }
  GradientTape tape;
  tape.Watch(outputs);
  auto at_hits = MeanAbsoluteError(outputs, targets, 6);
  ASSERT_TRUE(at_hits.ok());
  auto grads = tape.Gradient(*at_hits, {outputs});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const std::vector<double> g = (*grads)[0]->ToVector<double>();
  EXPECT_EQ(g[1], 0.0);  // The exact hits.
  EXPECT_EQ(g[4], 0.0);
  EXPECT_DOUBLE_EQ(g[2], 1.0 / 6);
  EXPECT_FALSE(MeanSquaredError(outputs, *targets.SliceRows(0, 2), 6).ok());
  EXPECT_FALSE(MeanSquaredError(outputs, targets, 0).ok());
  EXPECT_FALSE(LogCosh(outputs, *targets.SliceRows(0, 2), 6).ok());
  for (const double bad : {0.0, -1.0, std::nan(""), double{INFINITY}}) {
    EXPECT_FALSE(Huber(outputs, targets, 6, bad).ok()) << bad;
  }
}

// huber (at three deltas, set through its `delta` key) and log_cosh against
// Keras's Huber and LogCosh (scripts/golden/regression_losses.py): outputs
// and targets [8, 2], f32, with differences of 0, exactly +-delta, 2^-10
// inside and outside each delta, and +-100 (where cosh overflows float32,
// a naive log(cosh(d)) would not pass). Keras's reduction="sum"
// sums each example's mean over its 2 targets: ours divided by 2.
TEST(RegressionLossTest, HuberAndLogCoshMatchKeras) {
  absl::StatusOr<std::map<std::string, Tensor>> golden =
      testing::LoadGolden(testing::GoldenPath("regression_losses.txt"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto g = [&](const std::string& name) -> const Tensor& {
    auto it = golden->find(name);
    EXPECT_NE(it, golden->end()) << name;
    return it->second;
  };
  const Tensor& outputs = g("outputs");
  const Tensor& targets = g("targets");
  int checked = 0;
  for (const std::string c : {"huber10", "huber05", "huber25", "log_cosh"}) {
    SCOPED_TRACE(c);
    const std::string name = c == "log_cosh" ? "log_cosh" : "huber";
    Params keys = DefaultLossParams(name);
    if (name == "huber") keys.Set("delta", g(c + "/delta").ScalarAt(0));
    GradientTape tape;
    tape.Watch(outputs);
    absl::StatusOr<Tensor> loss =
        (*FindLoss(name))->compute(outputs, targets, Tensor(), 2, keys);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(testing::AllClose(*loss, g(c + "/loss"), 1e-6, 1e-6));
    auto grads = tape.Gradient(*loss, {outputs});
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_TRUE(testing::AllClose(*(*grads)[0], g(c + "/grad"), 1e-6, 1e-7));
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// The registry: each loss's logits per example for its labels, and the
// data each refuses.
TEST(LossRegistryTest, OutputShapesAndRefusals) {
  absl::StatusOr<const LossType*> sparse = FindLoss(kDefaultLoss);
  absl::StatusOr<const LossType*> binary = FindLoss("binary_crossentropy");
  ASSERT_TRUE(sparse.ok() && binary.ok());
  EXPECT_EQ((*sparse)->output_shape({}, 10).value(), (Shape{10}));
  EXPECT_EQ((*sparse)->output_shape({8}, 256).value(), (Shape{8, 256}));
  EXPECT_EQ((*binary)->output_shape({}, 2).value(), (Shape{1}));
  EXPECT_EQ((*binary)->output_shape({}, 1).value(), (Shape{1}));
  EXPECT_EQ((*binary)->output_shape({5}, 2).value(), (Shape{5}));
  absl::StatusOr<Shape> ten = (*binary)->output_shape({}, 10);
  ASSERT_FALSE(ten.ok());
  EXPECT_THAT(std::string(ten.status().message()),
              ::testing::HasSubstr("takes labels 0 and 1, but the data has "
                                   "10 classes"));
  absl::StatusOr<const LossType*> unknown = FindLoss("mse");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()),
              ::testing::HasSubstr("unknown loss 'mse' (expected one of "
                                   "binary_crossentropy, huber, log_cosh, "
                                   "mean_absolute_error, mean_squared_error, "
                                   "sparse_categorical_crossentropy)"));
  // Real-valued labels (classes 0) are the regression losses'.
  for (const auto* loss : {*sparse, *binary}) {
    absl::StatusOr<Shape> real = loss->output_shape({}, 0);
    ASSERT_FALSE(real.ok()) << loss->name;
    EXPECT_THAT(std::string(real.status().message()),
                ::testing::HasSubstr("the data's labels are real values"));
  }
  absl::StatusOr<const LossType*> mse = FindLoss("mean_squared_error");
  ASSERT_TRUE(mse.ok());
  EXPECT_EQ((*mse)->output_shape({}, 0).value(), (Shape{1}));
  EXPECT_EQ((*mse)->output_shape({3}, 0).value(), (Shape{3}));
  EXPECT_EQ((*mse)->metric, "mean_absolute_error");
  // Each loss's own keys: smoothing for the classification losses only.
  EXPECT_NE((*sparse)->params.Find(kLabelSmoothing), nullptr);
  EXPECT_NE((*binary)->params.Find(kLabelSmoothing), nullptr);
  for (const char* name : kRegressionLosses) {
    EXPECT_EQ((*FindLoss(name))->params.Find(kLabelSmoothing), nullptr) << name;
  }
  EXPECT_EQ(DefaultLossParams("huber").Float("delta"), 1.0);
  EXPECT_TRUE(LossRegistry::Global().duplicates().empty());
}

}  // namespace
}  // namespace mirrortrain::models
