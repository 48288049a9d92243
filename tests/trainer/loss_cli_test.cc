// End-to-end runs of the binary under the losses other than the default,
// on npz files made here. binary_crossentropy on 0/1 labels: a multi-label
// model with a sigmoid output trains, evaluates and predicts probabilities
// that agree with its accuracy; a preset ends in one unit for one label.
// The regression losses on float targets: training, eval's mean absolute
// error, predict's raw outputs, early stopping on the error. Data, models
// and keys that do not fit the loss exit 2 with one line.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/cli_runner.h"
#include "tests/trainer/data/npz_writer.h"
#include "trainer/data/npy.h"

namespace mirrortrain {
namespace {

namespace fs = std::filesystem;
using ::mirrortrain::testing::FreshTestDir;
using ::mirrortrain::testing::NpyBytes;
using ::mirrortrain::testing::RawBytes;
using ::mirrortrain::testing::WriteBytes;
using ::mirrortrain::testing::ZipBytes;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kTrain = 192, kTest = 64, kFeatures = 6;

// Points of kFeatures in [-1, 1] and, for each of `labels` fixed
// directions, whether the point lies on its positive side.
struct Split {
  std::vector<float> x;
  std::vector<int64_t> y;
  std::vector<float> real;  // Regression targets, where a test makes them.
};
Split MakeSplit(int64_t n, int64_t first, int64_t labels) {
  Split s;
  for (int64_t i = 0; i < n * kFeatures; ++i) {
    s.x.push_back(static_cast<float>(std::sin(0.7 * (first * kFeatures + i))));
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < labels; ++c) {
      double dot = 0;
      for (int64_t j = 0; j < kFeatures; ++j) {
        dot += s.x[i * kFeatures + j] * std::cos(1.3 * (c * kFeatures + j) + 1);
      }
      s.y.push_back(dot > 0);
    }
  }
  return s;
}

// The npz of `labels` 0/1 labels per example (y [n] for 1); returns the
// `data:` block of a config.
std::string WriteData(const std::string& dir, int64_t labels) {
  const Split train = MakeSplit(kTrain, 0, labels);
  const Split test = MakeSplit(kTest, kTrain, labels);
  auto y_shape = [&](int64_t n) {
    return labels == 1 ? std::vector<int64_t>{n}
                       : std::vector<int64_t>{n, labels};
  };
  const std::string path = dir + "/binary.npz";
  WriteBytes(
      path,
      ZipBytes(
          {{"x_train.npy",
            NpyBytes("<f4", {kTrain, kFeatures}, RawBytes(train.x))},
           {"y_train.npy", NpyBytes("<i8", y_shape(kTrain), RawBytes(train.y))},
           {"x_test.npy",
            NpyBytes("<f4", {kTest, kFeatures}, RawBytes(test.x))},
           {"y_test.npy", NpyBytes("<i8", y_shape(kTest), RawBytes(test.y))}}));
  return absl::StrCat("data: {name: npz, path: ", path,
                      ", global_batch_size: 32}\n");
}

std::string WriteConfig(const std::string& dir, const std::string& data,
                        const std::string& output_units) {
  const std::string path = dir + "/job.yaml";
  WriteBytes(path, absl::StrCat("seed: 5\n", data, R"(model:
  layers:
    - {type: dense, units: 32, activation: relu}
    - {type: dense, units: )",
                                output_units, R"(, activation: sigmoid}
loss: {name: binary_crossentropy}
optimizer: {name: adam, learning_rate: 0.02}
distribute: {devices: [cpu:0, cpu:1]}
train: {epochs: 12, log_every_steps: 12}
checkpoint: {every_steps: 0}
)"));
  return path;
}

// Three labels per example: the model learns them (binary accuracy over
// every label); predict writes the sigmoid's probabilities, whose sides of
// 0.5 give eval's accuracy on the same examples.
TEST(LossCliTest, MultiLabelTrainsEvaluatesAndPredictsProbabilities) {
  const std::string dir = FreshTestDir("loss_cli_multi");
  const std::string config = WriteConfig(dir, WriteData(dir, 3), "3");
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result eval =
      RunCli({"eval", "--config", config, "--checkpoint", dir + "/run"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const double accuracy = JsonNumber(eval.out, "accuracy");
  EXPECT_GT(accuracy, 0.9) << eval.out;
  EXPECT_EQ(JsonNumber(eval.out, "examples"), kTest);

  const Split test = MakeSplit(kTest, kTrain, 3);
  WriteBytes(
      dir + "/x.npy",
      trainer::NpyHeaderBytes("<f4", {kTest, kFeatures}) + RawBytes(test.x));
  Result p =
      RunCli({"predict", "--config", config, "--checkpoint", dir + "/run",
              "--input", dir + "/x.npy", "--output", dir + "/p.npy"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  absl::StatusOr<trainer::NpyArray> out =
      trainer::ParseNpy(testing::ReadFile(dir + "/p.npy"), dir + "/p.npy");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->header.shape, (std::vector<int64_t>{kTest, 3}));
  std::vector<float> probabilities(kTest * 3);
  std::memcpy(probabilities.data(), out->data(), probabilities.size() * 4);
  int64_t right = 0;
  bool confident = false;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    ASSERT_GE(probabilities[i], 0.0f) << i;
    ASSERT_LE(probabilities[i], 1.0f) << i;
    confident = confident || probabilities[i] > 0.99f;
    right += (probabilities[i] > 0.5f) == (test.y[i] == 1);
  }
  EXPECT_TRUE(confident);
  EXPECT_NEAR(static_cast<double>(right) / (kTest * 3), accuracy, 1e-4);
}

// One label per example (y [n]): a preset's last dense layer has one unit,
// and the binary model trains.
TEST(LossCliTest, APresetEndsInOneUnitForOneLabel) {
  const std::string dir = FreshTestDir("loss_cli_preset");
  const std::string config = WriteConfig(dir, WriteData(dir, 1), "1");
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run",
                     "--set", "model={name: mlp, hidden_units: [16]}"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result eval =
      RunCli({"eval", "--config", config, "--checkpoint", dir + "/run", "--set",
              "model={name: mlp, hidden_units: [16]}"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_GT(JsonNumber(eval.out, "accuracy"), 0.85) << eval.out;
  Result summary = RunCli({"train", "--config", config, "--dry_run", "--set",
                           "model={name: mlp, hidden_units: [16]}"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  EXPECT_THAT(summary.out, HasSubstr("(None, 1)"));
}

TEST(LossCliTest, DataAndModelsThatDoNotFitTheLossExit2) {
  const std::string dir = FreshTestDir("loss_cli_bad");
  const std::string one = WriteConfig(dir, WriteData(dir, 1), "2");
  // One logit for one 0/1 label under the categorical loss: the hint
  // names the binary loss (not a regression's, whose one output fits any
  // labels).
  ExpectExit2({"train", "--config", one, "--run_dir", dir + "/run", "--set",
               "model.layers[1]={type: dense, units: 1}", "--set",
               "loss.name=sparse_categorical_crossentropy"},
              "model: the last layer gives [1] per example but the data has 2 "
              "classes (loss.name: binary_crossentropy reads this output for "
              "these labels)");
  // Two logits for one 0/1 label are the categorical loss's.
  ExpectExit2({"train", "--config", one, "--run_dir", dir + "/run"},
              "model: the last layer gives [2] per example but the data needs "
              "[1] (binary_crossentropy: one logit per label) (loss.name: "
              "sparse_categorical_crossentropy reads this output for these "
              "labels)");
  ExpectExit2({"train", "--config", one, "--run_dir", dir + "/run", "--set",
               "model.layers[1]={type: flatten}"},
              "model: the last layer gives [32] per example but the data needs "
              "[1] (binary_crossentropy: one logit per label) (end with a "
              "dense layer of 1 unit)");
  // Ten classes are not 0/1 labels.
  ExpectExit2(SmallTrain(dir + "/run", {"loss.name=binary_crossentropy"}),
              "loss.name: binary_crossentropy takes labels 0 and 1, but the "
              "data has 10 classes");
  // Multi-label data under the categorical loss: the hint names the loss
  // that reads this output.
  const std::string multi = WriteConfig(dir, WriteData(dir, 3), "3");
  ExpectExit2({"train", "--config", multi, "--run_dir", dir + "/run", "--set",
               "model.layers[1].activation=linear", "--set",
               "loss.name=sparse_categorical_crossentropy"},
              "model: the last layer gives [3] per example but the data needs "
              "[3,2] (one logit per class and label) (the labels are 0/1, "
              "several per example: one-hot labels want their class index, "
              "y.argmax(-1); multi-label ones loss.name: "
              "binary_crossentropy)");
  // One-hot labels with a preset (which ends in a dense layer of 2 units,
  // the classes 0 and 1 it counts): the same hint.
  ExpectExit2({"train", "--config", multi, "--run_dir", dir + "/run", "--set",
               "model={name: mlp, hidden_units: [8]}", "--set",
               "loss.name=sparse_categorical_crossentropy"},
              "model: the last layer gives [2] per example but the data needs "
              "[3,2] (one logit per class and label) (the labels are 0/1, "
              "several per example: one-hot labels want their class index");
  // Another loss's probabilities on the output layer, named with its line.
  ExpectExit2({"train", "--config", multi, "--run_dir", dir + "/run", "--set",
               "loss.name=sparse_categorical_crossentropy"},
              "job.yaml:6: model.layers[1].activation: a sigmoid on the output "
              "layer gives binary_crossentropy's probabilities, but the loss "
              "is sparse_categorical_crossentropy");
  ExpectExit2({"train", "--config", multi, "--run_dir", dir + "/run", "--set",
               "loss.name=mse"},
              "loss.name: unknown value 'mse'");
}

// Float targets [n, 2] (two real-valued functions of the points): a model
// under mean_squared_error fits them; eval reports the loss and the mean
// absolute error, which predict's outputs (raw values: a regression's last
// layer has no probabilities to make) reproduce; early stopping may watch
// the error.
TEST(LossCliTest, RegressionFitsFloatTargetsAndReportsTheError) {
  const std::string dir = FreshTestDir("loss_cli_regression");
  auto targets = [](int64_t n, int64_t first) {
    Split s = MakeSplit(n, first, 0);
    for (int64_t i = 0; i < n; ++i) {
      const float* x = &s.x[i * kFeatures];
      s.real.push_back(x[0] - 0.5f * x[1] + 0.25f);
      s.real.push_back(x[2] * x[3] + 1.0f);
    }
    return s;
  };
  const Split train = targets(kTrain, 0), test = targets(kTest, kTrain);
  const std::string path = dir + "/real.npz";
  WriteBytes(
      path,
      ZipBytes(
          {{"x_train.npy",
            NpyBytes("<f4", {kTrain, kFeatures}, RawBytes(train.x))},
           {"y_train.npy", NpyBytes("<f4", {kTrain, 2}, RawBytes(train.real))},
           {"x_test.npy",
            NpyBytes("<f4", {kTest, kFeatures}, RawBytes(test.x))},
           {"y_test.npy", NpyBytes("<f4", {kTest, 2}, RawBytes(test.real))}}));
  const std::string config = dir + "/job.yaml";
  WriteBytes(config, absl::StrCat("seed: 5\ndata: {name: npz, path: ", path,
                                  ", global_batch_size: 32}\n", R"(model:
  layers:
    - {type: dense, units: 32, activation: relu}
    - {type: dense, units: 2}
loss: {name: mean_squared_error}
optimizer: {name: adam, learning_rate: 0.01}
distribute: {devices: [cpu:0, cpu:1]}
train: {epochs: 30, log_every_steps: 30}
checkpoint: {every_steps: 0}
)"));
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result eval =
      RunCli({"eval", "--config", config, "--checkpoint", dir + "/run"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_THAT(eval.out, ::testing::Not(HasSubstr("accuracy")));
  const double mae = JsonNumber(eval.out, "mean_absolute_error");
  EXPECT_LT(JsonNumber(eval.out, "loss"), 0.1) << eval.out;
  WriteBytes(
      dir + "/x.npy",
      trainer::NpyHeaderBytes("<f4", {kTest, kFeatures}) + RawBytes(test.x));
  Result p =
      RunCli({"predict", "--config", config, "--checkpoint", dir + "/run",
              "--input", dir + "/x.npy", "--output", dir + "/y.npy"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  absl::StatusOr<trainer::NpyArray> out =
      trainer::ParseNpy(testing::ReadFile(dir + "/y.npy"), dir + "/y.npy");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->header.shape, (std::vector<int64_t>{kTest, 2}));
  std::vector<float> y(kTest * 2);
  std::memcpy(y.data(), out->data(), y.size() * 4);
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) sum += std::abs(y[i] - test.real[i]);
  EXPECT_NEAR(sum / y.size(), mae, 1e-5);
  // Early stopping on the error, which falls: a run of many epochs stops
  // when it no longer does; every test record holds the error.
  Result stopping =
      RunCli({"train", "--config", config, "--run_dir", dir + "/run2", "--set",
              "train={epochs: 400, log_every_steps: 1000, "
              "eval_every_epochs: 1, early_stopping_patience: 2, "
              "early_stopping_monitor: mean_absolute_error}"});
  ASSERT_EQ(stopping.exit_code, 0) << stopping.err;
  EXPECT_THAT(stopping.out + stopping.err,
              HasSubstr("the test mean_absolute_error has not improved"));
  int tests = 0;
  for (const std::string& line :
       Lines(testing::ReadFile(dir + "/run2/metrics.jsonl"))) {
    if (line.find("\"split\": \"test\"") == std::string::npos) continue;
    EXPECT_THAT(line, HasSubstr("\"mean_absolute_error\": "));
    EXPECT_THAT(line, ::testing::Not(HasSubstr("accuracy")));
    ++tests;
  }
  EXPECT_GT(tests, 2);
  EXPECT_LT(tests, 400);  // It stopped early.
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run3", "--set",
               "train={epochs: 1, early_stopping_patience: 2, "
               "early_stopping_monitor: accuracy}"},
              "train.early_stopping_monitor: accuracy is not reported under "
              "loss.name mean_squared_error (evaluation reports loss, "
              "mean_absolute_error)");
  // A patience given as null leaves the monitor inert.
  Result inert =
      RunCli({"train", "--config", config, "--run_dir", dir + "/run5", "--set",
              "train={epochs: 1, early_stopping_monitor: accuracy}", "--set",
              "train.early_stopping_patience=null"});
  EXPECT_EQ(inert.exit_code, 0) << inert.err;
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run3", "--set",
               "loss.label_smoothing=0.1"},
              "loss.label_smoothing: unknown key for loss "
              "mean_squared_error");
  // A loss's own keys: Huber's delta, checked, and only under huber (the
  // resolved config writes it).
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run3", "--set",
               "loss={name: huber, delta: 0}"},
              "loss.delta: expected a number > 0, got 0");
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run3", "--set",
               "loss.delta=0.5"},
              "loss.delta: unknown key for loss mean_squared_error");
  Result huber =
      RunCli({"train", "--config", config, "--run_dir", dir + "/run6", "--set",
              "loss={name: huber, delta: 2}", "--set", "train.epochs=1"});
  ASSERT_EQ(huber.exit_code, 0) << huber.err;
  EXPECT_THAT(testing::ReadFile(dir + "/run6/config.yaml"),
              HasSubstr("delta: 2"));
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run3", "--set",
               "loss.name=sparse_categorical_crossentropy"},
              "loss.name: sparse_categorical_crossentropy takes class labels "
              "(integers), but the data's labels are real values");
  // A sigmoid on a regression's output is an ordinary activation.
  Result sigmoid =
      RunCli({"train", "--config", config, "--run_dir", dir + "/run4", "--set",
              "model.layers[1].activation=sigmoid", "--set", "train.epochs=1"});
  EXPECT_EQ(sigmoid.exit_code, 0) << sigmoid.err;
}

}  // namespace
}  // namespace mirrortrain
