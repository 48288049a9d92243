// Layers frozen in the config (`trainable: false`, Keras's
// trainable=False) under every strategy: their variables leave training
// bit for bit as they were initialised, with no optimizer slots or EMA
// shadows, while the rest trains; a frozen batch normalization's moving
// statistics stay too. A model with nothing left to train is an error.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tensor/status_macros.h"
#include "tests/test_util.h"
#include "tests/trainer/host_strategies.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

std::vector<std::string> Job(const std::string& strategy,
                             const std::string& devices,
                             const std::string& layers) {
  return {"data.name=synthetic",
          "data.train_examples=64",
          "data.test_examples=16",
          "data.global_batch_size=16",
          "model.layers=" + layers,
          "optimizer.name=adam",
          "optimizer.learning_rate=0.01",
          "ema.decay=0.9",
          "train.steps=4",
          "train.eval_every_epochs=0",
          "train.log_every_steps=1000",
          "checkpoint.every_steps=0",
          "distribute.strategy=" + strategy,
          "distribute.devices=" + devices};
}

// A frozen hidden layer and batch normalization under a trainable head.
constexpr char kFrozenBody[] =
    "[{type: flatten}, {type: dense, units: 16, trainable: false}, "
    "{type: batch_normalization, trainable: false}, "
    "{type: activation, activation: relu}, {type: dense, units: 10}]";

std::map<std::string, Tensor> StateOf(const Trainer& t) {
  std::map<std::string, Tensor> state;
  for (Variable* v : t.TrainingState()) {
    // A copy: To() hands a CPU tensor back as it is.
    state.emplace(v->name(), *v->value().Clone()->To(Device::Cpu()));
  }
  return state;
}

absl::StatusOr<std::unique_ptr<Trainer>> Create(
    const std::vector<std::string>& job, const std::string& dir) {
  MT_ASSIGN_OR_RETURN(Config config, ParseConfig("", "frozen.yaml", job));
  return Trainer::Create(config, dir, DataNeeds::kTrainAndTest);
}

class FrozenLayersTest
    : public ::testing::TestWithParam<testing::HostStrategy> {};

TEST_P(FrozenLayersTest, FrozenVariablesStayAsInitialised) {
  const std::vector<std::string> job =
      Job(GetParam().strategy, GetParam().devices, kFrozenBody);
  auto t = Create(job, testing::FreshTestDir("frozen"));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::map<std::string, Tensor> initial = StateOf(**t);
  // Only the head has slots and averages.
  for (const auto& [name, value] : initial) {
    if (absl::StartsWith(name, "dense/") ||
        absl::StartsWith(name, "batch_normalization/")) {
      EXPECT_EQ(std::count(name.begin(), name.end(), '/'), 1) << name;
    }
  }
  EXPECT_TRUE(initial.contains("dense_1/kernel/ExponentialMovingAverage"));
  ASSERT_TRUE((*t)->Train().ok());
  EXPECT_TRUE((*t)->CheckReplicasIdentical().ok());
  int frozen = 0, trained = 0;
  for (const auto& [name, value] : StateOf(**t)) {
    SCOPED_TRACE(name);
    if (absl::StartsWith(name, "dense/") ||
        absl::StartsWith(name, "batch_normalization/")) {
      EXPECT_TRUE(testing::SameBits(value, initial.at(name)));
      ++frozen;
    } else if (name == "dense_1/kernel" || name == "dense_1/bias") {
      EXPECT_FALSE(testing::SameBits(value, initial.at(name)));
      ++trained;
    }
  }
  EXPECT_EQ(frozen, 2 + 4);  // kernel, bias; gamma, beta, moving mean, var.
  EXPECT_EQ(trained, 2);
}

INSTANTIATE_TEST_SUITE_P(Strategies, FrozenLayersTest,
                         testing::EveryHostStrategy(),
                         testing::HostStrategyName);

TEST(FrozenLayersErrorTest, AModelWithNothingToTrainIsNamed) {
  const std::string all_frozen =
      "[{type: flatten}, {type: dense, units: 10, trainable: false}]";
  auto config =
      ParseConfig("", "frozen.yaml", Job("mirrored", "[cpu:0]", all_frozen));
  ASSERT_TRUE(config.ok()) << config.status();
  // The resolved config keeps the key (and leaves it out where true).
  EXPECT_NE(config->resolved_yaml.find("trainable: false"), std::string::npos)
      << config->resolved_yaml;
  EXPECT_EQ(config->resolved_yaml.find("trainable: true"), std::string::npos);
  auto t = Trainer::Create(*config, testing::FreshTestDir("frozen_all"),
                           DataNeeds::kTrainAndTest);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "model.layers: every layer with variables is frozen (trainable: "
            "false), so nothing would train");
  // train --dry_run says so too; the model still evaluates.
  EXPECT_EQ(ModelSummary(*config).status().message(), t.status().message());
  t = Trainer::Create(*config, "", DataNeeds::kTest);
  EXPECT_TRUE(t.ok()) << t.status();
}

}  // namespace
}  // namespace mirrortrain::trainer
