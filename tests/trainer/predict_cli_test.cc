// `mirrortrain predict`: a trained classifier's outputs for the examples of
// a .npy file, checked against `eval` on the same images, and its input
// and usage errors (exit 2, one line, nothing written).
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/cli_runner.h"
#include "trainer/data/dataset.h"
#include "trainer/data/npy.h"

namespace mirrortrain {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kExamples = 500;

// Per process: ctest runs this file's test cases as parallel processes,
// each setting up the suite (one would delete the other's run).
std::string FreshDir(const std::string& name) {
  std::string dir =
      absl::StrCat(::testing::TempDir(), "/mt_predict_", name, "_", getpid());
  fs::remove_all(dir);
  return dir;
}

// A .npy file of `descr` and `shape` holding `data`.
void WriteNpy(const std::string& path, const std::string& descr,
              const std::vector<int64_t>& shape, const std::string& data) {
  testing::WriteBytes(path, trainer::NpyHeaderBytes(descr, shape) + data);
}

// The float32 values of a .npy file this build wrote (read with the
// project's own parser), or empty on a failure.
std::vector<float> ReadF32Npy(const std::string& path,
                              std::vector<int64_t>* shape) {
  absl::StatusOr<trainer::NpyArray> a = trainer::ParseNpy(ReadFile(path), path);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return {};
  EXPECT_EQ(a->header.descr, "<f4");
  *shape = a->header.shape;
  std::vector<float> v(a->header.num_elements());
  std::memcpy(v.data(), a->data(), v.size() * sizeof(float));
  return v;
}

// A run of SmallTrain with data.normalize (which predict must apply), the
// first test images as uint8 [n, 28, 28] and as float32 NHWC, and their
// labels.
class PredictCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(FreshDir("predict"));
    fs::create_directories(*dir_);
    Result r = RunCli(SmallTrain(*dir_ + "/run", {kNormalize}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    absl::StatusOr<trainer::InMemoryDataset> test = trainer::LoadFashionMnist(
        "/usr/share/datasets/fashion-mnist", /*train=*/false);
    ASSERT_TRUE(test.ok()) << test.status();
    const float* x = test->images.data<float>();
    std::string bytes, floats(kExamples * 784 * sizeof(float), '\0');
    std::memcpy(floats.data(), x, floats.size());
    for (int64_t i = 0; i < kExamples * 784; ++i) {
      bytes.push_back(static_cast<char>(std::lround(x[i] * 255.0f)));
    }
    WriteNpy(*dir_ + "/x_u8.npy", "|u1", {kExamples, 28, 28}, bytes);
    WriteNpy(*dir_ + "/x_f32.npy", "<f4", {kExamples, 28, 28, 1}, floats);
    labels_ = new std::vector<int32_t>(
        test->labels.data<int32_t>(), test->labels.data<int32_t>() + kExamples);
  }

  // The run's own resolved config: no note on a changed config.
  static std::vector<std::string> PredictArgs(const std::string& input,
                                              const std::string& output) {
    return {"predict",      "--config",     *dir_ + "/run/config.yaml",
            "--checkpoint", *dir_ + "/run", "--input",
            input,          "--output",     output};
  }

  static constexpr char kNormalize[] =
      "data.normalize={mean: [0.286], std: [0.353]}";
  static std::string* dir_;
  static std::vector<int32_t>* labels_;
};

std::string* PredictCliTest::dir_ = nullptr;
std::vector<int32_t>* PredictCliTest::labels_ = nullptr;

// The EMA weights' outputs classify as eval scores them; uint8 pixels give
// the float32 images' outputs bit for bit; the JSON line says what was
// written.
TEST_F(PredictCliTest, OutputsScoreAsEvalDoes) {
  std::vector<std::string> args =
      PredictArgs(*dir_ + "/x_u8.npy", *dir_ + "/y_u8.npy");
  Result r = RunCli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"weights\": \"ema\", \"examples\": 500, "));
  EXPECT_THAT(r.out, HasSubstr("\"shape\": [500, 10]}"));
  std::vector<int64_t> shape;
  const std::vector<float> logits = ReadF32Npy(*dir_ + "/y_u8.npy", &shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{kExamples, 10}));
  int64_t correct = 0;
  for (int64_t i = 0; i < kExamples; ++i) {
    const float* row = logits.data() + i * 10;
    correct += std::max_element(row, row + 10) - row == (*labels_)[i];
  }
  Result eval =
      RunCli({"eval", "--config", Config(), "--checkpoint", *dir_ + "/run",
              "--set", "data.test_examples=500", "--set", kNormalize, "--set",
              "model.hidden_units=[32]"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_DOUBLE_EQ(JsonNumber(eval.out, "accuracy"),
                   static_cast<double>(correct) / kExamples);
  EXPECT_GT(correct, kExamples / 2);

  args = PredictArgs(*dir_ + "/x_f32.npy", *dir_ + "/y_f32.npy");
  ASSERT_EQ(RunCli(args).exit_code, 0);
  EXPECT_EQ(ReadFile(*dir_ + "/y_f32.npy"), ReadFile(*dir_ + "/y_u8.npy"));
  // Without the normalisation the model sees other inputs.
  args.insert(args.end(), {"--set", "data.normalize.mean=null", "--set",
                           "data.normalize.std=null"});
  ASSERT_EQ(RunCli(args).exit_code, 0);
  EXPECT_NE(ReadFile(*dir_ + "/y_f32.npy"), ReadFile(*dir_ + "/y_u8.npy"));
}

// The same model with Keras's softmax on its last layer (the run's
// checkpoint holds the same variables): predict outputs the probabilities,
// Keras's model.predict, the softmax of the plain model's logits.
TEST_F(PredictCliTest, ASoftmaxLastLayerOutputsProbabilities) {
  const std::string x = *dir_ + "/x_u8.npy";
  ASSERT_EQ(RunCli(PredictArgs(x, *dir_ + "/logits.npy")).exit_code, 0);
  std::vector<std::string> args = PredictArgs(x, *dir_ + "/probs.npy");
  args.insert(args.end(),
              {"--set",
               "model={layers: [{type: flatten}, {type: dense, units: 32, "
               "activation: relu}, {type: dense, units: 10, activation: "
               "softmax}]}"});
  Result r = RunCli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int64_t> shape;
  const std::vector<float> logits = ReadF32Npy(*dir_ + "/logits.npy", &shape);
  const std::vector<float> probs = ReadF32Npy(*dir_ + "/probs.npy", &shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{kExamples, 10}));
  ASSERT_EQ(logits.size(), probs.size());
  for (int64_t i = 0; i < kExamples; ++i) {
    const float* z = logits.data() + i * 10;
    const double top = *std::max_element(z, z + 10);
    double sum = 0;
    for (int j = 0; j < 10; ++j) sum += std::exp(z[j] - top);
    for (int j = 0; j < 10; ++j) {
      EXPECT_NEAR(probs[i * 10 + j], std::exp(z[j] - top) / sum, 1e-6)
          << i << "," << j;
    }
  }
}

// `bytes` gzip-compressed at `path`.
void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// The input streams through in batches of 1000 examples: 2500 examples
// (three batches, the last partial) give the same outputs from a raw and
// a gzip file, their first 500 those of the 500-example file (another
// batching: within float rounding); a bad element in the last batch, and
// a gzip stream cut inside it, fail the run after two batches ran, and
// nothing is written.
TEST_F(PredictCliTest, TheInputStreamsInBatches) {
  const std::string d = *dir_ + "/stream";
  fs::create_directories(d);
  constexpr int64_t kMany = 2500, kPixels = 784;
  absl::StatusOr<trainer::InMemoryDataset> test = trainer::LoadFashionMnist(
      "/usr/share/datasets/fashion-mnist", /*train=*/false);
  ASSERT_TRUE(test.ok()) << test.status();
  std::string floats(kMany * kPixels * sizeof(float), '\0');
  std::memcpy(floats.data(), test->images.data<float>(), floats.size());
  const std::string header = trainer::NpyHeaderBytes("<f4", {kMany, 28, 28, 1});
  testing::WriteBytes(d + "/x.npy", header + floats);
  WriteGz(d + "/x.npy.gz", header + floats);
  Result raw = RunCli(PredictArgs(d + "/x.npy", d + "/y.npy"));
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  EXPECT_THAT(raw.out, HasSubstr("\"shape\": [2500, 10]}"));
  Result gz = RunCli(PredictArgs(d + "/x.npy.gz", d + "/y_gz.npy"));
  ASSERT_EQ(gz.exit_code, 0) << gz.err;
  EXPECT_EQ(ReadFile(d + "/y_gz.npy"), ReadFile(d + "/y.npy"));
  std::vector<int64_t> shape;
  const std::vector<float> many = ReadF32Npy(d + "/y.npy", &shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{kMany, 10}));
  ASSERT_EQ(
      RunCli(PredictArgs(*dir_ + "/x_f32.npy", d + "/y500.npy")).exit_code, 0);
  const std::vector<float> few = ReadF32Npy(d + "/y500.npy", &shape);
  ASSERT_EQ(few.size(), static_cast<size_t>(kExamples * 10));
  for (size_t i = 0; i < few.size(); ++i) {
    ASSERT_NEAR(many[i], few[i], 1e-5 * (1 + std::abs(few[i]))) << i;
  }

  // A NaN in the third batch, named by its index in the whole array.
  std::string bad = floats;
  const int64_t at = 2200 * kPixels + 3;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + at * sizeof(float), &nan, sizeof(float));
  testing::WriteBytes(d + "/nan.npy", header + bad);
  // A gzip stream cut in the third batch (the raw file's size would name
  // a short file before any batch runs).
  WriteGz(d + "/full.npy.gz", header + floats);
  const std::string full = ReadFile(d + "/full.npy.gz");
  testing::WriteBytes(d + "/cut.npy.gz", full.substr(0, full.size() * 9 / 10));
  testing::WriteBytes(d + "/long.npy", header + floats + "xy");
  // The gzip trailer's CRC wrong (its data inflates whole: found after the
  // last batch), garbage after the stream, a stream cut in the header.
  std::string crc = full;
  crc[crc.size() - 8] ^= 1;
  testing::WriteBytes(d + "/crc.npy.gz", crc);
  testing::WriteBytes(d + "/garbage.npy.gz", full + "garbage");
  testing::WriteBytes(d + "/head.npy.gz", full.substr(0, 12));
  struct Case {
    std::string input, expected;
  };
  for (const Case& c : std::vector<Case>{
           {d + "/nan.npy", absl::StrCat("nan.npy: element ", at,
                                         " is nan (inputs must be finite)")},
           {d + "/cut.npy.gz",
            "cut.npy.gz: truncated: shape (2500, 28, 28, "
            "1) of <f4 needs 7840000 bytes"},
           {d + "/long.npy",
            "long.npy: trailing bytes: 2 after the 7840000 "
            "bytes"},
           {d + "/crc.npy.gz", "crc.npy.gz: corrupt gzip stream after"},
           {d + "/garbage.npy.gz", "garbage.npy.gz: corrupt gzip stream after"},
           {d + "/head.npy.gz",
            "head.npy.gz: corrupt gzip stream after 0 bytes"}}) {
    Result r = RunCli(PredictArgs(c.input, d + "/out.npy"));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.expected));
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(fs::exists(d + "/out.npy")) << c.input;
  }
  // No temporary file is left behind either.
  for (const auto& entry : fs::directory_iterator(d)) {
    EXPECT_EQ(entry.path().string().find("out.npy"), std::string::npos)
        << entry.path();
  }
}

// Bad input is exit 2 with one line naming what is wrong, and no output
// file; an existing output stays as it was.
TEST_F(PredictCliTest, BadInputsExit2AndWriteNothing) {
  const std::string d = *dir_ + "/bad";
  fs::create_directories(d);
  WriteNpy(d + "/rgb.npy", "|u1", {2, 32, 32, 3}, std::string(2 * 3072, 'a'));
  WriteNpy(d + "/i64.npy", "<i8", {2, 784}, std::string(2 * 784 * 8, '\0'));
  testing::WriteBytes(d + "/short.npy",
                      trainer::NpyHeaderBytes("|u1", {2, 28, 28}) + "abc");
  testing::WriteBytes(d + "/kept.npy", "kept");
  struct Case {
    std::string input, output, expected;
  };
  const std::vector<Case> cases = {
      {d + "/none.npy", d + "/out.npy",
       "none.npy: cannot open: No such file or directory"},
      {d + "/rgb.npy", d + "/out.npy",
       "rgb.npy: examples of shape [32,32,3] (from the array's (2, 32, 32, "
       "3)), but the model takes [28,28,1]"},
      {d + "/i64.npy", d + "/out.npy", "i64.npy: dtype '<i8' is neither uint8"},
      {d + "/short.npy", d + "/out.npy", "short.npy: truncated"},
      {d + "/rgb.npy", d + "/kept.npy", "rgb.npy: examples of shape"},
      {*dir_ + "/x_u8.npy", d + "/no/out.npy",
       "--output " + d + "/no/out.npy: " + d + "/no is not a directory"},
      {*dir_ + "/x_u8.npy", d, "--output " + d + ": is a directory"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = PredictArgs(c.input, c.output);
    Result r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << c.expected << "\n" << r.err;
    EXPECT_THAT(r.err, StartsWith("mirrortrain: "));
    EXPECT_THAT(r.err, HasSubstr(c.expected));
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  EXPECT_FALSE(fs::exists(d + "/out.npy"));
  EXPECT_EQ(ReadFile(d + "/kept.npy"), "kept");
  Result usage =
      RunCli({"predict", "--config", *dir_ + "/run/config.yaml", "--checkpoint",
              *dir_ + "/run", "--input", *dir_ + "/x_u8.npy"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("--output Y.npy are required"));
}

}  // namespace
}  // namespace mirrortrain
