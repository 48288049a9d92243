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
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/distribute/thread_process_group.h"
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
// after these) say otherwise; one process of `processes` when given (the
// processes share `run_dir` when given; only the chief writes there).
TrainedRun TrainWith(size_t in_flight, const std::string& name,
                     std::vector<std::string> overrides,
                     distribute::ProcessGroup* processes = nullptr,
                     const std::string& run_dir = "") {
  overrides.insert(
      overrides.begin(),
      {"data.name=synthetic", "data.test_examples=64",
       "data.global_batch_size=16", "model.name=mlp", "model.hidden_units=[16]",
       "distribute.strategy=mirrored", "distribute.devices=[cpu:0,cpu:1]"});
  TrainedRun run;
  run.run_dir = run_dir.empty() ? testing::FreshTestDir(name) : run_dir;
  absl::StatusOr<Config> config =
      ParseConfig("", "steps_in_flight_test.yaml", overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return run;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      *config, run.run_dir, DataNeeds::kTrainAndTest, processes);
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

// 4 steps of batches of 16 (unshuffled) of 32 rows of 4 token ids in
// [0, 8) written to `dir`, but row `bad_row`'s third id is 9, into an
// embedding of 8 rows. An identity activation comes first: the trainer
// checks ids when the data loads only for a model whose input reaches its
// embedding unchanged (TokenIdLayer: first, or behind a reshape), so these
// reach the step, as ids that only a layer in front makes would.
std::vector<std::string> BadIdJob(const std::string& dir, int64_t bad_row) {
  testing::WriteBytes(dir + "/ids.npz", testing::TokenIdsNpzBytes(32, bad_row));
  return {"data={name: npz, path: " + dir + "/ids.npz, shuffle: false}",
          "data.global_batch_size=16",
          "model={layers: [{type: activation, activation: linear}, "
          "{type: embedding, input_dim: 8, output_dim: 3}, "
          "{type: flatten}, {type: dense, units: 10}]}",
          "train.steps=4",
          "train.eval_every_epochs=0",
          "checkpoint.every_steps=0"};
}

// Token ids that the embedding has no row for (behind a layer, so not
// checked when the data loads): with steps in flight the ids are
// checked where the step runs and read back with the loss, and the run
// still ends at that step, naming the replica, the index and its position.
TEST(StepsInFlightTest, ABadTokenIdEndsTheRunAtItsStep) {
  const std::string dir = testing::FreshTestDir("ids");
  // 32 rows of 4 ids in [0, 8), but row 21's third id is 9. Batches of 16,
  // not shuffled: step 2 holds rows 16..31, replica 0 rows 16..23, so the
  // bad id is at position 5 * 4 + 2 of replica 0's ids.
  const std::vector<std::string> job = BadIdJob(dir, 21);
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

// Two processes (threads here, as mpirun's would be), each with two
// replicas: a bad token id in process 1's shard is found there only, after
// the step, yet both processes end at that step with process 1's error,
// marked agreed (the CLI reports it once, from the chief, and every
// process exits with its code).
TEST(StepsInFlightTest, AFailureInOneProcessEndsEveryProcessAgreed) {
  const std::string dir = testing::FreshTestDir("ids_two_processes");
  // Step 2 holds rows 16..31: global replicas 2 and 3 (process 1's local
  // replicas 0 and 1) rows 24..27 and 28..31; row 29's third id is bad, at
  // position 1 * 4 + 2 of process 1's replica 1.
  const std::vector<std::string> job = BadIdJob(dir, 29);
  testing::ThreadWorld world(2);
  std::vector<std::unique_ptr<distribute::ProcessGroup>> members;
  for (int p = 0; p < 2; ++p) members.push_back(world.Member(p));
  std::vector<TrainedRun> runs(2);
  std::vector<std::thread> processes;
  for (int p = 0; p < 2; ++p) {
    processes.emplace_back([&, p] {
      runs[p] = TrainWith(2, "", job, members[p].get(), dir + "/run");
    });
  }
  for (std::thread& t : processes) t.join();
  const std::string what = "Gather: index 9 at position 6 is out of range";
  for (int p = 0; p < 2; ++p) {
    const absl::Status& s = runs[p].status;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p << ": " << s;
    EXPECT_TRUE(distribute::IsAgreed(s)) << p << ": " << s;
    // Step 3 was already enqueued in both.
    EXPECT_EQ(runs[p].global_step, 3) << p;
  }
  const std::string mine(runs[1].status.message());
  EXPECT_EQ(mine.substr(0, 19), "step 2: replica 1: ") << mine;
  EXPECT_NE(mine.find(what), std::string::npos) << mine;
  EXPECT_EQ(runs[0].status.message(),
            absl::StrCat("process 1: ", runs[1].status.message()));
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/checkpoints"));
}

}  // namespace
}  // namespace mirrortrain::trainer
