// The adversarial family, input side (issue #18): what a hostile user can
// hand the binary. Bad input exits 2 with one line on stderr naming the
// file or key and the problem, before anything is written; nothing hangs,
// aborts or crashes. Tiny synthetic jobs keep it fast.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/trainer/cli_runner.h"
#include "trainer/config.h"

namespace mirrortrain {
namespace {

namespace fs = std::filesystem;

// Long enough for any run here; what used to hang is killed at this point.
constexpr int kTimeoutSeconds = 60;

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/mt_adv_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A two-step job on 32 synthetic examples.
std::string TinyConfig(const std::string& dir,
                       const std::string& model = "{hidden_units: [4]}") {
  const std::string path = dir + "/tiny.yaml";
  WriteText(path, absl::StrCat("data: {name: synthetic, global_batch_size: 8, "
                               "train_examples: 32, test_examples: 16}\n"
                               "model: ",
                               model,
                               "\n"
                               "train: {steps: 2}\n"));
  return path;
}

std::vector<std::string> Train(const std::string& config,
                               const std::string& run_dir,
                               const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args = {"train", "--config", config, "--run_dir",
                                   run_dir};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

// Exit 2 with exactly one line on stderr that holds every one of `want`.
void ExpectOneLineError(const Result& r, const std::vector<std::string>& want,
                        const std::string& what) {
  EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
  std::vector<std::string> lines =
      absl::StrSplit(r.err, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 1u) << what << ": " << r.err;
  for (const std::string& w : want) {
    EXPECT_NE(r.err.find(w), std::string::npos)
        << what << ": want '" << w << "' in: " << r.err;
  }
}

TEST(AdversarialInputTest, NonRegularFilesAreRefusedWithoutReadingThem) {
  const std::string dir = FreshDir("nonregular");
  const std::string fifo = dir + "/fifo", folder = dir + "/folder";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directories(folder);
  struct Case {
    std::string path, kind;
    std::string inspect;  // What inspect says (a directory: its latest).
  };
  for (const Case& c :
       {Case{folder, "is a directory",
             "no checkpoint found (no 'checkpoint' index file)"},
        Case{fifo, "is a FIFO", "is a FIFO"},
        Case{"/dev/zero", "is a character device",
             "is a device, not a checkpoint file or directory"}}) {
    const std::string run = dir + "/run";
    ExpectOneLineError(RunCli(Train(c.path, run), kTimeoutSeconds),
                       {c.path + ": " + c.kind, "not a regular file"},
                       "train --config " + c.path);
    EXPECT_FALSE(fs::exists(run)) << c.path;
    ExpectOneLineError(RunCli({"inspect", c.path}, kTimeoutSeconds),
                       {c.path + ": " + c.inspect}, "inspect " + c.path);
  }
  // Data files too (a FIFO's open would wait for a writer forever). An npz
  // path may be a directory of .npy files: there a member is the file.
  const std::string npz_dir = dir + "/npz";
  for (const char* member : {"x_train", "y_train", "x_test", "y_test"}) {
    fs::create_directories(npz_dir + "/" + member + ".npy");
  }
  struct DataCase {
    std::string data, want;
  };
  for (const DataCase& c : {
           DataCase{"{name: npz, path: " + fifo + "}",
                    fifo + ": is a FIFO, not a regular file"},
           DataCase{"{name: npz, path: " + npz_dir + "}",
                    ".npy: is a directory, not a regular file"},
           DataCase{"{name: text, path: " + fifo + ", sequence_length: 8}",
                    fifo + ": is a FIFO, not a regular file"},
           DataCase{"{name: text, path: " + folder + ", sequence_length: 8}",
                    folder + ": is a directory, not a regular file"},
       }) {
    const std::string config = dir + "/data.yaml";
    WriteText(config,
              "data: " + c.data +
                  "\nmodel: {layers: [{type: embedding, input_dim: 256, "
                  "output_dim: 8}, {type: dense, units: 256}]}\n");
    ExpectOneLineError(RunCli(Train(config, dir + "/run"), kTimeoutSeconds),
                       {c.want}, "data " + c.data);
  }
  // A regular file past the size cap is refused without parsing it.
  const std::string big = dir + "/big.yaml";
  WriteText(big, std::string(trainer::kMaxConfigBytes + 1, '#'));
  ExpectOneLineError(RunCli(Train(big, dir + "/run"), kTimeoutSeconds),
                     {big, "more than the limit"}, "oversized config");
}

TEST(AdversarialInputTest, DuplicateKeysExtraDocumentsAndNullSections) {
  const std::string dir = FreshDir("yaml");
  const std::string run = dir + "/run";
  const std::string dup = dir + "/dup.yaml";
  WriteText(dup, "seed: 1\ntrain: {steps: 2}\nseed: 2\n");
  ExpectOneLineError(RunCli(Train(dup, run), kTimeoutSeconds),
                     {"dup.yaml:3: seed: duplicate key (first at line 1)"},
                     "duplicate key");
  const std::string docs = dir + "/docs.yaml";
  WriteText(docs, "seed: 1\n---\nseed: 2\n");
  ExpectOneLineError(RunCli(Train(docs, run), kTimeoutSeconds),
                     {"docs.yaml:2: more than one YAML document"},
                     "second document");
  const std::string tiny = TinyConfig(dir);
  ExpectOneLineError(
      RunCli(Train(tiny, run, {"optimizer=null"}), kTimeoutSeconds),
      {"--set optimizer=null: optimizer: expected a mapping of keys, got null"},
      "null section");
  EXPECT_FALSE(fs::exists(run));
  // `ema: null` is EMA off, as ema.decay: null: the resolved config says so.
  Result off = RunCli({"config", "--config", tiny, "--set", "ema=null"},
                      kTimeoutSeconds);
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("decay: ~"), std::string::npos) << off.out;
}

// Sizes that used to crash (SIGSEGV, free(): invalid size, uncaught
// std::bad_alloc) or to train and write an unreadable checkpoint.
TEST(AdversarialInputTest, HugeSizesAreConfigErrorsNamingTheKey) {
  const std::string dir = FreshDir("sizes");
  const std::string mlp = TinyConfig(dir);
  const std::string cnn_dir = dir + "/cnn";
  fs::create_directories(cnn_dir);
  const std::string cnn = TinyConfig(
      cnn_dir,
      "{name: cnn, conv_filters: [2], kernel_size: 3, dense_units: 4}");
  struct Case {
    std::string config, set, want;
  };
  const std::vector<Case> cases = {
      {mlp, "model.hidden_units=[10000000000000]", "model.hidden_units: "},
      {mlp, "model.hidden_units=[4611686018427387904]", "model.hidden_units: "},
      {mlp, "model.hidden_units=[2000000000]",
       "model.hidden_units[0] (dense): host allocation of"},
      {mlp,
       "model={layers: [{type: flatten}, {type: dense, units: 3000000000}]}",
       "model.layers[1].units: "},
      {mlp,
       "model={layers: [{type: flatten}, {type: dense, units: 2000000000}]}",
       "model.layers[1] (dense): host allocation of"},
      {cnn, "model.conv_filters=[4611686018427387904]", "model.conv_filters: "},
      {cnn, "model.conv_filters=[2000000000]",
       "model.conv_filters[0] and model.kernel_size (conv2d): host allocation"},
      {cnn, "model.kernel_size=4611686018427387904", "model.kernel_size: "},
      {cnn, "model.kernel_size=100000",
       "(conv2d): kernel_size 100000 does not fit the 28x28 input"},
      {cnn, "model.dense_units=10000000000000", "model.dense_units: "},
      {cnn, "model.dense_units=2000000000",
       "model.dense_units (dense): host allocation of"},
      {mlp, "train={epochs: 4611686018427387904, steps: null}",
       "train.epochs: 4611686018427387904 epochs of 4 steps"},
      // Beyond 2^53 a run would save checkpoints it cannot restore.
      {mlp, "train={epochs: 2251799813685249, steps: null}",
       "train.epochs: 2251799813685249 epochs of 4 steps are more than the "
       "9007199254740992 steps a checkpoint can hold"},
      {mlp, "train.steps=9007199254740993",
       "train.steps: 9007199254740993 is more than the 9007199254740992 "
       "steps a checkpoint can hold"},
  };
  for (const Case& c : cases) {
    const std::string run = dir + "/run";
    ExpectOneLineError(RunCli(Train(c.config, run, {c.set}), kTimeoutSeconds),
                       {c.want}, c.set);
    EXPECT_FALSE(fs::exists(run)) << "nothing written for " << c.set;
  }
}

// IDX files of `n` 28x28 images and labels.
void WriteIdx(const std::string& dir, const std::string& prefix, uint32_t n) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  WriteText(dir + "/" + prefix + "-images-idx3-ubyte",
            be32(0x803) + be32(n) + be32(28) + be32(28) +
                std::string(n * 28 * 28, '\x7f'));
  WriteText(dir + "/" + prefix + "-labels-idx1-ubyte",
            be32(0x801) + be32(n) + std::string(n, '\x03'));
}

TEST(AdversarialInputTest, EmptyTestSplitIsAnErrorNotAccuracyZero) {
  const std::string dir = FreshDir("emptytest");
  WriteIdx(dir, "train", 16);
  WriteIdx(dir, "t10k", 0);
  const std::string config = dir + "/empty.yaml";
  WriteText(config, absl::StrCat("data: {name: fashion_mnist, dir: ", dir,
                                 ", global_batch_size: 8}\n"
                                 "model: {hidden_units: [4]}\n"
                                 "train: {steps: 1}\n"));
  const std::string run = dir + "/run";
  ExpectOneLineError(RunCli(Train(config, run), kTimeoutSeconds),
                     {"data: the test split (fashion_mnist/test) has no "
                      "examples: nothing to evaluate"},
                     "train");
  EXPECT_FALSE(fs::exists(run));
  ExpectOneLineError(RunCli({"eval", "--config", config, "--checkpoint", run},
                            kTimeoutSeconds),
                     {"has no examples"}, "eval");
}

TEST(AdversarialInputTest, UsageErrorsAreOneLineWithAPointerToHelp) {
  const std::string dir = FreshDir("usage");
  const std::string tiny = TinyConfig(dir);
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, "mirrortrain: a command is required"},
      {{"frobnicate"}, "unknown command 'frobnicate' (see mirrortrain --help)"},
      {{"train"},
       "mirrortrain train: --config FILE is required (see "
       "mirrortrain train --help)"},
      {{"train", "--config", tiny, "stray"},
       "mirrortrain train: unexpected argument 'stray'"},
      {{"train", "--config", tiny, "--bogus"},
       "mirrortrain train: unknown flag '--bogus'"},
      {{"train", "--config", tiny, "--config=" + tiny},
       "mirrortrain train: flag '--config' given twice"},
      {{"--version", "extra"},
       "mirrortrain: --version takes no arguments, got 'extra'"},
      {{"eval", "--config", tiny}, "mirrortrain eval: --config FILE and"},
      {{"eval", "--config", tiny, "--checkpoint", dir, "stray"},
       "mirrortrain eval: unexpected argument 'stray'"},
      {{"inspect"}, "mirrortrain inspect: a CHECKPOINT_OR_DIR is required"},
      {{"inspect", "a", "b"}, "mirrortrain inspect: unexpected argument 'b'"},
      {{"config"}, "mirrortrain config: give either --schema or --config"},
  };
  for (const Case& c : cases) {
    ExpectOneLineError(RunCli(c.args, kTimeoutSeconds), {c.want}, c.want);
  }
  // A directory without checkpoints given to inspect: exit 2 and the reason
  // said once.
  Result r = RunCli({"inspect", dir}, kTimeoutSeconds);
  ExpectOneLineError(r, {dir + ": no checkpoint found"}, "inspect DIR");
}

TEST(AdversarialInputTest, ConfigErrorsNameTheirSourceOnOneLine) {
  const std::string dir = FreshDir("sources");
  const std::string config = dir + "/sched.yaml";
  WriteText(config,
            "train: {steps: 2}\n"
            "model: {hidden_units: [4]}\n"
            "optimizer:\n"
            "  schedule:\n"
            "    name: piecewise_constant\n"
            "    boundaries: [10, 20]\n"
            "    values: [0.1, 0.01, 0.001]\n");
  const std::string run = dir + "/run";
  // A check across keys blames the file's section and the --set inside it.
  ExpectOneLineError(
      RunCli(Train(config, run, {"optimizer.schedule.boundaries=[10]"}),
             kTimeoutSeconds),
      {"sched.yaml:5 and --set optimizer.schedule.boundaries=[10]: "
       "optimizer.schedule.values: must have one more entry"},
      "cross-key check");
  // A key of the file that the --set's choice no longer accepts.
  ExpectOneLineError(
      RunCli(Train(config, run, {"model.name=cnn"}), kTimeoutSeconds),
      {"sched.yaml:2: model.hidden_units: unknown key for preset cnn (chosen "
       "by --set model.name=cnn)"},
      "component chosen by --set");
  // A --set of one element of the file's list: both may be at fault.
  ExpectOneLineError(
      RunCli(Train(config, run, {"model.hidden_units[0]=0"}), kTimeoutSeconds),
      {"sched.yaml:2 and --set model.hidden_units[0]=0: model.hidden_units: "
       "expected a list of integers in [1, 2147483647] (at most 49999), got "
       "[0]"},
      "list element set");
  // A layer type changed by --set: the file's keys for the old type.
  ExpectOneLineError(
      RunCli(Train(config, run,
                   {"model={layers: [{type: dense, units: 4}]}",
                    "model.layers[0].type=flatten"}),
             kTimeoutSeconds),
      {"model.layers[0].units: unknown key for layer type flatten (chosen by "
       "--set model.layers[0].type=flatten)"},
      "layer type chosen by --set");
  // A layer's name picks nothing: its --set is not blamed for a bad key.
  const std::string layers = dir + "/layers.yaml";
  WriteText(layers, "model:\n  layers:\n    - {type: flatten, units: 4}\n");
  const Result named = RunCli(Train(layers, run, {"model.layers[0].name=head"}),
                              kTimeoutSeconds);
  ExpectOneLineError(named,
                     {"layers.yaml:3: model.layers[0].units: unknown key for "
                      "layer type flatten"},
                     "layer name set");
  EXPECT_EQ(named.err.find("chosen by"), std::string::npos) << named.err;
  // Control characters in a key stay on the one line, escaped.
  ExpectOneLineError(
      RunCli(Train(config, run, {"optimizer.bad\nkey=1"}), kTimeoutSeconds),
      {"optimizer.bad\\nkey: unknown key"}, "newline in a key");
  EXPECT_FALSE(fs::exists(run));
}

TEST(AdversarialInputTest, WatchdogBelowAMillisecondIsAnError) {
  const std::string dir = FreshDir("watchdog_min");
  ExpectOneLineError(
      RunCli(Train(TinyConfig(dir), dir + "/run",
                   {"distribute.watchdog_seconds=0.0005"}),
             kTimeoutSeconds),
      {"distribute.watchdog_seconds: expected a number in [0.001, 1000000]"},
      "watchdog 0.5 ms");
}

// The watchdog's abort path end to end: a 1 ms watchdog on two logical
// replicas. A run may finish or stop with exit 1 naming the watchdog; it
// used to die with SIGSEGV in LocalAllReduce::AllReduce a few times in
// twenty (local_all_reduce_test runs the collective's abort path 120 times).
TEST(AdversarialInputTest, WatchdogAbortPathExitsCleanly) {
  const std::string dir = FreshDir("watchdog_abort");
  const std::string config = TinyConfig(dir);
  constexpr int kRuns = 8;
  int stopped = 0;
  for (int i = 0; i < kRuns; ++i) {
    const std::string run = absl::StrCat(dir, "/run", i);
    Result r = RunCli(Train(config, run,
                            {"distribute.devices=[cpu:0,cpu:1]",
                             "distribute.watchdog_seconds=0.001",
                             "train.steps=20", "data.train_examples=160"}),
                      kTimeoutSeconds);
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1)
        << "run " << i << " exit " << r.exit_code << ": " << r.err;
    if (r.exit_code == 1) {
      ++stopped;
      EXPECT_NE(r.err.find("watchdog"), std::string::npos) << r.err;
    }
  }
  RecordProperty("stopped_by_watchdog", stopped);
}

}  // namespace
}  // namespace mirrortrain
