// train.accumulation_steps: K micro-batches of B examples per optimizer step
// train the same model as batches of K*B (weights, Adam slots and EMA, with
// dropout and a partial last batch per epoch), on 1 and 2 logical replicas;
// a step communicates as many times as without accumulation; a resumed run
// continues exactly.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

struct TrainedRun {
  std::vector<std::string> names;
  std::vector<Tensor> values;  // Replica 0's state after training.
  int64_t global_step = 0;
  int64_t collectives = 0;
};

TrainedRun Train(int replicas, std::vector<std::string> overrides,
                 const std::string& run_dir = "") {
  std::string devices = "distribute.devices=[cpu:0";
  for (int i = 1; i < replicas; ++i) devices += ",cpu:" + std::to_string(i);
  overrides.push_back(devices + "]");
  for (const char* o :
       {"distribute.strategy=mirrored",
        "distribute.check_replicas_every_steps=1", "data.name=synthetic",
        // 200 examples: 25 micro-batches of 8 per epoch, so every epoch ends
        // with a step of one micro-batch (the large batch's 8-example rest).
        "data.train_examples=200", "data.test_examples=50",
        "model.hidden_units=[16]", "model.dropout=0.25", "optimizer.name=adam",
        "optimizer.learning_rate=0.01", "ema.decay=0.9",
        "train.eval_every_epochs=0", "train.log_every_steps=1000",
        "checkpoint.every_steps=0"}) {
    overrides.push_back(o);
  }
  auto config = ParseConfig("", "accumulation_test.yaml", overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return {};
  auto trainer = Trainer::Create(*config, run_dir, DataNeeds::kTrainAndTest);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  absl::Status s = (*trainer)->Train();
  EXPECT_TRUE(s.ok()) << s;
  TrainedRun run;
  for (Variable* v : (*trainer)->ReplicaState(0)) {
    run.names.push_back(v->name());
    run.values.push_back(*v->value().Clone());
  }
  run.global_step = (*trainer)->global_step();
  run.collectives = (*trainer)->strategy().collectives_started();
  return run;
}

// ||a - b|| <= tol * ||b|| per variable (tol 0: bitwise).
void ExpectSameState(const TrainedRun& a, const TrainedRun& b, double tol) {
  ASSERT_EQ(a.names, b.names);
  ASSERT_FALSE(a.names.empty());
  for (size_t i = 0; i < a.values.size(); ++i) {
    const testing::DiffAndNorm d =
        testing::L2DiffAndNorm(a.values[i], b.values[i]);
    EXPECT_LE(d.diff, tol * d.norm) << a.names[i];
  }
}

class AccumulationTest : public ::testing::TestWithParam<int> {};

TEST_P(AccumulationTest, FourMicroBatchesEqualTheFourTimesLargerBatch) {
  const int replicas = GetParam();
  // 16 steps: two epochs of 7 (6 of 32 examples, one of 8), and 2 more.
  const TrainedRun accumulated =
      Train(replicas, {"data.global_batch_size=8", "train.accumulation_steps=4",
                       "train.steps=16"});
  const TrainedRun large =
      Train(replicas, {"data.global_batch_size=32", "train.steps=16"});
  EXPECT_EQ(accumulated.global_step, 16);
  EXPECT_EQ(large.global_step, 16);
  // Float rounding only: the same sums in another order.
  ExpectSameState(accumulated, large, 2e-5);
  // Not trivially equal: micro-batches without accumulation differ.
  const TrainedRun small =
      Train(replicas, {"data.global_batch_size=8", "train.steps=16"});
  testing::DiffAndNorm d =
      testing::L2DiffAndNorm(small.values[0], large.values[0]);
  EXPECT_GT(d.diff, 1e-3 * d.norm);
  if (replicas > 1) {
    // Logical replicas share their gradients (distribute.sum_in_update):
    // one share and its end per step, with or without accumulation.
    EXPECT_EQ(large.collectives, 2 * 16);
    EXPECT_EQ(accumulated.collectives, 2 * 16);
    EXPECT_EQ(small.collectives, 2 * 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, AccumulationTest, ::testing::Values(1, 2));

TEST(AccumulationResumeTest, ResumedRunContinuesExactly) {
  const std::vector<std::string> job = {"data.global_batch_size=8",
                                        "train.accumulation_steps=3"};
  auto with = [&](const std::string& steps) {
    std::vector<std::string> all = job;
    all.push_back(steps);
    return all;
  };
  const std::string dir = testing::FreshTestDir("accumulation_resume");
  const TrainedRun straight = Train(2, with("train.steps=12"));
  // 25 micro-batches per epoch in steps of 3: 9 steps per epoch; the
  // checkpoint at step 5 is mid-epoch (input batch 15).
  Train(2, with("train.steps=5"), dir);
  ASSERT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt-5.safetensors"));
  const TrainedRun resumed = Train(2, with("train.steps=12"), dir);
  EXPECT_EQ(resumed.global_step, 12);
  ExpectSameState(resumed, straight, 0.0);
}

// More micro-batches than an epoch has, up to the largest count: a step
// takes the whole epoch (25 micro-batches), the same update as 25 (the
// epoch's count once overflowed in the step arithmetic: SIGFPE).
TEST(AccumulationResumeTest, MoreMicroBatchesThanAnEpochTakeTheEpoch) {
  const TrainedRun whole =
      Train(1, {"train.accumulation_steps=25", "train.steps=2"});
  const TrainedRun most = Train(
      1, {"train.accumulation_steps=9223372036854775807", "train.steps=2"});
  EXPECT_EQ(most.global_step, 2);
  ExpectSameState(most, whole, 0);
}

TEST(AccumulationConfigTest, StepsMustBeAtLeastOne) {
  auto config =
      ParseConfig("", "accumulation_test.yaml", {"train.accumulation_steps=0"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("train.accumulation_steps"),
            std::string::npos)
      << config.status();
}

TEST(AccumulationConfigTest, OneCopyOfTheVariablesHasNoReplicasToCheck) {
  for (const char* strategy : {"central_storage", "parameter_server"}) {
    auto config = ParseConfig(
        absl::StrCat("distribute: {strategy: ", strategy,
                     ", devices: [cpu:0, cpu:1], check_replicas_every_steps: "
                     "5}\n"),
        "c.yaml", {});
    ASSERT_FALSE(config.ok()) << strategy;
    EXPECT_NE(config.status().message().find(
                  "c.yaml:1: distribute.check_replicas_every_steps: "),
              std::string::npos)
        << config.status();
  }
}

TEST(AccumulationConfigTest, ParameterServerWorkersTakeNone) {
  auto config = ParseConfig(
      "distribute: {strategy: parameter_server, devices: [cpu:0, cpu:1]}\n"
      "train: {accumulation_steps: 2}\n",
      "ps.yaml", {});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "ps.yaml:2: train.accumulation_steps: parameter_server"),
            std::string::npos)
      << config.status();
}

}  // namespace
}  // namespace mirrortrain::trainer
