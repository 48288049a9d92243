// End-to-end runs of the binary on the cifar10, npz and text data sources, on
// files generated here (CIFAR-10 cannot be installed on this machine):
// training with augmentation and normalisation, and bad data exiting 2
// with one line naming the file.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/cli_runner.h"
#include "tests/trainer/data/npz_writer.h"

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

// CIFAR-10 binary records whose images depend on their label (a bright
// square whose corner is the label), so a small CNN has something to learn.
std::string Records(int first, int count) {
  std::string out;
  for (int r = first; r < first + count; ++r) {
    const int label = (r * 7) % 10;
    out.push_back(static_cast<char>(label));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) {
        const int y = p / 32, x = p % 32;
        const bool square = y / 8 == label / 4 && x / 8 == label % 4;
        out.push_back(
            static_cast<char>(square ? 200 + c * 20 : (r * 13 + p * 7) % 64));
      }
    }
  }
  return out;
}

// Five training files of 40 records and a test file of 50.
std::string WriteCifarDir(const std::string& dir) {
  fs::create_directories(dir);
  for (int k = 1; k <= 5; ++k) {
    WriteBytes(absl::StrCat(dir, "/data_batch_", k, ".bin"),
               Records(40 * (k - 1), 40));
  }
  WriteBytes(dir + "/test_batch.bin", Records(1000, 50));
  return dir;
}

std::string WriteConfig(const std::string& dir, const std::string& data) {
  const std::string path = dir + "/job.yaml";
  WriteBytes(path, absl::StrCat(R"(seed: 3
data:
)",
                                data, R"(
  global_batch_size: 32
model:
  layers:
    - {type: conv2d, filters: 4, kernel_size: 3, padding: same, activation: relu}
    - {type: global_average_pooling2d}
    - {type: dense, units: 10}
optimizer: {name: momentum, learning_rate: 0.05}
ema: {decay: 0.999}
distribute: {devices: [cpu:0, cpu:1]}
train: {steps: 8, log_every_steps: 4}
checkpoint: {every_steps: 0}
)"));
  return path;
}

constexpr char kCifarData[] = R"(  name: cifar10
  dir: DIR
  normalize: {mean: [0.2, 0.2, 0.25], std: [0.3, 0.3, 0.3]}
  augment: {random_crop_padding: 4, horizontal_flip: true,
            random_erasing: 0.5})";

std::string CifarData(const std::string& dir) {
  std::string data = kCifarData;
  data.replace(data.find("DIR"), 3, dir);
  return data;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(DataCliTest, TrainsOnCifarFilesWithAugmentAndNormalize) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string cifar = WriteCifarDir(dir + "/cifar");
  const std::string config = WriteConfig(dir, CifarData(cifar));
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string resolved = ReadFile(dir + "/run/config.yaml");
  EXPECT_THAT(resolved, HasSubstr("random_crop_padding: 4"));
  EXPECT_THAT(resolved, HasSubstr("horizontal_flip: true"));
  EXPECT_THAT(resolved, HasSubstr("random_erasing: 0.5"));
  EXPECT_THAT(resolved, HasSubstr("std: [0.3, 0.3, 0.3]"));
  const std::vector<std::string> metrics =
      Lines(ReadFile(dir + "/run/metrics.jsonl"));
  int train = 0, test = 0;
  for (const std::string& line : metrics) {
    train += line.find("\"split\": \"train\"") != std::string::npos;
    test += line.find("\"split\": \"test\"") != std::string::npos;
    EXPECT_EQ(line.find("null"), std::string::npos) << line;  // Non-finite.
  }
  EXPECT_EQ(train, 2);  // Steps 4 and 8.
  // Raw and EMA weights after the first epoch (7 batches of 200 examples)
  // and at the end.
  EXPECT_EQ(test, 4);

  // Evaluation reads the test file through the same normalisation.
  Result eval = RunCli(
      {"eval", "--config", config, "--checkpoint", dir + "/run/checkpoints"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_THAT(eval.out, HasSubstr("\"step\": 8"));
  EXPECT_THAT(eval.out, HasSubstr("\"examples\": 50"));
}

TEST(DataCliTest, TrainsOnAnNpzOfGrayscaleImages) {
  const std::string dir = FreshTestDir("data_cli");
  std::vector<uint8_t> x(64 * 8 * 8);
  std::vector<int64_t> y(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i * 37) % 256;
  for (size_t i = 0; i < y.size(); ++i) y[i] = i % 10;
  WriteBytes(
      dir + "/gray.npz",
      ZipBytes({{"x_train.npy", NpyBytes("|u1", {64, 8, 8}, RawBytes(x)), true},
                {"y_train.npy", NpyBytes("<i8", {64}, RawBytes(y)), true},
                {"x_test.npy", NpyBytes("|u1", {64, 8, 8}, RawBytes(x)), false},
                {"y_test.npy", NpyBytes("<i8", {64}, RawBytes(y)), false}}));
  const std::string config =
      WriteConfig(dir, absl::StrCat("  name: npz\n  path: ", dir, "/gray.npz\n",
                                    "  normalize: {mean: [0.5], std: [0.25]}\n",
                                    "  augment: {random_crop_padding: 1}"));
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// An npz of sequences [n, steps, channels] for a model that takes [steps,
// channels] (conv1d, then pooling over the steps): it trains, and predict
// reads an array of the same form; without model.input_shape the data are
// images (a channel added) and conv1d's error says what to set; an array of
// other steps is named as it is.
TEST(DataCliTest, Conv1DClassifiesNpzSequencesAndPredicts) {
  const std::string dir = FreshTestDir("data_cli_seq");
  constexpr int64_t kN = 64, kSteps = 12, kChannels = 4;
  std::vector<float> x(kN * kSteps * kChannels);
  std::vector<int64_t> y(kN);
  for (int64_t i = 0; i < kN; ++i) {
    y[i] = i % 4;  // The quarter of the steps that holds a bump.
    for (int64_t t = 0; t < kSteps; ++t) {
      for (int64_t c = 0; c < kChannels; ++c) {
        x[(i * kSteps + t) * kChannels + c] =
            0.1f * static_cast<float>((i * 7 + t * 3 + c) % 5) +
            (t / 3 == y[i] ? 1.0f : 0.0f);
      }
    }
  }
  const std::vector<int64_t> shape = {kN, kSteps, kChannels};
  WriteBytes(dir + "/seq.npz",
             ZipBytes({{"x_train.npy", NpyBytes("<f4", shape, RawBytes(x))},
                       {"y_train.npy", NpyBytes("<i8", {kN}, RawBytes(y))},
                       {"x_test.npy", NpyBytes("<f4", shape, RawBytes(x))},
                       {"y_test.npy", NpyBytes("<i8", {kN}, RawBytes(y))}}));
  const std::string config = dir + "/seq.yaml";
  WriteBytes(config, absl::StrCat("data: {name: npz, path: ", dir,
                                  "/seq.npz, global_batch_size: 16}\n",
                                  R"(model:
  input_shape: [12, 4]
  layers:
    - {type: conv1d, filters: 8, kernel_size: 3, padding: same, activation: relu}
    - {type: global_max_pooling1d}
    - {type: dense, units: 4}
optimizer: {name: adam, learning_rate: 0.02}
distribute: {devices: [cpu:0, cpu:1]}
train: {epochs: 4, log_every_steps: 4}
checkpoint: {every_steps: 0}
)"));
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  WriteBytes(dir + "/x.npy",
             NpyBytes("<f4", {5, kSteps, kChannels},
                      RawBytes(std::vector<float>(
                          x.begin(), x.begin() + 5 * kSteps * kChannels))));
  Result p =
      RunCli({"predict", "--config", config, "--checkpoint", dir + "/run",
              "--input", dir + "/x.npy", "--output", dir + "/y.npy"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("\"shape\": [5, 4]}"));
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run2", "--set",
               "model.input_shape=null"},
              "expects [batch, steps, channels] input, got [1,12,4,1] (npz "
              "sequences [n, steps, channels]: set model.input_shape: "
              "[steps, channels])");
  WriteBytes(dir + "/short.npy",
             NpyBytes("<f4", {5, 10, kChannels},
                      RawBytes(std::vector<float>(5 * 10 * kChannels))));
  ExpectExit2({"predict", "--config", config, "--checkpoint", dir + "/run",
               "--input", dir + "/short.npy", "--output", dir + "/y2.npy"},
              "examples of shape [10,4]");
}

// Synthetic data has the model's input shape when the config gives one
// (colour images here); one too large for memory is a config-time error
// naming the key that shrinks it.
TEST(DataCliTest, SyntheticDataTakesTheModelsInputShape) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string config = WriteConfig(
      dir, "  name: synthetic\n  train_examples: 256\n  test_examples: 64");
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run",
                     "--set", "model.input_shape=[6,6,3]"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result summary = RunCli({"train", "--config", config, "--dry_run", "--set",
                           "model.input_shape=[6,6,3]"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  // The conv's 3x3 kernel over 3 channels into 4 filters, + 4 biases.
  EXPECT_THAT(summary.out,
              ::testing::ContainsRegex("\\(None, 6, 6, 4\\) +112\n"))
      << summary.out;
  ExpectExit2(
      {"train", "--config", config, "--run_dir", dir + "/huge", "--set",
       "model.input_shape=[512,512,3]", "--set", "data.train_examples=0"},
      "data: synthetic: 60000 examples of [512,512,3] "
      "(model.input_shape) and their 10 class prototypes take more "
      "than 4 GiB; set data.train_examples lower or the shape "
      "smaller");
  // Fewer examples than one batch, with drop_remainder: named by its keys.
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/few", "--set",
               "data.train_examples=4", "--set", "data.global_batch_size=16",
               "--set", "data.drop_remainder=true"},
              "data.global_batch_size: 16 is more than the 4 examples of "
              "synthetic, and data.drop_remainder: true leaves no batch");
  // Its values are not token ids: an embedding would read each as id 0.
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/ids", "--set",
               "model.input_shape=[8]", "--set",
               "model.layers=[{type: embedding, input_dim: 4, output_dim: 2}, "
               "{type: flatten}, {type: dense, units: 10}]"},
              "model.layers[0] (embedding): the data's examples are real "
              "values (synthetic, or pixels scaled to [0, 1]), not token ids");
}

TEST(DataCliTest, BadCifarFilesExit2NamingTheFile) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string cifar = WriteCifarDir(dir + "/cifar");
  const std::string config = WriteConfig(dir, CifarData(cifar));
  const std::string two = Records(40, 40);
  WriteBytes(cifar + "/data_batch_2.bin", two.substr(0, two.size() - 100));
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run"},
              cifar +
                  "/data_batch_2.bin: size 122820 bytes is not a "
                  "multiple of the 3073-byte CIFAR-10 record");

  std::string bad_label = Records(1000, 50);
  bad_label[3 * 3073] = 17;
  WriteBytes(cifar + "/test_batch.bin", bad_label);
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run"},
              cifar + "/test_batch.bin: label 17 of record 3 is out of range");
}

TEST(DataCliTest, BadNpzExit2NamingFileAndArray) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string path = dir + "/bad.npz";
  std::vector<double> x(4 * 8 * 8, 0.5);
  std::vector<int64_t> y = {0, 1, 2, 3};
  WriteBytes(path,
             ZipBytes({{"x_train.npy", NpyBytes("<f8", {4, 8, 8}, RawBytes(x))},
                       {"y_train.npy", NpyBytes("<i8", {4}, RawBytes(y))},
                       {"x_test.npy", NpyBytes("<f8", {4, 8, 8}, RawBytes(x))},
                       {"y_test.npy", NpyBytes("<i8", {4}, RawBytes(y))}}));
  const std::string config =
      WriteConfig(dir, absl::StrCat("  name: npz\n  path: ", path));
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run"},
              path + ": x_test: dtype '<f8' is neither uint8");
  // A truncated archive.
  const std::string whole = ReadFile(path);
  WriteBytes(path, whole.substr(0, whole.size() - 30));
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run"},
              path + ": truncated, or not a ZIP archive");
}

// Token ids read from an npz for a model that starts with an embedding are
// checked when a split loads, naming the example: before, a bad id ended
// the run at the first step whose batch held it, after the run directory
// got its files.
TEST(DataCliTest, NpzTokenIdsOutsideTheEmbeddingExit2NamingTheExample) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string path = dir + "/ids.npz";
  auto write = [&](float bad_train, float bad_test) {
    std::vector<float> train(6 * 4), test(6 * 4);
    for (size_t i = 0; i < train.size(); ++i) train[i] = float(i % 8);
    test = train;
    train[2 * 4 + 3] = bad_train;  // Example 2, position 3.
    test[5 * 4 + 1] = bad_test;    // Example 5, position 1.
    std::vector<int64_t> y = {0, 1, 2, 3, 0, 1};
    WriteBytes(
        path,
        ZipBytes({{"x_train.npy", NpyBytes("<f4", {6, 4}, RawBytes(train))},
                  {"y_train.npy", NpyBytes("<i8", {6}, RawBytes(y))},
                  {"x_test.npy", NpyBytes("<f4", {6, 4}, RawBytes(test))},
                  {"y_test.npy", NpyBytes("<i8", {6}, RawBytes(y))}}));
  };
  const std::vector<std::string> args = {
      "train",
      "--config",
      WriteConfig(dir, absl::StrCat("  name: npz\n  path: ", path)),
      "--run_dir",
      dir + "/run",
      "--set",
      "model={layers: [{type: embedding, input_dim: 8, output_dim: 3}, "
      "{type: flatten}, {type: dense, units: 4}]}",
      "--set",
      "data.global_batch_size=2"};
  // Ids truncate to integers, as Keras casts them: 7.9 is id 7, -0.5 id 0.
  write(7.9f, -0.5f);
  Result ok = RunCli(args);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  fs::remove_all(dir + "/run");
  write(8.0f, 1.0f);
  // The error names the file and array that hold the id.
  ExpectExit2(args, absl::StrCat("data: ", path,
                                 ": x_train: example 2 holds 8 at position 3, "
                                 "not a token id in [0, 8) of model.layers[0] "
                                 "(embedding)"));
  write(1.0f, -1.0f);
  ExpectExit2(
      args, absl::StrCat("data: ", path,
                         ": x_test: example 5 holds -1 at position 1, not a "
                         "token id in [0, 8) of model.layers[0] (embedding)"));
  // First inside a container, or behind a layer that passes the values on
  // (a reshape), the embedding still reads the input: checked as well (it
  // was not, and the run failed at a step, exit 1).
  const std::pair<const char*, const char*> readers[] = {
      {"{type: sequential, layers: [{type: embedding, input_dim: 8, "
       "output_dim: 3}]}",
       "model.layers[0].layers[0]"},
      {"{type: reshape, target_shape: [4]}, {type: embedding, input_dim: 8, "
       "output_dim: 3}",
       "model.layers[1]"},
      // Two branches each starting with an embedding: the one of fewer
      // ids (the shortcut's here) names the range.
      {"{type: concatenate, layers: [{type: embedding, input_dim: 50, "
       "output_dim: 3}], shortcut: [{type: embedding, input_dim: 8, "
       "output_dim: 2}]}",
       "model.layers[0].shortcut[0]"}};
  for (const auto& [layers, reader] : readers) {
    std::vector<std::string> model = args;
    model[6] = absl::StrCat("model={layers: [", layers,
                            ", {type: flatten}, {type: dense, units: 4}]}");
    ExpectExit2(model, absl::StrCat("data: ", path,
                                    ": x_test: example 5 holds -1 at "
                                    "position 1, not a token id in [0, 8) "
                                    "of ",
                                    reader, " (embedding)"));
  }
  write(8.0f, 1.0f);
  // Behind a layer that computes (here the identity, as an activation) the
  // ids are not checked when the data loads: the step that gathers a bad
  // one ends the run, a failure while running (exit 1: the run directory
  // has its files by then), naming the step.
  std::vector<std::string> behind = args;
  behind[6] =
      "model={layers: [{type: activation, activation: linear}, {type: "
      "embedding, input_dim: 8, output_dim: 3}, {type: flatten}, {type: "
      "dense, units: 4}]}";
  Result running = RunCli(behind);
  EXPECT_EQ(running.exit_code, 1) << running.err;
  EXPECT_THAT(running.err, HasSubstr(": Gather: index 8 at position"));
  EXPECT_THAT(running.err, HasSubstr("\nmirrortrain: step "));
  fs::remove_all(dir + "/run");
  write(1.0f, -1.0f);
  // The dry run checks what train checks of the split it loads.
  std::vector<std::string> dry = args;
  dry.push_back("--dry_run");
  ExpectExit2(
      dry, absl::StrCat("data: ", path,
                        ": x_test: example 5 holds -1 at position 1, not a "
                        "token id in [0, 8) of model.layers[0] (embedding)"));
  // Normalizing ids would move them to other rows.
  write(1.0f, 1.0f);
  std::vector<std::string> normalized = args;
  normalized.push_back("--set");
  normalized.push_back(
      "data.normalize={mean: [0, 0, 0, 0], std: [2, 2, 2, 2]}");
  ExpectExit2(normalized,
              "data.normalize: model.layers[0] (embedding) reads the data as "
              "token ids, which are not normalized");
  write(3e9f, 1.0f);
  ExpectExit2(args, absl::StrCat("data: ", path,
                                 ": x_train: example 2 holds 3e+09 at "
                                 "position 3"));
  // uint8 x are pixels, scaled to [0, 1]: as ids every one would be 0 (it
  // trained silently on them before). In either split.
  std::vector<uint8_t> bytes(6 * 4, 7);
  std::vector<float> floats(6 * 4, 7.0f);
  std::vector<int64_t> y = {0, 1, 2, 3, 0, 1};
  for (const bool train_bytes : {true, false}) {
    SCOPED_TRACE(train_bytes ? "uint8 x_train" : "uint8 x_test");
    const std::string u1 = NpyBytes("|u1", {6, 4}, RawBytes(bytes));
    const std::string f4 = NpyBytes("<f4", {6, 4}, RawBytes(floats));
    WriteBytes(path,
               ZipBytes({{"x_train.npy", train_bytes ? u1 : f4},
                         {"y_train.npy", NpyBytes("<i8", {6}, RawBytes(y))},
                         {"x_test.npy", train_bytes ? f4 : u1},
                         {"y_test.npy", NpyBytes("<i8", {6}, RawBytes(y))}}));
    ExpectExit2(args,
                "model.layers[0] (embedding): the data's examples are real "
                "values (synthetic, or pixels scaled to [0, 1]), not token "
                "ids (each would be id 0): train it on text, or on npz ids "
                "stored as float32");
  }
}

TEST(DataCliTest, TrainsOnTextAndReportsBitsPerByte) {
  const std::string dir = FreshTestDir("data_cli");
  std::string a, b;
  for (int i = 0; i < 60; ++i) a += "the quick brown fox jumps. ";
  for (int i = 0; i < 40; ++i) b += "over the lazy dog! ";
  WriteBytes(dir + "/a.txt", a);
  WriteBytes(dir + "/b.txt", b);
  const std::string config = dir + "/text.yaml";
  WriteBytes(config, absl::StrCat("seed: 5\ndata:\n  name: text\n  path: [",
                                  dir, "/a.txt, ", dir, "/b.txt]\n", R"(
  sequence_length: 8
  validation_fraction: 0.2
  global_batch_size: 16
model:
  layers:
    - {type: dense, units: 64, activation: relu}
    - {type: dense, units: 2048}
    - {type: reshape, target_shape: [8, 256]}
optimizer: {name: adamw, learning_rate: 0.01,
            exclude_from_weight_decay: [bias]}
distribute: {devices: [cpu:0, cpu:1]}
train: {steps: 30, log_every_steps: 10, accumulation_steps: 2}
checkpoint: {every_steps: 0}
)"));
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The last test line: per-token loss well below a uniform guess (ln 256).
  std::string test_line;
  for (const std::string& line : Lines(ReadFile(dir + "/run/metrics.jsonl"))) {
    if (line.find("\"test\"") != std::string::npos) test_line = line;
  }
  EXPECT_THAT(test_line, HasSubstr("\"bits_per_byte\": "));
  EXPECT_THAT(ReadFile(dir + "/run/metrics.jsonl"),
              HasSubstr("\"tokens_per_sec\": "));
  Result eval = RunCli({"eval", "--config", config, "--checkpoint",
                        dir + "/run/checkpoints", "--weights", "raw"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_THAT(eval.out, HasSubstr("\"step\": 30"));
  // 20% of 2380 bytes: 476, so (476 - 1) / 8 = 59 windows of 8 tokens.
  EXPECT_THAT(eval.out, HasSubstr("\"examples\": 59"));
  EXPECT_THAT(eval.out, HasSubstr("\"tokens\": 472"));
  const double loss = JsonNumber(eval.out, "loss");
  EXPECT_LT(loss, 0.5 * std::log(256.0));
  EXPECT_NEAR(JsonNumber(eval.out, "bits_per_byte"), loss / std::log(2.0),
              1e-6 * loss);
  // Label smoothing changes the logged loss, not the bits per byte, which
  // measure the plain cross-entropy.
  Result smoothed = RunCli({"eval", "--config", config, "--checkpoint",
                            dir + "/run/checkpoints", "--weights", "raw",
                            "--set", "loss.label_smoothing=0.3"});
  ASSERT_EQ(smoothed.exit_code, 0) << smoothed.err;
  auto bits = [](const std::string& out) {
    return out.substr(out.find("\"bits_per_byte\": "));
  };
  EXPECT_EQ(bits(smoothed.out), bits(eval.out)) << smoothed.out;
  EXPECT_GT(JsonNumber(smoothed.out, "loss"), loss);
  // predict on byte windows: uint8 ids as they are (not scaled as pixels)
  // give the logits of float32 ids, one row of 256 per token.
  const std::string window = "the quic";
  testing::WriteBytes(dir + "/ids_u8.npy", NpyBytes("|u1", {1, 8}, window));
  std::vector<float> ids(window.begin(), window.end());
  testing::WriteBytes(dir + "/ids_f32.npy",
                      NpyBytes("<f4", {1, 8}, RawBytes(ids)));
  for (const char* name : {"u8", "f32"}) {
    Result p =
        RunCli({"predict", "--config", config, "--checkpoint", dir + "/run",
                "--input", absl::StrCat(dir, "/ids_", name, ".npy"), "--output",
                absl::StrCat(dir, "/logits_", name, ".npy")});
    ASSERT_EQ(p.exit_code, 0) << p.err;
    EXPECT_THAT(p.out, HasSubstr("\"shape\": [1, 8, 256]}"));
  }
  EXPECT_EQ(testing::ReadFile(dir + "/logits_u8.npy"),
            testing::ReadFile(dir + "/logits_f32.npy"));
  ids[3] = 2.5f;
  testing::WriteBytes(dir + "/ids_bad.npy",
                      NpyBytes("<f4", {1, 8}, RawBytes(ids)));
  ExpectExit2(
      {"predict", "--config", config, "--checkpoint", dir + "/run", "--input",
       dir + "/ids_bad.npy", "--output", dir + "/logits_bad.npy"},
      "ids_bad.npy: element 3 is 2.5, not a token id (an integer >= "
      "0, below 256)");
  EXPECT_FALSE(fs::exists(dir + "/logits_bad.npy"));
  // A model without one logit per byte value and token.
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run2", "--set",
               "model.layers=[{type: dense, units: 256}]"},
              "model: the last layer gives [256] per example but the data "
              "needs [8,256]");
  // A reshape that does not hold the elements it is given: the error
  // names the entry's line and the override inside it.
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run2", "--set",
               "model.layers[2].target_shape=[8, 255]"},
              "text.yaml:13 and --set model.layers[2].target_shape=[8, 255]: "
              "model.layers[2] (reshape): target_shape: [8,255] holds 2040 "
              "elements but an input example [2048] holds 2048");
}

TEST(DataCliTest, BadTextInputsExit2NamingTheFileOrKey) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string text = dir + "/a.txt", empty = dir + "/empty.txt";
  WriteBytes(text, std::string(200, 'x'));
  WriteBytes(empty, "");
  auto run = [&](const std::string& data) {
    return std::vector<std::string>{"train", "--config", WriteConfig(dir, data),
                                    "--run_dir", dir + "/run"};
  };
  ExpectExit2(run(absl::StrCat("  name: text\n  path: [", text, ", ", dir,
                               "/missing.txt]")),
              dir + "/missing.txt");
  ExpectExit2(
      run(absl::StrCat("  name: text\n  path: [", text, ", ", empty, "]")),
      empty + ": empty text file");
  // One more key after `path: a.txt` (line 5 of the config), and the error.
  const std::vector<std::pair<std::string, std::string>> bad_keys = {
      {"sequence_length: 500",
       "data.sequence_length: 500 needs 501 bytes per window"},
      {"sequence_length: 9223372036854775807",
       "data.sequence_length: 9223372036854775807 needs 9223372036854775808 "
       "bytes per window"},
      {"validation_fraction: 0.001",
       "data.validation_fraction: 0.001 holds out 0 of the 200 bytes"},
      // Out of range in the config: file:line and the key.
      {"sequence_length: 0",
       "job.yaml:5: data.sequence_length: expected an integer >= 1, got 0"},
      {"validation_fraction: 0",
       "job.yaml:5: data.validation_fraction: expected a number in (0, 1), got "
       "0"},
      {"validation_fraction: 1",
       "job.yaml:5: data.validation_fraction: expected a number in (0, 1), got "
       "1"}};
  for (const auto& [key, error] : bad_keys) {
    ExpectExit2(run(absl::StrCat("  name: text\n  path: ", text, "\n  ", key)),
                error);
  }
  // Token ids are not normalized (the embedding would pick other rows).
  ExpectExit2(run(absl::StrCat("  name: text\n  path: ", text,
                               "\n  sequence_length: 4\n  normalize: {mean: "
                               "[0, 0, 0, 0], std: [2, 2, 2, 2]}")),
              "data.normalize: text gives token ids, which are not normalized");
}

TEST(DataCliTest, NormalizeAndAugmentThatDoNotFitTheDataExit2) {
  const std::string dir = FreshTestDir("data_cli");
  const std::string cifar = WriteCifarDir(dir + "/cifar");
  const std::string config = WriteConfig(dir, CifarData(cifar));
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run", "--set",
               "data.normalize={mean: [0.5], std: [0.2]}"},
              "data.normalize.mean: has 1 values (std 1) but the data has 3 "
              "channels");
  ExpectExit2({"train", "--config", config, "--run_dir", dir + "/run", "--set",
               "data.normalize.std=[0.2, 0, 0.2]"},
              "--set data.normalize.std=[0.2, 0, 0.2]: data.normalize.std: ");

  // Feature vectors cannot be cropped.
  std::vector<uint8_t> x(4 * 6, 1);
  std::vector<int64_t> y = {0, 1, 0, 1};
  WriteBytes(dir + "/flat.npz",
             ZipBytes({{"x_train.npy", NpyBytes("|u1", {4, 6}, RawBytes(x))},
                       {"y_train.npy", NpyBytes("<i8", {4}, RawBytes(y))},
                       {"x_test.npy", NpyBytes("|u1", {4, 6}, RawBytes(x))},
                       {"y_test.npy", NpyBytes("<i8", {4}, RawBytes(y))}}));
  for (const bool dry_run : {false, true}) {
    std::vector<std::string> args = {
        "train",
        "--config",
        config,
        "--run_dir",
        dir + "/run",
        "--set",
        absl::StrCat("data={name: npz, path: ", dir,
                     "/flat.npz, augment: {horizontal_flip: true}}"),
        "--set",
        "model={name: mlp}"};
    if (dry_run) args.push_back("--dry_run");
    ExpectExit2(args,
                "data.augment: crops, flips and erasing need images [N, H, "
                "W, C], the data is [4,6]");
    // A model input that is not the examples' shape: refused by both too.
    args[6] = absl::StrCat("data={name: npz, path: ", dir, "/flat.npz}");
    args[8] = "model={name: mlp, input_shape: [5]}";
    ExpectExit2(args, "model.input_shape: [5] but the examples of ");
  }
}

// A masked output's loss under cross_device_ops none (gradients not
// reduced, for measuring): each replica divides by its shard's unmasked
// count scaled to the batch's rows, so with equal counts per shard the
// logged first loss (before any update) is the one-device run's.
TEST(DataCliTest, MaskedLossWithoutReductionCountsTheBatch) {
  const std::string dir = FreshTestDir("masked_none");
  // 4 rows of 4 ids, 3 unmasked in each half of the batch.
  const std::vector<float> x = {1, 2, 0, 0, 3, 0, 0, 0,  //
                                4, 5, 6, 0, 0, 0, 0, 0};
  const std::vector<int64_t> y = {0, 1, 0, 0, 2, 0, 0, 0,
                                  1, 2, 0, 0, 0, 0, 0, 0};
  const std::string xs = testing::NpyBytes("<f4", {4, 4}, RawBytes(x));
  const std::string ys = testing::NpyBytes("<i8", {4, 4}, RawBytes(y));
  WriteBytes(dir + "/tokens.npz", ZipBytes({{"x_train.npy", xs},
                                            {"y_train.npy", ys},
                                            {"x_test.npy", xs},
                                            {"y_test.npy", ys}}));
  const std::string config = dir + "/job.yaml";
  WriteBytes(config, absl::StrCat("data: {name: npz, path: ", dir,
                                  R"(/tokens.npz, global_batch_size: 4,
       shuffle: false}
model:
  input_shape: [4]
  layers:
    - {type: embedding, input_dim: 8, output_dim: 4, mask_zero: true}
    - {type: dense, units: 3}
train: {steps: 1, log_every_steps: 1}
checkpoint: {every_steps: 0}
)"));
  auto first_loss = [&](const std::string& run, std::vector<std::string> sets) {
    std::vector<std::string> args = {"train", "--config", config, "--run_dir",
                                     dir + "/" + run};
    for (const std::string& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    Result r = RunCli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const std::string& l :
         Lines(ReadFile(dir + "/" + run + "/metrics.jsonl"))) {
      if (l.find("\"split\": \"train\"") == std::string::npos) continue;
      const size_t at = l.find("\"loss\": ");
      return std::stod(l.substr(at + 8));
    }
    return -1.0;
  };
  const double one = first_loss("one", {});
  const double none = first_loss("none", {"distribute.devices=[cpu:0, cpu:1]",
                                          "distribute.cross_device_ops=none"});
  ASSERT_GT(one, 0);
  EXPECT_NEAR(none, one, 1e-6 * one);
}

// A layer that drops a mask (Keras's supports_masking false) is named on
// stderr, as Keras warns, and the run goes on.
TEST(DataCliTest, LayersThatDropAMaskAreWarnedAbout) {
  const std::string dir = FreshTestDir("mask_warning");
  WriteBytes(dir + "/ids.npz", testing::TokenIdsNpzBytes(32, 0));
  const std::string config = dir + "/job.yaml";
  WriteBytes(config, absl::StrCat("data: {name: npz, path: ", dir,
                                  R"(/ids.npz, global_batch_size: 8}
model:
  input_shape: [4]
  layers:
    - {type: embedding, input_dim: 10, output_dim: 4, mask_zero: true}
    - {type: conv1d, filters: 4, kernel_size: 1}
    - {type: lstm, units: 4}
    - {type: dense, units: 10}
train: {steps: 2}
checkpoint: {every_steps: 0}
)"));
  Result r = RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("mirrortrain: warning: " + config +
                               ":6: model.layers[1] (conv1d) drops the mask"));
  Result dry = RunCli({"train", "--config", config, "--dry_run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("warning: " + config + ":6: model.layers[1]"));
}

}  // namespace
}  // namespace mirrortrain
