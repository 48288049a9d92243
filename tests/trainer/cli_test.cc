// End-to-end runs of the mirrortrain binary: training, evaluation, inspect,
// bad input, signals and crash-resume.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/trainer/cli_runner.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/saver.h"

namespace mirrortrain {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/mt_cli_" + name;
  fs::remove_all(dir);
  return dir;
}

TEST(CliTest, HelpAndVersion) {
  Result help = RunCli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("mirrortrain train"), std::string::npos);
  EXPECT_NE(help.out.find("MIRRORTRAIN_SWITCHES="), std::string::npos);
  for (const char* verb : {"train", "eval", "inspect"}) {
    Result r = RunCli({verb, "--help"});
    EXPECT_EQ(r.exit_code, 0) << verb;
    EXPECT_NE(r.out.find(absl::StrCat("usage: mirrortrain ", verb)),
              std::string::npos);
  }
  // `help VERB` as `VERB --help`; anything else after --help is an error,
  // not ignored.
  EXPECT_EQ(RunCli({"help", "eval"}).out, RunCli({"eval", "--help"}).out);
  Result stray = RunCli({"--help", "x"});
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_EQ(stray.err,
            "mirrortrain: --help takes one command (train, eval, sample, "
            "predict, inspect or config), got 'x'\n");
  stray = RunCli({"train", "--help", "x"});
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_EQ(stray.err,
            "mirrortrain train: unexpected argument 'x' (see mirrortrain "
            "train --help)\n");
  Result version = RunCli({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("mirrortrain ", 0), 0u) << version.out;
}

// Output that cannot be written (a full disk) fails the command: a script's
// `eval > result.json` must not record success and an empty result.
TEST(CliTest, OutputThatCannotBeWrittenIsAFailure) {
  if (!std::filesystem::exists("/dev/full")) {
    GTEST_SKIP() << "no /dev/full on this machine to stand for a full disk";
  }
  const std::string err =
      absl::StrCat(::testing::TempDir(), "/cli_full_", getpid(), "_err.txt");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--version"}, {"--help"}, {"config", "--schema"}}) {
    SCOPED_TRACE(args[0]);
    EXPECT_EQ(Wait(Start(args, "/dev/full", err)), 1);
    // With errno's reason where the failing write is the last flush.
    const std::string said = ReadFile(err);
    EXPECT_EQ(said.rfind("mirrortrain: standard output: write failed", 0), 0u)
        << said;
    EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
  }
  std::filesystem::remove(err);
}

TEST(CliTest, UsageErrors) {
  Result r = RunCli({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_EQ(RunCli({}).exit_code, 2);
  EXPECT_EQ(RunCli({"train"}).exit_code, 2);
  r = RunCli({"train", "--config", Config(), "--bogus", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown flag '--bogus'"), std::string::npos);
}

// The default run directory is runs/<the config file's name without its
// extension>: a name that would make it runs/ itself or its parent
// ("...yaml" -> runs/.., the working directory) asks for --run_dir, and
// nothing is written.
TEST(CliTest, ConfigNamesThatLeaveRunsAskForARunDir) {
  const std::string dir = FreshDir("dot_names");
  fs::create_directories(dir);
  for (const std::string name : {".yaml", "..yaml", "...yaml"}) {
    SCOPED_TRACE(name);
    const std::string path = absl::StrCat(dir, "/", name);
    fs::copy_file(Config(), path, fs::copy_options::overwrite_existing);
    const auto before = fs::file_time_type::clock::now();
    Result r = RunCli({"train", "--config", path, "--set", "train.steps=1"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(absl::StrCat("mirrortrain train: --config ", path,
                                      ": the file's name gives no run "
                                      "directory name")),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists("runs/../config.yaml") &&
                 fs::last_write_time("runs/../config.yaml") >= before);
  }
}

// `config --json`: the resolved config (defaults and --set applied) as one
// JSON line, typed (numbers, booleans, null), for tools without YAML.
TEST(CliTest, ConfigVerbPrintsTheResolvedConfigAsJson) {
  Result r = RunCli({"config", "--config", Config(), "--set",
                     "data.global_batch_size=48", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["data"]["global_batch_size"], 48);
  EXPECT_EQ(j["model"]["hidden_units"], nlohmann::json::array({256, 128}));
  EXPECT_TRUE(j["data"]["shuffle"].is_boolean()) << r.out;
  EXPECT_TRUE(j["optimizer"]["learning_rate"].is_number()) << r.out;
  EXPECT_TRUE(j["distribute"]["devices"][0].is_string()) << r.out;
  Result both = RunCli({"config", "--schema", "--json"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--json apply to --config"), std::string::npos)
      << both.err;
}

TEST(CliTest, TrainWritesTheRunDirectory) {
  const std::string dir = FreshDir("train");
  Result r = RunCli(SmallTrain(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/config.yaml"));
  EXPECT_NE(ReadFile(dir + "/config.yaml").find("train_examples: 2048"),
            std::string::npos);
  std::vector<std::string> metrics = Lines(ReadFile(dir + "/metrics.jsonl"));
  ASSERT_FALSE(metrics.empty());
  EXPECT_EQ(
      metrics[0].rfind("{\"step\": 8, \"epoch\": 0, \"split\": \"train\", "
                       "\"loss\": ",
                       0),
      0u)
      << metrics[0];
  int test_lines = 0;
  for (const std::string& l : metrics) {
    test_lines += l.find("\"split\": \"test\"") != std::string::npos;
  }
  EXPECT_EQ(test_lines, 4);  // raw and ema after each of 2 epochs.
  bool events = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    events |=
        e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events);
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/ckpt-64.safetensors"));
  // Not a terminal: plain progress lines, with the logged line's loss (the
  // mean since the last logged step) and epoch (epochs completed).
  for (const std::string& line : metrics) {
    const nlohmann::json m = nlohmann::json::parse(line);
    if (m["split"] != "train") continue;
    const std::string progress =
        absl::StrFormat("step %d/64 epoch %d loss %.4f ", m["step"].get<int>(),
                        m["epoch"].get<int>(), m["loss"].get<double>());
    EXPECT_NE(r.err.find(progress), std::string::npos) << progress << "\n"
                                                       << r.err;
  }
  // Where the start-up went.
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"((^|\n)start-up \d+\.\d\d s: devices \d+\.\d\d s, model )"
                 R"(\d+\.\d\d s; test split \d+\.\d\d s and training )"
                 R"(split \d+\.\d\d s loading meanwhile; process launch to )"
                 R"(start-up \d+\.\d\d s\n)")))
      << r.err;
}

// MIRRORTRAIN_SWITCHES (tensor/internal_switches.h): a bad list is a usage
// error naming the variable and every known switch (each in the README),
// before anything is written; a good one is said once and the run trains.
TEST(CliTest, InternalSwitchesComeFromTheEnvironment) {
  // Unset again however the test ends: later tests of this binary run the
  // CLI with this process's environment.
  struct Unset {
    ~Unset() { unsetenv("MIRRORTRAIN_SWITCHES"); }
  } unset;
  const std::string dir = FreshDir("switches");
  ASSERT_EQ(setenv("MIRRORTRAIN_SWITCHES", "bf16_copies=off,bogus=on", 1), 0);
  Result r = RunCli(SmallTrain(dir));
  EXPECT_EQ(r.exit_code, 2);
  const std::string prefix =
      "mirrortrain: MIRRORTRAIN_SWITCHES: unknown switch 'bogus' (known: ";
  ASSERT_EQ(r.err.rfind(prefix, 0), 0u) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_FALSE(fs::exists(dir));
  const std::string known =
      r.err.substr(prefix.size(), r.err.find(')') - prefix.size());
  const std::string readme =
      ReadFile(absl::StrCat(MT_SOURCE_DIR, "/README.md"));
  for (const absl::string_view name : absl::StrSplit(known, ", ")) {
    EXPECT_NE(readme.find(absl::StrCat("`", name, "`")), std::string::npos)
        << name;
  }
  EXPECT_NE(known.find("batched_step_copies"), std::string::npos) << known;

  ASSERT_EQ(setenv("MIRRORTRAIN_SWITCHES", "conv_gpu_direct=off", 1), 0);
  r = RunCli(SmallTrain(dir, {"train.epochs=1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(
      r.err.rfind("mirrortrain: internal switches: conv_gpu_direct=off\n", 0),
      0u)
      << r.err;
  // And at the end how often its path ran: never, with it off (and on a
  // CPU).
  EXPECT_NE(r.err.find("\nmirrortrain: internal switches: conv_gpu_direct: "
                       "0 calls\n"),
            std::string::npos)
      << r.err;
  // A usage error stays the line after the switches', with nothing after.
  r = RunCli(SmallTrain(FreshDir("switches_bad_config"), {"train.epochs=-1"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 2u) << r.err;
}

// ema.evaluate_raw: false evaluates the EMA weights only, the same numbers
// as when the raw weights are evaluated too; without an EMA there would be
// nothing to evaluate, which is a config error naming the key.
// checkpoint.warm_start_from with another optimizer: the run says where
// its weights came from and trains from step 1 (tests/trainer/
// warm_start_test.cc checks the state it starts from).
TEST(CliTest, AWarmStartSaysWhereItsWeightsCameFrom) {
  const std::string source = FreshDir("warm_source");
  Result r = RunCli(SmallTrain(source, {"train.epochs=1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = FreshDir("warm_start");
  r = RunCli(SmallTrain(
      dir, {"train.epochs=1", "optimizer={name: adam, learning_rate: 0.001}",
            "checkpoint.warm_start_from=" + source}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err)
                .find("warm start: the model weights of " + source +
                      "/checkpoints/ckpt-32.safetensors"),
            std::string::npos)
      << r.out << r.err;
  EXPECT_NE(ReadFile(dir + "/metrics.jsonl").find("\"step\": 8,"),
            std::string::npos);
  // The source's averages, for the hidden layer only.
  r = RunCli(
      SmallTrain(FreshDir("warm_start_part"),
                 {"train.epochs=1", "checkpoint.warm_start_from=" + source,
                  "checkpoint.warm_start_weights=ema",
                  "checkpoint.warm_start_vars=dense/.*"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err)
                .find("warm start: the EMA weights of " + source +
                      "/checkpoints/ckpt-32.safetensors for 2 of 4 model "
                      "variables (checkpoint.warm_start_vars)"),
            std::string::npos)
      << r.out << r.err;
}

// configs/fashion_mnist_mlp_finetune.yaml on a short source run of the
// default config's model: a new head on the frozen body, started from the
// source's EMA weights.
TEST(CliTest, TheFineTuningConfigStartsFromTheDefaultRunsBody) {
  const std::string source = FreshDir("finetune_source");
  Result r = RunCli(
      SmallTrain(source, {"model.hidden_units=[256,128]", "train.epochs=1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCli(
      {"train", "--config",
       absl::StrCat(MT_SOURCE_DIR, "/configs/fashion_mnist_mlp_finetune.yaml"),
       "--run_dir", FreshDir("finetune"), "--set", "data.train_examples=512",
       "--set", "data.test_examples=100", "--set",
       "checkpoint.warm_start_from=" + source});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err)
                .find("warm start: the EMA weights of " + source +
                      "/checkpoints/ckpt-32.safetensors for 4 of 6 model "
                      "variables (checkpoint.warm_start_vars)"),
            std::string::npos)
      << r.out << r.err;
}

TEST(CliTest, EvaluateRawFalseEvaluatesTheEmaWeightsOnly) {
  const std::string both = FreshDir("eval_both");
  const std::string ema_only = FreshDir("eval_ema_only");
  ASSERT_EQ(RunCli(SmallTrain(both)).exit_code, 0);
  Result r = RunCli(SmallTrain(ema_only, {"ema.evaluate_raw=false"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto test_lines = [](const std::string& dir, const std::string& weights) {
    std::vector<std::string> out;
    for (const std::string& l : Lines(ReadFile(dir + "/metrics.jsonl"))) {
      if (l.find("\"weights\": \"" + weights + "\"") != std::string::npos) {
        out.push_back(l);
      }
    }
    return out;
  };
  EXPECT_TRUE(test_lines(ema_only, "raw").empty());
  EXPECT_EQ(test_lines(ema_only, "ema").size(), 2u);
  EXPECT_EQ(test_lines(ema_only, "ema"), test_lines(both, "ema"));
  Result bad = RunCli(SmallTrain(FreshDir("eval_nothing"),
                                 {"ema.decay=null", "ema.evaluate_raw=false"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("ema.evaluate_raw: false leaves nothing to evaluate"),
            std::string::npos)
      << bad.err;
}

// The steps of a run's evaluations (its EMA test lines).
std::vector<int64_t> EvaluatedSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const std::string& l : Lines(ReadFile(dir + "/metrics.jsonl"))) {
    if (l.find("\"weights\": \"ema\"") != std::string::npos) {
      steps.push_back(static_cast<int64_t>(JsonNumber(l, "step")));
    }
  }
  return steps;
}

// train.eval_every_steps evaluates at its multiples and at the end, alone
// or beside eval_every_epochs (one evaluation where both fall), under the
// synchronous loop and the parameter servers' coordinator alike.
TEST(CliTest, EvalEveryStepsEvaluatesAtItsMultiples) {
  // SmallTrain: 32 steps an epoch, 64 in all.
  const std::string by_steps = FreshDir("eval_steps");
  Result r = RunCli(SmallTrain(
      by_steps, {"train.eval_every_epochs=0", "train.eval_every_steps=24"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(EvaluatedSteps(by_steps), (std::vector<int64_t>{24, 48, 64}));
  const std::string both = FreshDir("eval_both_ways");
  r = RunCli(SmallTrain(both, {"train.eval_every_steps=16"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(EvaluatedSteps(both), (std::vector<int64_t>{16, 32, 48, 64}));
  const std::string ps = FreshDir("eval_steps_ps");
  r = RunCli(
      SmallTrain(ps, {"train.eval_every_epochs=0", "train.eval_every_steps=20",
                      "distribute.strategy=parameter_server",
                      "distribute.devices=[cpu:0,cpu:1]"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 20 is no multiple of the logging (8) or saving (16) steps, where the
  // coordinator holds the workers anyway.
  EXPECT_EQ(EvaluatedSteps(ps), (std::vector<int64_t>{20, 40, 60, 64}));
}

// A `metrics` entry may be watched by its reported name.
TEST(CliTest, EarlyStoppingWatchesAMetricsEntry) {
  const std::string dir = FreshDir("early_stop_metric");
  Result r = RunCli(SmallTrain(
      dir, {"metrics=[{name: sparse_top_k_categorical_accuracy, k: 3}]",
            "train.eval_every_epochs=0", "train.eval_every_steps=10",
            "train.early_stopping_patience=1",
            "train.early_stopping_monitor=sparse_top_k_categorical_accuracy",
            "train.early_stopping_min_delta=0.9"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("early stopping at step 20: the EMA test "
                       "sparse_top_k_categorical_accuracy has not improved"),
            std::string::npos)
      << r.err;
  // Watched rising (an accuracy, MetricType::maximize): with no margin and
  // patience to spare, the best kept is the highest of the evaluations'.
  const std::string rising = FreshDir("early_stop_rising");
  r = RunCli(SmallTrain(
      rising,
      {"metrics=[{name: sparse_top_k_categorical_accuracy, k: 1}]",
       "train.eval_every_epochs=0", "train.eval_every_steps=5",
       "train.early_stopping_patience=100",
       "train.early_stopping_monitor=sparse_top_k_categorical_accuracy"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double highest = -1;
  int evaluations = 0;
  for (const std::string& l : Lines(ReadFile(rising + "/metrics.jsonl"))) {
    if (l.find("\"weights\": \"ema\"") == std::string::npos) continue;
    highest =
        std::max(highest, JsonNumber(l, "sparse_top_k_categorical_accuracy"));
    ++evaluations;
  }
  ASSERT_GT(evaluations, 2);
  Result inspected = RunCli({"inspect", rising + "/checkpoints"});
  ASSERT_EQ(inspected.exit_code, 0) << inspected.err;
  const size_t at = inspected.out.find("early_stopping_best: ");
  ASSERT_NE(at, std::string::npos) << inspected.out;
  EXPECT_NEAR(std::stod(inspected.out.substr(at + 21)), highest, 1e-6);
  // Not listed: refused, naming what is watched.
  r = RunCli(SmallTrain(
      FreshDir("early_stop_unlisted"),
      {"train.early_stopping_patience=1",
       "train.early_stopping_monitor=sparse_top_k_categorical_accuracy"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("(evaluation reports loss, accuracy)"),
            std::string::npos)
      << r.err;
}

// Early stopping on an accuracy no evaluation can beat by 0.9: the first
// evaluation sets the best, each later one waits. Patience 1 stops after
// the second (step 20, between logged steps: its train window is logged
// after the evaluation) with a checkpoint there; run again it is finished;
// run again with patience 3 it goes on from its saved wait and stops at
// step 40, with the weights of a run that had patience 3 throughout.
TEST(CliTest, EarlyStoppingStopsAndResumesAsKerasCounts) {
  const std::vector<std::string> watch = {
      "train.eval_every_epochs=0", "train.eval_every_steps=10",
      "train.early_stopping_monitor=accuracy",
      "train.early_stopping_min_delta=0.9"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), watch.begin(), watch.end());
    return more;
  };
  const std::string dir = FreshDir("early_stop");
  Result r = RunCli(SmallTrain(dir, with({"train.early_stopping_patience=1"})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("early stopping at step 20: the EMA test accuracy has "
                       "not improved on "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" (step 10) for 1 evaluation "
                       "(train.early_stopping_patience: 1)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(EvaluatedSteps(dir), (std::vector<int64_t>{10, 20}));
  const std::vector<std::string> lines =
      Lines(ReadFile(dir + "/metrics.jsonl"));
  EXPECT_NE(lines.back().find("\"step\": 20, \"epoch\": 0, \"split\": "
                              "\"train\""),
            std::string::npos)
      << lines.back();
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/ckpt-20.safetensors"));
  // Finished: run again, it evaluates step 20 again and trains nothing.
  r = RunCli(SmallTrain(dir, with({"train.early_stopping_patience=1"})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("this run ended by early stopping at step 20: the "
                       "EMA test accuracy has not improved on "),
            std::string::npos)
      << r.err;
  EXPECT_EQ(EvaluatedSteps(dir), (std::vector<int64_t>{10, 20}));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/ckpt-30.safetensors"));
  // More patience: on from the saved wait of 1 to a stop at step 40.
  r = RunCli(SmallTrain(dir, with({"train.early_stopping_patience=3"})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(EvaluatedSteps(dir), (std::vector<int64_t>{10, 20, 30, 40}));
  const std::string straight = FreshDir("early_stop_straight");
  r = RunCli(SmallTrain(straight, with({"train.early_stopping_patience=3"})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(EvaluatedSteps(straight), (std::vector<int64_t>{10, 20, 30, 40}));
  ExpectSameTensors(dir + "/checkpoints/ckpt-40.safetensors",
                    straight + "/checkpoints/ckpt-40.safetensors");
  // The parameter servers' coordinator stops its workers alike.
  const std::string ps = FreshDir("early_stop_ps");
  r = RunCli(SmallTrain(ps, with({"train.early_stopping_patience=1",
                                  "distribute.strategy=parameter_server",
                                  "distribute.devices=[cpu:0,cpu:1]"})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(EvaluatedSteps(ps), (std::vector<int64_t>{10, 20}));
  EXPECT_TRUE(fs::exists(ps + "/checkpoints/ckpt-20.safetensors"));
}

// (With a top-3 accuracy of the config's `metrics`, logged and printed
// beside the loss and accuracy.)
TEST(CliTest, EvalReproducesTheLoggedNumbersExactly) {
  const std::string dir = FreshDir("eval");
  const std::string top3 =
      "metrics=[{name: sparse_top_k_categorical_accuracy, k: 3}]";
  ASSERT_EQ(RunCli(SmallTrain(dir, {"train.epochs=10", top3})).exit_code, 0);
  // The last logged test lines (step 320).
  std::string raw_line, ema_line;
  for (const std::string& l : Lines(ReadFile(dir + "/metrics.jsonl"))) {
    if (l.find("\"weights\": \"raw\"") != std::string::npos) raw_line = l;
    if (l.find("\"weights\": \"ema\"") != std::string::npos) ema_line = l;
  }
  ASSERT_NE(ema_line.find("\"step\": 320"), std::string::npos) << ema_line;
  for (const auto& [weights, line] :
       {std::pair<std::string, std::string>{"ema", ema_line},
        {"raw", raw_line}}) {
    Result r = RunCli({"eval", "--config", Config(), "--checkpoint",
                       dir + "/checkpoints", "--weights", weights, "--set",
                       "data.test_examples=500", "--set",
                       "model.hidden_units=[32]", "--set", top3});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(line.find("\"sparse_top_k_categorical_accuracy\": "),
              std::string::npos)
        << line;
    // "loss": ..., "accuracy": ... as text, from the same formatting.
    const std::string tail = line.substr(line.find("\"loss\""));
    EXPECT_NE(r.out.find(tail), std::string::npos) << weights << "\n"
                                                   << r.out << "\n"
                                                   << line;
    EXPECT_NE(r.out.find("\"step\": 320, \"weights\": \"" + weights +
                         "\", \"examples\": 500"),
              std::string::npos)
        << r.out;
  }
  // EMA weights from a config without EMA: one line, before the restore
  // (whose note on the changed config came first and made it two).
  Result no_ema = RunCli({"eval", "--config", Config(), "--checkpoint",
                          dir + "/checkpoints", "--weights", "ema", "--set",
                          "ema=null", "--set", "model.hidden_units=[32]"});
  EXPECT_EQ(no_ema.exit_code, 2) << no_ema.err;
  EXPECT_EQ(no_ema.err,
            "mirrortrain: --weights: EMA weights requested but the config has "
            "no ema.decay\n");
}

// A safetensors file of weights written elsewhere (here: a run's model
// variables and EMA averages, as a numpy exporter writes them, with no
// metadata, step or slots) evaluates as the checkpoint they came from, at
// step 0; without averages its EMA weights are refused, naming the way out.
TEST(CliTest, EvalScoresAFileOfWeightsAsItsCheckpoint) {
  const std::string dir = FreshDir("eval_weights");
  ASSERT_EQ(RunCli(SmallTrain(dir, {"train.epochs=1"})).exit_code, 0);
  absl::StatusOr<trainer::SafetensorsFile> checkpoint =
      trainer::SafetensorsFile::Open(dir + "/checkpoints/ckpt-32.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::vector<trainer::NamedTensor> weights, averaged;
  for (const std::string& name : checkpoint->names()) {
    if (absl::StrContains(name, "/Momentum") || name == "global_step") continue;
    trainer::NamedTensor t{name, *checkpoint->Get(name)};
    if (!absl::EndsWith(name, "/ExponentialMovingAverage"))
      weights.push_back(t);
    averaged.push_back(std::move(t));
  }
  ASSERT_EQ(weights.size(), 4u);  // Two dense layers.
  const std::string with_ema = dir + "/exported_ema.safetensors";
  const std::string plain = dir + "/exported.safetensors";
  ASSERT_TRUE(trainer::WriteSafetensors(with_ema, averaged, {}).ok());
  ASSERT_TRUE(trainer::WriteSafetensors(plain, weights, {}).ok());
  auto eval = [&](const std::string& checkpoint_path,
                  std::vector<std::string> weights_flag) {
    std::vector<std::string> args = {"eval",
                                     "--config",
                                     Config(),
                                     "--checkpoint",
                                     checkpoint_path,
                                     "--set",
                                     "data.test_examples=500",
                                     "--set",
                                     "model.hidden_units=[32]"};
    args.insert(args.end(), weights_flag.begin(), weights_flag.end());
    return RunCli(args);
  };
  // From "loss" on: the numbers, formatted as eval prints them.
  auto numbers = [](const Result& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find("\"loss\"");
    return at == std::string::npos ? std::string() : r.out.substr(at);
  };
  for (const char* w : {"ema", "raw"}) {
    SCOPED_TRACE(w);
    const std::string ours = numbers(eval(dir, {"--weights", w}));
    ASSERT_FALSE(ours.empty());
    Result exported = eval(with_ema, {"--weights", w});
    EXPECT_EQ(numbers(exported), ours);
    EXPECT_NE(exported.out.find("\"step\": 0, \"weights\": \"" +
                                std::string(w) + "\""),
              std::string::npos)
        << exported.out;
  }
  EXPECT_EQ(numbers(eval(plain, {"--weights", "raw"})),
            numbers(eval(dir, {"--weights", "raw"})));
  // The config has an EMA, so EMA weights are the default.
  Result no_averages = eval(plain, {});
  EXPECT_EQ(no_averages.exit_code, 2);
  EXPECT_EQ(no_averages.err,
            "mirrortrain: " + plain +
                ": a file of weights only, without the EMA averages the EMA "
                "weights need (no '<name>/ExponentialMovingAverage' "
                "entries); use --weights raw\n");
  // Training does not resume from one: it has no run to continue.
  Result resume = RunCli(SmallTrain(FreshDir("eval_weights_resume"),
                                    {"checkpoint.restore=" + plain}));
  EXPECT_EQ(resume.exit_code, 2);
  EXPECT_NE(resume.err.find("metadata 'format' is missing (not a mirrortrain "
                            "training checkpoint; a file of weights starts a "
                            "run through checkpoint.warm_start_from)"),
            std::string::npos)
      << resume.err;
}

// The raw weights of a run trained without an EMA evaluate under a config
// that has one (its shadows are not in the checkpoint, and not needed):
// the numbers the run logged.
TEST(CliTest, RawWeightsEvaluateWithoutTheConfigsEmaShadows) {
  const std::string dir = FreshDir("eval_no_ema");
  ASSERT_EQ(RunCli(SmallTrain(dir, {"ema=null"})).exit_code, 0);
  std::string raw_line;
  for (const std::string& l : Lines(ReadFile(dir + "/metrics.jsonl"))) {
    if (l.find("\"weights\": \"raw\"") != std::string::npos) raw_line = l;
  }
  ASSERT_FALSE(raw_line.empty());
  Result r =
      RunCli({"eval", "--config", Config(), "--checkpoint",
              dir + "/checkpoints", "--weights", "raw", "--set",
              "data.test_examples=500", "--set", "model.hidden_units=[32]"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(raw_line.substr(raw_line.find("\"loss\""))),
            std::string::npos)
      << r.out << "\n"
      << raw_line;
  // The EMA weights are not there to evaluate.
  r = RunCli({"eval", "--config", Config(), "--checkpoint",
              dir + "/checkpoints", "--set", "model.hidden_units=[32]"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("ExponentialMovingAverage' not found in checkpoint"),
            std::string::npos)
      << r.err;
}

// The last logged test line of `weights` (raw or ema), from "loss" on.
std::string LastTestNumbers(const std::string& run_dir,
                            const std::string& weights) {
  std::string last;
  for (const std::string& l : Lines(ReadFile(run_dir + "/metrics.jsonl"))) {
    if (l.find("\"weights\": \"" + weights + "\"") != std::string::npos) {
      last = l.substr(l.find("\"loss\""));
    }
  }
  return last;
}

// Keras's softmax on the last layer (from_logits=False) trains as the
// logits model does: the loss takes the logits before it, so every logged
// number is the same, the train losses of every window included.
TEST(CliTest, ASoftmaxLastLayerTrainsAsTheLogitsModel) {
  const std::string layers =
      "model={layers: [{type: flatten}, {type: dense, units: 32, activation: "
      "relu}, {type: dense, units: 10";
  const std::string logits_dir = FreshDir("logits"),
                    softmax_dir = FreshDir("softmax");
  ASSERT_EQ(RunCli(SmallTrain(logits_dir, {layers + "}]}"})).exit_code, 0);
  Result r =
      RunCli(SmallTrain(softmax_dir, {layers + ", activation: softmax}]}"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto numbers = [](const std::string& dir) {
    std::vector<std::string> out;
    for (const std::string& l : Lines(ReadFile(dir + "/metrics.jsonl"))) {
      out.push_back(l.substr(0, l.find("\"samples_per_sec\"")));
    }
    return out;
  };
  const std::vector<std::string> logged = numbers(logits_dir);
  EXPECT_GT(logged.size(), 10u);
  EXPECT_EQ(numbers(softmax_dir), logged);
  EXPECT_FALSE(LastTestNumbers(softmax_dir, "ema").empty());
}

// `eval` of the raw weights of a SmallTrain run in `run_dir` (its 500 test
// images) with one more --set; its JSON line.
std::string EvalSmallRun(const std::string& run_dir, const std::string& set) {
  Result e = RunCli({"eval", "--config", Config(), "--checkpoint",
                     run_dir + "/checkpoints", "--weights", "raw", "--set",
                     "data.test_examples=500", "--set",
                     "model.hidden_units=[32]", "--set", set});
  EXPECT_EQ(e.exit_code, 0) << e.err;
  return e.out;
}

// precision: bf16 (emulated on CPUs) trains, to numbers of its own, and
// eval applies the same policy: it reproduces the logged numbers only with
// it.
TEST(CliTest, Bf16TrainsAndEvalAppliesTheSamePolicy) {
  const std::string fp32_dir = FreshDir("fp32"), bf16_dir = FreshDir("bf16");
  ASSERT_EQ(RunCli(SmallTrain(fp32_dir)).exit_code, 0);
  Result r = RunCli(SmallTrain(bf16_dir, {"precision=bf16"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string fp32 = LastTestNumbers(fp32_dir, "raw");
  const std::string bf16 = LastTestNumbers(bf16_dir, "raw");
  ASSERT_FALSE(bf16.empty());
  EXPECT_NE(bf16, fp32) << "bf16 computed the fp32 numbers";
  // It learns (chance is 0.1). Parity with fp32 is for full runs (README):
  // after 64 steps on 500 test images seeds alone move the accuracy by up to
  // 8 points, and bf16 moved it by 0.2-3 points for the same seed.
  EXPECT_GT(JsonNumber(fp32, "accuracy"), 0.6) << fp32;
  EXPECT_GT(JsonNumber(bf16, "accuracy"), 0.6) << bf16;
  EXPECT_NE(EvalSmallRun(bf16_dir, "precision=bf16").find(bf16),
            std::string::npos)
      << bf16;
  EXPECT_EQ(EvalSmallRun(bf16_dir, "precision=fp32").find(bf16),
            std::string::npos);
}

// loss.label_smoothing trains (to numbers of its own) and both splits log
// the smoothed objective: eval reproduces the logged test numbers only
// with it, and without it gives a lower loss at the same accuracy.
TEST(CliTest, LabelSmoothingIsTheLoggedObjectiveOfBothSplits) {
  const std::string plain_dir = FreshDir("plain"), ls_dir = FreshDir("ls");
  ASSERT_EQ(RunCli(SmallTrain(plain_dir)).exit_code, 0);
  Result r = RunCli(SmallTrain(ls_dir, {"loss.label_smoothing=0.2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string plain = LastTestNumbers(plain_dir, "raw");
  const std::string smoothed = LastTestNumbers(ls_dir, "raw");
  ASSERT_FALSE(smoothed.empty());
  EXPECT_NE(smoothed, plain) << "label smoothing trained the plain numbers";
  EXPECT_GT(JsonNumber(smoothed, "accuracy"), 0.6) << smoothed;
  EXPECT_NE(EvalSmallRun(ls_dir, "loss.label_smoothing=0.2").find(smoothed),
            std::string::npos)
      << smoothed;
  const std::string unsmoothed = EvalSmallRun(ls_dir, "loss.label_smoothing=0");
  EXPECT_EQ(unsmoothed.find(smoothed), std::string::npos);
  EXPECT_LT(JsonNumber(unsmoothed, "loss"), JsonNumber(smoothed, "loss"));
  EXPECT_EQ(JsonNumber(unsmoothed, "accuracy"),
            JsonNumber(smoothed, "accuracy"));
}

TEST(CliTest, InspectListsTensorsAndMetadata) {
  const std::string dir = FreshDir("inspect");
  ASSERT_EQ(RunCli(SmallTrain(dir, {"train.epochs=1"})).exit_code, 0);
  const std::string file = dir + "/checkpoints/ckpt-32.safetensors";
  Result r = RunCli({"inspect", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want :
       {"dense/kernel", "F32  [784,32]", "dense/kernel/Momentum",
        "dense_1/bias/ExponentialMovingAverage", "global_step", "I64  []",
        "step: 32", "input_epoch: 1", "config_hash: "}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  // The run directory and its checkpoints folder mean the latest, as for
  // eval: the same listing.
  for (const std::string& folder : {dir, dir + "/checkpoints"}) {
    Result latest = RunCli({"inspect", folder});
    EXPECT_EQ(latest.exit_code, 0) << latest.err;
    EXPECT_EQ(latest.out, r.out) << folder;
  }
}

struct BadConfigCase {
  std::string yaml;  // Empty: use the override instead.
  std::string set;
  std::string expected;  // Substring of the one-line error.
};

TEST(CliTest, BadConfigsExit2WithOneLineNamingFileAndKey) {
  const std::string dir = FreshDir("badcfg");
  fs::create_directories(dir);
  const std::vector<BadConfigCase> cases = {
      {"optimizer:\n  learning_rat: 0.1\n", "",
       "bad.yaml:2: optimizer.learning_rat: unknown key for optimizer "
       "momentum"},
      {"checkpoint:\n  restore: ''\n", "",
       "bad.yaml:2: checkpoint.restore: expected latest, none, or a checkpoint "
       "path, got ''"},
      {"data:\n  global_batch_size: many\n", "",
       "bad.yaml:2: data.global_batch_size: expected an integer >= 1, got "
       "many"},
      {"optimizer: {learning_rate: -2}\n", "",
       "bad.yaml:1: optimizer.learning_rate: expected a number > 0, or null, "
       "got "
       "-2"},
      {"model: {name: resnet}\n", "",
       "bad.yaml:1: model.name: unknown value 'resnet'"},
      {"optimizer: {name: lamb}\n", "",
       "bad.yaml:1: optimizer.name: unknown value 'lamb'"},
      {"optimizer: {name: adam, momentum: 0.9}\n", "",
       "bad.yaml:1: optimizer.momentum: unknown key for optimizer adam"},
      {"distribute: {devices: [gpu:7]}\n", "",
       "bad.yaml:1: distribute.devices: "},
      {"data: [1, 2\n", "", "bad.yaml:2: malformed YAML"},
      {"model:\n  layers:\n    - {type: dense, units: 0}\n", "",
       "bad.yaml:3: model.layers[0].units: expected an integer in [1, "
       "2147483647], got 0"},
      {"model:\n  layers:\n    - {type: flatten}\n    - {type: dense}\n", "",
       "model.layers[1].units: required"},
      // YAML's types: quoted is a string, a plain true is no name.
      {"seed: '1'\n", "",
       "bad.yaml:1: seed: expected an integer >= 0, got '1' (quoted: a "
       "string)"},
      {"model:\n  layers:\n    - {type: flatten, name: true}\n", "",
       "bad.yaml:3: model.layers[0].name: expected a string, or null, got "
       "true"},
      {"model:\n  layers:\n    - {type: conv3d}\n", "",
       "bad.yaml:3: model.layers[0].type: unknown value 'conv3d'"},
      {"model:\n  layers:\n    - {type: dense, units: 10}\n", "",
       "model: the last layer gives [28,28,10] per example but the data has "
       "10 classes (flatten or pool the features before a last dense layer "
       "of 10 units)"},
      {"model:\n  layers:\n    - {type: flatten}\n    - {type: dense, "
       "units: 7}\n",
       "", "the data has 10 classes"},
      {"train: {early_stopping_patience: 2, eval_every_epochs: 0}\n", "",
       "bad.yaml:1: train.early_stopping_patience: set, but no evaluation is "
       "scheduled to watch (set train.eval_every_epochs or "
       "train.eval_every_steps)"},
      {"train: {early_stopping_monitor: accuracy}\n", "",
       "bad.yaml:1: train.early_stopping_monitor: set without "
       "train.early_stopping_patience, which it qualifies"},
      {"loss: {label_smoothing: 1.5}\n", "",
       "bad.yaml:1: loss.label_smoothing: expected a number in [0, 1], got "
       "1.5"},
      {"loss: {smoothing: 0.1}\n", "",
       "bad.yaml:1: loss.smoothing: unknown key"},
      {"seed: 1\n", "optimizer.lr=3",
       "--set optimizer.lr=3: optimizer.lr: unknown key"},
      {"seed: 1\n", "train.epochs=zero",
       "--set train.epochs=zero: train.epochs: expected an integer >= 1, or "
       "null, got zero"},
      {"seed: 1\n", "model.layers[0].units=3",
       "--set model.layers[0].units=3: model.layers[0]: no such list "
       "entry (the list has 0)"},
  };
  for (const BadConfigCase& c : cases) {
    const std::string path = dir + "/bad.yaml";
    std::ofstream(path) << c.yaml;
    std::vector<std::string> args = {"train", "--config", path, "--run_dir",
                                     dir + "/run"};
    if (!c.set.empty()) {
      args.push_back("--set");
      args.push_back(c.set);
    }
    Result r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << c.expected << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos)
        << "want: " << c.expected << "\ngot: " << r.err;
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(fs::exists(dir + "/run"))
        << "nothing written for " << c.expected;
  }
  Result missing = RunCli({"train", "--config", dir + "/nope.yaml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(
      missing.err.find("nope.yaml: cannot open: No such file or directory"),
      std::string::npos);
}

TEST(CliTest, MissingDatasetSaysHowToInstallIt) {
  const std::string dir = FreshDir("nodata");
  Result r = RunCli(SmallTrain(dir, {"data.dir=/nonexistent/fmnist"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("apt-get install dataset-fashion-mnist"),
            std::string::npos)
      << r.err;
}

TEST(CliTest, NonFiniteLossExits1NamingTheStep) {
  const std::string dir = FreshDir("nan");
  Result r = RunCli(SmallTrain(
      dir, {"optimizer={name: sgd, learning_rate: 1e12}", "ema.decay=null"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("non-finite loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at step "), std::string::npos) << r.err;
}

// clip_global_norm keeps the norm on the device and checks it after the
// step, where the loss is read; a non-finite one ends the run, naming the
// step, and no checkpoint of the broken state is written.
TEST(CliTest, NonFiniteGlobalNormExits1NamingTheStep) {
  const std::string dir = FreshDir("nan_norm");
  Result r = RunCli(SmallTrain(
      dir, {"optimizer={name: sgd, learning_rate: 1e38, clip_global_norm: 1}",
            "ema.decay=null"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("non-finite gradient global norm (nan) at step 2"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(
      std::filesystem::exists(dir + "/checkpoints/ckpt-2.safetensors"));
}

TEST(CliTest, BadCheckpointsExit2AndChangeNothing) {
  const std::string dir = FreshDir("badckpt");
  ASSERT_EQ(RunCli(SmallTrain(dir, {"train.epochs=1"})).exit_code, 0);
  const std::string good = dir + "/checkpoints/ckpt-32.safetensors";
  const std::string bytes = ReadFile(good);
  auto eval = [&](const std::string& path, std::vector<std::string> sets) {
    std::vector<std::string> args = {"eval", "--config", Config(),
                                     "--checkpoint", path};
    for (auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    return RunCli(args);
  };
  // Truncated file.
  const std::string truncated = dir + "/truncated.safetensors";
  std::ofstream(truncated, std::ios::binary)
      << bytes.substr(0, bytes.size() / 2);
  Result r = eval(truncated, {"model.hidden_units=[32]"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(truncated), std::string::npos) << r.err;
  // Header that is not JSON.
  std::string garbled = bytes;
  garbled[8] = '#';
  const std::string not_json = dir + "/notjson.safetensors";
  std::ofstream(not_json, std::ios::binary) << garbled;
  r = eval(not_json, {"model.hidden_units=[32]"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("JSON"), std::string::npos) << r.err;
  // Shape mismatch against the model.
  r = eval(good, {"model.hidden_units=[64]"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("[784,32] in the checkpoint but [784,64]"),
            std::string::npos)
      << r.err;
  // A run directory means its latest checkpoint, as its checkpoints
  // folder does.
  r = eval(dir, {"model.hidden_units=[32]"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"checkpoint\": \"" + good + "\""), std::string::npos)
      << r.out;
  // A directory without checkpoints: here a run directory whose checkpoints
  // folder has none, which is named.
  const std::string empty_run = dir + "/empty_run";
  fs::create_directories(empty_run + "/checkpoints");
  r = eval(empty_run, {"model.hidden_units=[32]"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(empty_run + "/checkpoints: no checkpoint found (no "
                                   "'checkpoint' index file)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(ReadFile(good), bytes);
  // Training that must restore a bad checkpoint fails before writing: the
  // run directory is untouched.
  const std::string config_before = ReadFile(dir + "/config.yaml");
  const std::string metrics_before = ReadFile(dir + "/metrics.jsonl");
  r = RunCli(
      SmallTrain(dir, {"checkpoint.restore=" + truncated, "train.epochs=3"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(ReadFile(good), bytes);
  EXPECT_EQ(ReadFile(dir + "/config.yaml"), config_before);
  EXPECT_EQ(ReadFile(dir + "/metrics.jsonl"), metrics_before);
}

// A run that cannot write its config.yaml (here a directory is in the way)
// fails having written nothing: its lock file is gone again.
TEST(CliTest, AConfigThatCannotBeWrittenLeavesNoLockFile) {
  const std::string parent = FreshDir("unwritable_config");
  const std::string dir = parent + "/run";
  fs::create_directories(dir + "/config.yaml");
  Result r = RunCli(SmallTrain(dir, {"train.steps=1"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;  // EISDIR at the rename: an I/O error.
  EXPECT_NE(r.err.find(dir + "/config.yaml"), std::string::npos) << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"config.yaml"});
}

TEST(CliTest, SigintCheckpointsAndExits130) {
  const std::string dir = FreshDir("sigint");
  const std::string tmp = ::testing::TempDir();
  pid_t pid =
      Start(SmallTrain(dir, {"train.epochs=200", "checkpoint.every_steps=0"}),
            tmp + "/sigint_out", tmp + "/sigint_err");
  // Wait until training runs (a metrics line exists), then interrupt.
  for (int i = 0; i < 600 && ReadFile(dir + "/metrics.jsonl").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGINT);
  EXPECT_EQ(Wait(pid), 130) << ReadFile(tmp + "/sigint_err");
  EXPECT_NE(
      ReadFile(dir + "/checkpoints/checkpoint").find("model_checkpoint_path"),
      std::string::npos);
}

// Resumed right after an epoch's short last batch and again in the middle
// of the next epoch, with augmentation and dropout drawing per example:
// the state of one uninterrupted run, bit for bit.
TEST(CliTest, ResumesAroundAShortLastBatchEqualOneRun) {
  // 2000 examples in batches of 64: 31 full batches and one of 16.
  const std::vector<std::string> job = {
      "data.train_examples=2000", "model.dropout=0.25",
      "data.augment={random_crop_padding: 2, horizontal_flip: true, "
      "random_erasing: 0.5}",
      "train.eval_every_epochs=0", "checkpoint.every_steps=0"};
  auto steps = [&job](int n) {
    std::vector<std::string> j = job;
    j.push_back("train.steps=" + std::to_string(n));
    return j;
  };
  const std::string ref = FreshDir("short_ref");
  ASSERT_EQ(RunCli(SmallTrain(ref, steps(45))).exit_code, 0);
  const std::string dir = FreshDir("short_resumed");
  for (int n : {32, 40, 45}) {
    Result r = RunCli(SmallTrain(dir, steps(n)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ExpectSameTensors(ref + "/checkpoints/ckpt-45.safetensors",
                    dir + "/checkpoints/ckpt-45.safetensors");
}

// SIGKILL at arbitrary moments (with a checkpoint every step, many land
// inside a checkpoint write), resume each time: the final checkpoint equals
// an uninterrupted run's, bit for bit.
TEST(CliTest, SigkillAnywhereThenResumeEqualsUninterruptedRun) {
  const std::vector<std::string> job = {
      "train.epochs=3", "checkpoint.every_steps=1", "model.dropout=0.25",
      "train.eval_every_epochs=0"};
  const std::string ref = FreshDir("kill_ref");
  ASSERT_EQ(RunCli(SmallTrain(ref, job)).exit_code, 0);

  const std::string dir = FreshDir("kill");
  const std::string tmp = ::testing::TempDir();
  const std::string index = dir + "/checkpoints/checkpoint";
  int kills = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string before = ReadFile(index);
    pid_t pid =
        Start(SmallTrain(dir, job), tmp + "/kill_out", tmp + "/kill_err");
    // Once this run has made progress (a new checkpoint), kill it a few
    // milliseconds later: with a checkpoint per step, often mid-write.
    for (int i = 0; i < 2000 && ReadFile(index) == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * attempt));
    kill(pid, SIGKILL);
    const int code = Wait(pid);
    if (code == 0) break;  // Finished before the kill.
    ASSERT_EQ(code, 128 + SIGKILL) << ReadFile(tmp + "/kill_err");
    ++kills;
    // Whatever moment it died at, the latest checkpoint is complete.
    auto latest = trainer::LatestCheckpoint(dir + "/checkpoints");
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_TRUE(trainer::SafetensorsFile::Open(*latest).ok()) << *latest;
  }
  EXPECT_GE(kills, 1);
  Result last = RunCli(SmallTrain(dir, job));
  ASSERT_EQ(last.exit_code, 0) << last.err;
  ExpectSameTensors(ref + "/checkpoints/ckpt-96.safetensors",
                    dir + "/checkpoints/ckpt-96.safetensors");
  // And the same metrics: what a killed run logged after its checkpoint is
  // dropped and logged again, and the first line after a resume averages
  // the steps since the last logged one, those before the kill included
  // (the checkpoint keeps their losses). Timing aside.
  auto untimed = [](const std::string& run) {
    std::vector<std::string> out;
    for (const std::string& line : Lines(ReadFile(run + "/metrics.jsonl"))) {
      out.push_back(line.substr(0, line.find(", \"samples_per_sec\"")));
    }
    return out;
  };
  EXPECT_EQ(untimed(dir), untimed(ref));
}

}  // namespace
}  // namespace mirrortrain
