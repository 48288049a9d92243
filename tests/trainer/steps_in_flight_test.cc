// The training loop's pending steps (Trainer::PendStep / FinishStep): on
// GPUs a step runs while the host prepares the next, and the older step is
// finished (loss read, checks, logging) after the newer one is enqueued. On
// CPUs every step is finished before the next unless a test asks for more
// in flight; these tests do, so the loop's bookkeeping is checked where it
// can run: what it logs, saves and reports must be what a loop that
// finishes every step at once logs, saves and reports.
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/data/npz_writer.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

struct TrainedRun {
  absl::Status status;
  int64_t global_step = 0;
  std::string run_dir;
};

// Synthetic data and an mlp on two CPU replicas, unless `overrides` (applied
// after these) say otherwise.
TrainedRun TrainWith(size_t in_flight, const std::string& name,
                     std::vector<std::string> overrides) {
  overrides.insert(
      overrides.begin(),
      {"data.name=synthetic", "data.test_examples=64",
       "data.global_batch_size=16", "model.name=mlp", "model.hidden_units=[16]",
       "distribute.strategy=mirrored", "distribute.devices=[cpu:0,cpu:1]"});
  TrainedRun run;
  run.run_dir = testing::FreshTestDir(name);
  absl::StatusOr<Config> config =
      ParseConfig("", "steps_in_flight_test.yaml", overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return run;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(*config, run.run_dir, /*need_train_data=*/true);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return run;
  (*trainer)->set_min_steps_in_flight_for_testing(in_flight);
  run.status = (*trainer)->Train();
  run.global_step = (*trainer)->global_step();
  return run;
}

// metrics.jsonl without its timings (samples/s), which differ run to run.
std::vector<std::string> MetricsWithoutTimings(const std::string& run_dir) {
  const std::regex timing(", \"(samples|tokens)_per_sec\": [^,}]*");
  std::vector<std::string> lines;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(run_dir + "/metrics.jsonl"), '\n',
                      absl::SkipEmpty())) {
    lines.push_back(std::regex_replace(std::string(line), timing, ""));
  }
  return lines;
}

TEST(StepsInFlightTest, PendingStepsLogSaveAndEvaluateAsFinishedOnes) {
  // 64 examples / 16: 4 steps an epoch; logs every 3, saves every 5,
  // evaluates every epoch: boundaries on and off the pending window.
  const std::vector<std::string> job = {
      "data.train_examples=64",   "train.epochs=4",
      "train.log_every_steps=3",  "train.eval_every_epochs=1",
      "checkpoint.every_steps=5", "checkpoint.max_to_keep=10"};
  const TrainedRun one = TrainWith(1, "one", job);
  const TrainedRun two = TrainWith(2, "two", job);
  ASSERT_TRUE(one.status.ok()) << one.status;
  ASSERT_TRUE(two.status.ok()) << two.status;
  EXPECT_EQ(two.global_step, 16);
  const std::vector<std::string> metrics = MetricsWithoutTimings(one.run_dir);
  ASSERT_FALSE(metrics.empty());
  EXPECT_EQ(MetricsWithoutTimings(two.run_dir), metrics);
  const std::vector<std::string> saved =
      testing::SortedDirEntries(one.run_dir + "/checkpoints");
  EXPECT_EQ(saved,
            (std::vector<std::string>{
                "checkpoint", "ckpt-10.safetensors", "ckpt-15.safetensors",
                "ckpt-16.safetensors", "ckpt-5.safetensors"}));
  EXPECT_EQ(testing::SortedDirEntries(two.run_dir + "/checkpoints"), saved);
  for (const std::string& file : saved) {
    EXPECT_EQ(testing::ReadFile(two.run_dir + "/checkpoints/" + file),
              testing::ReadFile(one.run_dir + "/checkpoints/" + file))
        << file;
  }
}

// The step after a non-finite one is already enqueued when it is found: the
// error names the broken step, and neither step's state is saved.
TEST(StepsInFlightTest, ANonFiniteStepIsReportedByItsNumberAndNotSaved) {
  const std::vector<std::string> job = {
      "train.steps=6", "checkpoint.every_steps=3",
      "optimizer={name: sgd, learning_rate: 1e38, clip_global_norm: 1}"};
  const TrainedRun one = TrainWith(1, "one", job);
  const TrainedRun two = TrainWith(2, "two", job);
  ASSERT_FALSE(one.status.ok());
  EXPECT_EQ(two.status, one.status);
  EXPECT_NE(one.status.message().find(
                "non-finite gradient global norm (nan) at step 2"),
            std::string::npos)
      << one.status;
  EXPECT_EQ(one.global_step, 2);
  EXPECT_EQ(two.global_step, 3);
  EXPECT_FALSE(std::filesystem::exists(two.run_dir + "/checkpoints"));
}

// Token ids that the embedding has no row for (a NumPy input, not checked
// against a vocabulary when loaded): with steps in flight the ids are
// checked where the step runs and read back with the loss, and the run
// still ends at that step, naming the replica, the index and its position.
TEST(StepsInFlightTest, ABadTokenIdEndsTheRunAtItsStep) {
  const std::string dir = testing::FreshTestDir("ids");
  // 32 rows of 4 ids in [0, 8), but row 21's third id is 9. Batches of 16,
  // not shuffled: step 2 holds rows 16..31, replica 0 rows 16..23, so the
  // bad id is at position 5 * 4 + 2 of replica 0's ids.
  testing::WriteBytes(dir + "/ids.npz", testing::TokenIdsNpzBytes(32, 21));
  const std::vector<std::string> job = {
      "data={name: npz, path: " + dir + "/ids.npz, shuffle: false}",
      "data.global_batch_size=16",
      "model={layers: [{type: embedding, input_dim: 8, output_dim: 3}, "
      "{type: flatten}, {type: dense, units: 10}]}",
      "train.steps=4",
      "train.eval_every_epochs=0",
      "checkpoint.every_steps=0"};
  const TrainedRun one = TrainWith(1, "one", job);
  const TrainedRun two = TrainWith(2, "two", job);
  const std::string what =
      "Gather: index 9 at position 22 is out of range [0, 8)";
  EXPECT_EQ(one.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(one.status.message().find(what), std::string::npos) << one.status;
  EXPECT_EQ(one.status.message().substr(0, 19), "step 2: replica 0: ")
      << one.status;
  EXPECT_EQ(two.status.code(), absl::StatusCode::kInvalidArgument);
  // The immediate check's message, without the inputs it lists after.
  const std::string later(two.status.message());
  EXPECT_EQ(later.substr(later.size() - what.size()), what) << later;
  EXPECT_NE(later.find(": token ids (input_dim 8): Gather"), std::string::npos)
      << later;
  EXPECT_EQ(one.status.message().substr(0, later.size()), later) << one.status;
  // Step 3 was already enqueued; the run ended there, not at step 4.
  EXPECT_EQ(two.global_step, 3);
  EXPECT_FALSE(std::filesystem::exists(two.run_dir + "/checkpoints"));
}

}  // namespace
}  // namespace mirrortrain::trainer
