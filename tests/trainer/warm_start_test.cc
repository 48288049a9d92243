// checkpoint.warm_start_from: a run that restores nothing of its own starts
// from another run's model weights (TF Estimator's warm_start_from): every
// replica (and parameter server) holds them bit for bit, the EMA shadows
// start at them, the optimizer (here another one) from zero at step 0; a
// run with checkpoints of its own resumes them instead; a checkpoint that
// is missing or holds another model is an error naming the key.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tensor/status_macros.h"
#include "tests/test_util.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

// The test's job, then `overrides` (a later --set wins).
std::vector<std::string> Job(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {
      "data.name=synthetic",       "data.train_examples=128",
      "data.test_examples=32",     "data.global_batch_size=16",
      "model.hidden_units=[16]",   "ema.decay=0.9",
      "train.eval_every_epochs=0", "train.log_every_steps=1000",
      "checkpoint.every_steps=0"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return all;
}

absl::StatusOr<std::unique_ptr<Trainer>> Create(
    const std::vector<std::string>& overrides, const std::string& run_dir) {
  MT_ASSIGN_OR_RETURN(Config config,
                      ParseConfig("", "warm_start_test.yaml", Job(overrides)));
  return Trainer::Create(config, run_dir, DataNeeds::kTrainAndTest);
}

// Name -> host copy of every variable of the state a checkpoint holds.
std::map<std::string, Tensor> StateOf(const Trainer& t) {
  std::map<std::string, Tensor> state;
  for (Variable* v : t.TrainingState()) {
    state.emplace(v->name(), *v->value().To(Device::Cpu()));
  }
  return state;
}

// The first run: Adam with an EMA, 6 steps, saved in its run directory;
// returns its final state.
std::map<std::string, Tensor> TrainTheSource(const std::string& dir) {
  auto source = Create(
      {"optimizer.name=adam", "optimizer.learning_rate=0.01", "train.steps=6"},
      dir);
  EXPECT_TRUE(source.ok()) << source.status();
  if (!source.ok()) return {};
  const absl::Status trained = (*source)->Train();
  EXPECT_TRUE(trained.ok()) << trained;
  return StateOf(**source);
}

struct Strategy {
  const char* strategy;
  const char* devices;
};

class WarmStartTest : public ::testing::TestWithParam<Strategy> {};

TEST_P(WarmStartTest, StartsFromTheModelWeightsWithAFreshOptimizer) {
  const std::string source_dir = testing::FreshTestDir("warm_source");
  const std::map<std::string, Tensor> source = TrainTheSource(source_dir);
  ASSERT_FALSE(source.empty());
  const std::vector<std::string> warm = {
      "optimizer.name=momentum",
      "optimizer.learning_rate=0.05",
      "optimizer.momentum=0.9",
      "train.steps=4",
      std::string("distribute.strategy=") + GetParam().strategy,
      std::string("distribute.devices=") + GetParam().devices,
      "checkpoint.warm_start_from=" + source_dir};
  const std::string dir = testing::FreshTestDir("warm_run");
  auto t = Create(warm, dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->global_step(), 0);
  // Every replica holds it (mirrored; the others keep one copy).
  EXPECT_TRUE((*t)->CheckReplicasIdentical().ok());
  int weights = 0, shadows = 0, slots = 0;
  for (const auto& [name, value] : StateOf(**t)) {
    SCOPED_TRACE(name);
    const std::string ema = "/ExponentialMovingAverage";
    if (source.contains(name) && !absl::EndsWith(name, ema)) {
      // A model variable: the source's final value.
      EXPECT_TRUE(testing::SameBits(value, source.at(name)));
      ++weights;
    } else if (absl::EndsWith(name, ema)) {
      // Its average starts at the same value, not the source's average.
      const std::string var = name.substr(0, name.size() - ema.size());
      ASSERT_TRUE(source.contains(var));
      EXPECT_TRUE(testing::SameBits(value, source.at(var)));
      ++shadows;
    } else {
      // The momentum slots, new: zero.
      EXPECT_TRUE(testing::SameBits(
          value, Tensor::HostZeros(value.dtype(), value.shape())));
      ++slots;
    }
  }
  // A dense layer and the softmax layer: 4 variables.
  EXPECT_EQ(weights, 4);
  EXPECT_EQ(shadows, weights);
  EXPECT_EQ(slots, weights);
  ASSERT_TRUE((*t)->Train().ok());
  EXPECT_EQ((*t)->global_step(), 4);
  const std::map<std::string, Tensor> trained = StateOf(**t);
  t->reset();

  // Its own checkpoint now wins: run again with the key still set, it
  // resumes at step 4 from its own state.
  auto again = Create(warm, dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->global_step(), 4);
  for (const auto& [name, value] : StateOf(**again)) {
    EXPECT_TRUE(testing::SameBits(value, trained.at(name))) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, WarmStartTest,
    ::testing::Values(Strategy{"mirrored", "[cpu:0]"},
                      Strategy{"mirrored", "[cpu:0,cpu:1]"},
                      Strategy{"central_storage", "[cpu:0,cpu:1]"},
                      Strategy{"parameter_server", "[cpu:0,cpu:1]"}),
    [](const auto& info) {
      return std::string(info.param.strategy) +
             (std::string(info.param.devices).find(',') == std::string::npos
                  ? "1"
                  : "2");
    });

TEST(WarmStartErrorTest, AMissingOrMismatchedCheckpointIsNamed) {
  const std::string source_dir = testing::FreshTestDir("warm_source_err");
  ASSERT_FALSE(TrainTheSource(source_dir).empty());
  const std::string missing = source_dir + "/nothing_here";
  auto t = Create({"train.steps=1", "checkpoint.warm_start_from=" + missing},
                  testing::FreshTestDir("warm_missing"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().rfind("checkpoint.warm_start_from: ", 0), 0u)
      << t.status();
  EXPECT_NE(t.status().message().find(missing), std::string::npos)
      << t.status();
  // Another model: a variable of this one has another shape there.
  t = Create({"train.steps=1", "model.hidden_units=[8]",
              "checkpoint.warm_start_from=" + source_dir},
             testing::FreshTestDir("warm_other_model"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().rfind("checkpoint.warm_start_from: ", 0), 0u)
      << t.status();
  EXPECT_NE(t.status().message().find("dense/kernel"), std::string::npos)
      << t.status();
}

// Beside a checkpoint to restore (a whole run's state) it is a config
// error, as is an empty path; beside latest or none it is the fresh
// start's source.
TEST(WarmStartErrorTest, ItGoesWithLatestOrNoneOnly) {
  auto config = ParseConfig(
      "", "w.yaml",
      Job({"train.steps=1", "checkpoint.restore=/some/ckpt.safetensors",
           "checkpoint.warm_start_from=/other"}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_from: set beside checkpoint.restore: "
                "/some/ckpt.safetensors"),
            std::string::npos)
      << config.status();
  config = ParseConfig("", "w.yaml",
                       Job({"train.steps=1", "checkpoint.warm_start_from=''"}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_from: expected a checkpoint path or "
                "null, got ''"),
            std::string::npos)
      << config.status();
  for (const char* restore : {"latest", "none"}) {
    config = ParseConfig(
        "", "w.yaml",
        Job({"train.steps=1", std::string("checkpoint.restore=") + restore,
             "checkpoint.warm_start_from=/other"}));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->checkpoint.warm_start_from, "/other");
  }
}

}  // namespace
}  // namespace mirrortrain::trainer
