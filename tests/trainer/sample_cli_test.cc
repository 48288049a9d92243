// End-to-end runs of a small causal transformer on text: training, `eval`,
// `mirrortrain sample`, and the config errors of sequence models (exit 2,
// one line naming the config path).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/cli_runner.h"

namespace mirrortrain {
namespace {

using ::testing::HasSubstr;

// Digits 0-8 in order, over and over: the next byte is a function of the
// last. (9 digits: the 8-byte windows start at every phase.)
constexpr char kTinyGpt[] = R"(
  sequence_length: 8
  validation_fraction: 0.2
  global_batch_size: 16
model:
  layers:
    - {type: embedding, input_dim: 256, output_dim: 16}
    - {type: position_embedding, sequence_length: 8}
    - type: residual
      layers:
        - {type: layer_normalization}
        - {type: multi_head_attention, num_heads: 2, causal: true}
    - type: residual
      layers:
        - {type: layer_normalization}
        - {type: dense, units: 32, activation: gelu}
        - {type: dense, units: 16}
    - {type: layer_normalization}
    - {type: dense, units: 256}
optimizer: {name: adamw, learning_rate: 0.01,
            exclude_from_weight_decay: [bias, layer_normalization]}
ema: {decay: 0.9}
distribute: {devices: [cpu:0, cpu:1]}
train: {steps: 200, log_every_steps: 50}
checkpoint: {every_steps: 0}
)";

// A job on `text` (written to dir/digits.txt) with the tiny transformer.
std::string WriteGptJob(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 450; ++i) text += "012345678";
  testing::WriteBytes(dir + "/digits.txt", text);
  const std::string path = dir + "/gpt.yaml";
  testing::WriteBytes(
      path, absl::StrCat("seed: 4\ndata:\n  name: text\n  path: ", dir,
                         "/digits.txt", kTinyGpt));
  return path;
}

TEST(SampleCliTest, TrainsATransformerAndContinuesAPrompt) {
  const std::string dir = testing::FreshTestDir("sample_cli");
  const std::string config = WriteGptJob(dir);
  Result train =
      RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  Result eval = RunCli({"eval", "--config", config, "--checkpoint",
                        dir + "/run/checkpoints", "--weights", "raw"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_THAT(eval.out, HasSubstr("\"bits_per_byte\": "));
  const std::vector<std::string> sample = {
      "sample",    "--config", config, "--checkpoint", dir + "/run/checkpoints",
      "--weights", "raw"};
  auto args_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = sample;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  auto with = [&](std::vector<std::string> extra) {
    return RunCli(args_with(std::move(extra)));
  };
  // Greedy: the digits continue in order, past the 8-byte window.
  Result greedy = with({"--prompt", "2345", "--length", "12"});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_EQ(greedy.out, "2345678012345678\n");
  // Temperature draws: the prompt plus 20 bytes, repeatable by seed.
  Result a = with({"--prompt", "01", "--length", "20", "--temperature", "1.5",
                   "--seed", "7"});
  Result b = with({"--prompt", "01", "--length", "20", "--temperature", "1.5",
                   "--seed", "7"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out.size(), 2u + 20u + 1u);
  EXPECT_EQ(a.out, b.out);
  // The EMA weights (the config's default) sample too.
  Result ema = RunCli({"sample", "--config", config, "--checkpoint",
                       dir + "/run/checkpoints", "--length", "3"});
  ASSERT_EQ(ema.exit_code, 0) << ema.err;
  // An empty prompt: a newline starts the model off, unprinted.
  EXPECT_EQ(ema.out.size(), 3u + 1u);
  // Bad flags.
  ExpectExit2(args_with({"--length", "x"}),
              "mirrortrain sample: --length: expected an integer, got 'x'");
  ExpectExit2(args_with({"--seed", "-1"}),
              "--seed: expected an integer >= 0, got '-1'");
  // Usage errors, said before the checkpoint is read, with the pointer to
  // the verb's help.
  for (const char* t : {"-1", "inf", "nan"}) {
    ExpectExit2(args_with({"--temperature", t}),
                "mirrortrain sample: --temperature: must be a finite number "
                ">= 0 (see mirrortrain sample --help)");
  }
  ExpectExit2(args_with({"--seed", "3"}),
              "mirrortrain sample: --seed: greedy decoding (--temperature 0) "
              "draws nothing; give --temperature T > 0 to sample");
  ExpectExit2(args_with({"--seed", "3", "--temperature", "0"}),
              "--seed: greedy decoding");
  ExpectExit2(args_with({"--length", "-3"}),
              "mirrortrain sample: --length: must be >= 0 (see mirrortrain "
              "sample --help)");
  ExpectExit2({"sample", "--config", config, "--checkpoint",
               dir + "/run/checkpoints", "--weights", "best"},
              "mirrortrain sample: --weights: expected raw or ema, got 'best' "
              "(see mirrortrain sample --help)");
  ExpectExit2(args_with({"--length", ""}),
              "flag '--length' needs a value, got an empty one");
  ExpectExit2({"sample", "--config", config},
              "--config FILE and --checkpoint PATH_OR_DIR are required");
  // Bytes are printed as they are drawn: a long sample shows its start at
  // once (and a reader that quits could stop it).
  const std::string streamed = dir + "/streamed.txt";
  const pid_t pid =
      Start(args_with({"--prompt", "2345", "--length", "100000000"}), streamed,
            dir + "/streamed_err.txt");
  for (int i = 0; i < 3000 && testing::ReadFile(streamed).size() < 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  Wait(pid);
  EXPECT_EQ(testing::ReadFile(streamed).substr(0, 12), "234567801234");
  // Sampling reads no example: it works with the text gone (a checkpoint
  // taken elsewhere); evaluation needs the text and names it.
  std::error_code moved;
  std::filesystem::rename(dir + "/digits.txt", dir + "/moved.txt", moved);
  ASSERT_FALSE(moved) << moved.message();
  Result without_text = with({"--prompt", "2345", "--length", "12"});
  ASSERT_EQ(without_text.exit_code, 0) << without_text.err;
  EXPECT_EQ(without_text.out, greedy.out);
  Result eval_without_text =
      RunCli({"eval", "--config", config, "--checkpoint",
              dir + "/run/checkpoints", "--weights", "raw"});
  EXPECT_EQ(eval_without_text.exit_code, 2) << eval_without_text.err;
  EXPECT_THAT(eval_without_text.err, HasSubstr(dir + "/digits.txt"));
}

TEST(SampleCliTest, SampleNeedsAByteLevelModel) {
  const std::string dir = testing::FreshTestDir("sample_cli");
  const std::string config = dir + "/mlp.yaml";
  testing::WriteBytes(config, R"(data: {name: synthetic, train_examples: 64,
       test_examples: 16, global_batch_size: 32}
model: {name: mlp, hidden_units: [8]}
train: {steps: 1}
)");
  Result train =
      RunCli({"train", "--config", config, "--run_dir", dir + "/run"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  ExpectExit2({"sample", "--config", config, "--checkpoint",
               dir + "/run/checkpoints", "--weights", "raw"},
              "sample needs a byte-level model");
}

TEST(SampleCliTest, SequenceModelsThatDoNotFitTheDataExit2) {
  const std::string dir = testing::FreshTestDir("sample_cli");
  const std::string config = WriteGptJob(dir);
  auto train = [&](const std::string& set) {
    return std::vector<std::string>{
        "train", "--config", config, "--run_dir", dir + "/run", "--set", set};
  };
  // A vocabulary that cannot hold every byte value.
  ExpectExit2(train("model.layers[0].input_dim=100"),
              "model.layers[0] (embedding): input_dim: 100 is smaller than "
              "the data's 256 token ids");
  // Windows longer than the position table.
  ExpectExit2(train("model.layers[1].sequence_length=4"),
              "model.layers[1] (position_embedding): sequence_length: 4 is "
              "shorter than the input's 8 positions");
  // Heads that do not divide the width.
  ExpectExit2(train("model.layers[2].layers[1].num_heads=3"),
              "model.layers[2].layers[1] (multi_head_attention): num_heads: 3 "
              "does not divide the input width 16");
  // Nothing was written for any of them.
  EXPECT_FALSE(std::filesystem::exists(dir + "/run"));
}

}  // namespace
}  // namespace mirrortrain
