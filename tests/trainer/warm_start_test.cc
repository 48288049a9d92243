// checkpoint.warm_start_from: a run that restores nothing of its own starts
// from another run's model weights (TF Estimator's warm_start_from): every
// replica (and parameter server) holds them bit for bit, the EMA shadows
// start at them, the optimizer (here another one) from zero at step 0; a
// run with checkpoints of its own resumes them instead; a checkpoint that
// is missing or holds another model is an error naming the key. A
// safetensors file written elsewhere starts it too, its names mapped by
// checkpoint.warm_start_names.
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tensor/status_macros.h"
#include "tests/test_util.h"
#include "tests/trainer/host_strategies.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

// The test's job, then `overrides` (a later --set wins; model.layers
// replaces the mlp preset's hidden units).
std::vector<std::string> Job(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {
      "data.name=synthetic",       "data.train_examples=128",
      "data.test_examples=32",     "data.global_batch_size=16",
      "model.hidden_units=[16]",   "ema.decay=0.9",
      "train.eval_every_epochs=0", "train.log_every_steps=1000",
      "checkpoint.every_steps=0"};
  if (absl::c_any_of(overrides, [](const std::string& s) {
        return s.starts_with("model.layers=");
      })) {
    std::erase(all, "model.hidden_units=[16]");
  }
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
std::map<std::string, Tensor> TrainTheSource(
    const std::string& dir, std::vector<std::string> overrides = {}) {
  overrides.insert(
      overrides.begin(),
      {"optimizer.name=adam", "optimizer.learning_rate=0.01", "train.steps=6"});
  auto source = Create(overrides, dir);
  EXPECT_TRUE(source.ok()) << source.status();
  if (!source.ok()) return {};
  const absl::Status trained = (*source)->Train();
  EXPECT_TRUE(trained.ok()) << trained;
  return StateOf(**source);
}

class WarmStartTest : public ::testing::TestWithParam<testing::HostStrategy> {};

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

INSTANTIATE_TEST_SUITE_P(Strategies, WarmStartTest,
                         testing::EveryHostStrategy(),
                         testing::HostStrategyName);

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

constexpr char kEma[] = "/ExponentialMovingAverage";

// checkpoint.warm_start_vars: a deeper model starts its first layer from a
// one-layer run's; its other layers keep the initializers a run without a
// warm start draws, bit for bit.
TEST(WarmStartPartTest, OnlyTheMatchedVariablesStart) {
  const std::string source_dir = testing::FreshTestDir("warm_part_source");
  const std::map<std::string, Tensor> source = TrainTheSource(source_dir);
  ASSERT_FALSE(source.empty());
  const std::vector<std::string> deeper = {"model.hidden_units=[16,16]",
                                           "train.steps=2"};
  auto fresh = Create(deeper, testing::FreshTestDir("warm_part_fresh"));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::map<std::string, Tensor> initial = StateOf(**fresh);
  std::vector<std::string> warm = deeper;
  warm.push_back("checkpoint.warm_start_from=" + source_dir);
  warm.push_back("checkpoint.warm_start_vars=dense/.*");
  auto t = Create(warm, testing::FreshTestDir("warm_part"));
  ASSERT_TRUE(t.ok()) << t.status();
  int started = 0, kept = 0;
  for (const auto& [name, value] : StateOf(**t)) {
    SCOPED_TRACE(name);
    if (absl::EndsWith(name, kEma)) {
      // Every average starts at its variable's value, started or kept.
      const std::string var = name.substr(0, name.size() - strlen(kEma));
      EXPECT_TRUE(testing::SameBits(value, StateOf(**t).at(var)));
    } else if (name == "dense/kernel" || name == "dense/bias") {
      EXPECT_TRUE(testing::SameBits(value, source.at(name)));
      ++started;
    } else {
      EXPECT_TRUE(testing::SameBits(value, initial.at(name)));
      ++kept;
    }
  }
  EXPECT_EQ(started, 2);  // dense/kernel, dense/bias.
  EXPECT_GE(kept, 4);     // Two more layers (and any optimizer slots).
  // A pattern that matches no variable is an error naming the key.
  warm.back() = "checkpoint.warm_start_vars=dense";
  t = Create(warm, testing::FreshTestDir("warm_part_none"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(
                "checkpoint.warm_start_vars: 'dense' matches none of the 6 "
                "model variables (the first is 'dense/kernel'; the whole "
                "name must match)"),
            std::string::npos)
      << t.status();
}

// checkpoint.warm_start_weights: ema: the variables the source trained start
// at its EMA averages, also where this run freezes them, the batch-norm
// statistics (which no EMA averages) at its values; a source without an
// EMA is an error naming the file.
TEST(WarmStartEmaTest, WhatTheSourceTrainedStartsAtItsAverages) {
  const std::vector<std::string> with_bn = {
      "model.layers=[{type: flatten}, {type: dense, units: 16}, "
      "{type: batch_normalization}, {type: activation, activation: relu}, "
      "{type: dense, units: 10}]"};
  const std::string source_dir = testing::FreshTestDir("warm_ema_source");
  const std::map<std::string, Tensor> source =
      TrainTheSource(source_dir, with_bn);
  ASSERT_FALSE(source.empty());
  // The same model with its first layer frozen.
  std::vector<std::string> warm = {
      "model.layers=[{type: flatten}, {type: dense, units: 16, trainable: "
      "false}, {type: batch_normalization}, {type: activation, activation: "
      "relu}, {type: dense, units: 10}]"};
  warm.insert(warm.end(),
              {"train.steps=2", "checkpoint.warm_start_from=" + source_dir,
               "checkpoint.warm_start_weights=ema"});
  auto t = Create(warm, testing::FreshTestDir("warm_ema"));
  ASSERT_TRUE(t.ok()) << t.status();
  int averaged = 0, as_saved = 0;
  for (const auto& [name, value] : StateOf(**t)) {
    SCOPED_TRACE(name);
    if (!source.contains(name) || absl::EndsWith(name, kEma)) continue;
    const std::string shadow = name + kEma;
    if (source.contains(shadow)) {
      EXPECT_TRUE(testing::SameBits(value, source.at(shadow)));
      // Which differs from the source's weight after 6 steps.
      EXPECT_FALSE(testing::SameBits(value, source.at(name)));
      ++averaged;
    } else {
      EXPECT_TRUE(testing::SameBits(value, source.at(name)));
      ++as_saved;
    }
  }
  // Two dense layers and gamma, beta; the moving mean and variance.
  EXPECT_EQ(averaged, 6);
  EXPECT_EQ(as_saved, 2);

  const std::string plain_dir = testing::FreshTestDir("warm_ema_none");
  std::vector<std::string> no_ema = with_bn;
  no_ema.push_back("ema.decay=null");
  ASSERT_FALSE(TrainTheSource(plain_dir, no_ema).empty());
  // A pattern that selects only what the source averaged nothing of.
  warm.push_back("checkpoint.warm_start_vars=.*/moving_.*");
  t = Create(warm, testing::FreshTestDir("warm_ema_stats"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            absl::StrCat("checkpoint.warm_start_weights: ema, but ", source_dir,
                         "/checkpoints/ckpt-6.safetensors holds no EMA "
                         "average of the 2 variables it starts (its run "
                         "averaged others only; use raw)"));
  warm.pop_back();
  warm[warm.size() - 2] = "checkpoint.warm_start_from=" + plain_dir;
  t = Create(warm, testing::FreshTestDir("warm_ema_missing"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            absl::StrCat("checkpoint.warm_start_weights: ema, but ", plain_dir,
                         "/checkpoints/ckpt-6.safetensors holds no EMA "
                         "average of the 8 variables it starts (its run kept "
                         "no EMA; use raw)"));
}

// The two keys qualify checkpoint.warm_start_from: alone (off their
// defaults) they are config errors, as is a pattern that does not compile.
TEST(WarmStartErrorTest, ThePatternAndWeightsNeedAWarmStart) {
  for (const char* key : {"checkpoint.warm_start_vars=dense/.*",
                          "checkpoint.warm_start_weights=ema"}) {
    auto config = ParseConfig("", "w.yaml", Job({"train.steps=1", key}));
    ASSERT_FALSE(config.ok()) << key;
    EXPECT_NE(config.status().message().find(
                  "set without checkpoint.warm_start_from, which it "
                  "qualifies"),
              std::string::npos)
        << config.status();
  }
  auto config =
      ParseConfig("", "w.yaml",
                  Job({"train.steps=1", "checkpoint.warm_start_from=/other",
                       "checkpoint.warm_start_vars='dense/(kernel'"}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_vars: 'dense/(kernel' is not a regular "
                "expression ("),
            std::string::npos)
      << config.status();
  // Far longer than a pattern over names needs (std::regex compiles
  // recursively: a deep enough nesting would overflow the stack).
  const std::string nested =
      std::string(500, '(') + "a" + std::string(500, ')');
  config =
      ParseConfig("", "w.yaml",
                  Job({"train.steps=1", "checkpoint.warm_start_from=/other",
                       "checkpoint.warm_start_vars=" + nested}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_vars: a pattern of 1001 characters (at "
                "most 1000)"),
            std::string::npos)
      << config.status().message().substr(0, 300);
  // The defaults, as a resolved config.yaml spells them, are fine.
  config = ParseConfig("", "w.yaml",
                       Job({"train.steps=1", "checkpoint.warm_start_vars=.*",
                            "checkpoint.warm_start_weights=raw"}));
  EXPECT_TRUE(config.ok()) << config.status();
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

// A safetensors file written elsewhere (numpy's save_file: no metadata;
// PyTorch's: "format": "pt") holds weights only: it starts a run as a
// checkpoint of ours does, under its own names where
// checkpoint.warm_start_names maps them (tf.train.Saver({"name in file":
// v})).
TEST(WarmStartForeignTest, AFileOfWeightsFromElsewhereStartsTheRun) {
  const std::string source_dir = testing::FreshTestDir("warm_foreign_source");
  const std::map<std::string, Tensor> source = TrainTheSource(source_dir);
  ASSERT_FALSE(source.empty());
  // The four weights: the first layer's under another exporter's names.
  const std::map<std::string, std::string> exported = {
      {"dense/kernel", "fc1.weight"},
      {"dense/bias", "fc1.bias"},
      {"dense_1/kernel", "dense_1/kernel"},
      {"dense_1/bias", "dense_1/bias"}};
  std::vector<NamedTensor> tensors;
  for (const auto& [variable, name] : exported) {
    tensors.push_back({name, source.at(variable)});
  }
  const std::string dir = testing::FreshTestDir("warm_foreign_files");
  std::filesystem::create_directories(dir);
  const std::string plain = dir + "/numpy.safetensors";
  const std::string torch = dir + "/torch.safetensors";
  ASSERT_TRUE(WriteSafetensors(plain, tensors, {}).ok());
  ASSERT_TRUE(WriteSafetensors(torch, tensors, {{"format", "pt"}}).ok());
  const std::string names =
      "checkpoint.warm_start_names={fc1.weight: dense/kernel, fc1.bias: "
      "dense/bias}";
  for (const std::string& file : {plain, torch}) {
    SCOPED_TRACE(file);
    auto t =
        Create({"train.steps=2", "checkpoint.warm_start_from=" + file, names},
               testing::FreshTestDir("warm_foreign"));
    ASSERT_TRUE(t.ok()) << t.status();
    int started = 0;
    for (const auto& [variable, name] : exported) {
      for (Variable* v : (*t)->TrainingState()) {
        if (v->name() != variable) continue;
        EXPECT_TRUE(testing::SameBits(*v->value().To(Device::Cpu()),
                                      source.at(variable)))
            << variable;
        ++started;
      }
    }
    EXPECT_EQ(started, 4);
    EXPECT_TRUE((*t)->Train().ok());
  }
  // The EMA weights of a renamed variable: its mapped name's average.
  {
    std::vector<NamedTensor> averaged = tensors;
    for (const auto& [variable, name] : exported) {
      averaged.push_back({name + kEma, source.at(variable + kEma)});
    }
    const std::string ema_file = dir + "/ema.safetensors";
    ASSERT_TRUE(WriteSafetensors(ema_file, averaged, {}).ok());
    auto t = Create({"train.steps=2", "checkpoint.warm_start_from=" + ema_file,
                     names, "checkpoint.warm_start_weights=ema"},
                    testing::FreshTestDir("warm_foreign_ema"));
    ASSERT_TRUE(t.ok()) << t.status();
    int averaged_started = 0;
    for (Variable* v : (*t)->TrainingState()) {
      if (!exported.contains(v->name())) continue;
      EXPECT_TRUE(testing::SameBits(*v->value().To(Device::Cpu()),
                                    source.at(v->name() + kEma)))
          << v->name();
      ++averaged_started;
    }
    EXPECT_EQ(averaged_started, 4);
  }

  // Without the names, the first layer's weights are not found.
  auto t = Create({"train.steps=2", "checkpoint.warm_start_from=" + plain},
                  testing::FreshTestDir("warm_foreign_unnamed"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            absl::StrCat("checkpoint.warm_start_from: ", plain,
                         ": variable 'dense/kernel' not found in checkpoint; "
                         "variable 'dense/bias' not found in checkpoint "
                         "(nothing was restored)"));
  // A name that maps to what the file does not hold.
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + plain,
              "checkpoint.warm_start_names={fc9.weight: dense/kernel, "
              "fc1.bias: dense/bias}"},
             testing::FreshTestDir("warm_foreign_missing"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(
                "variable 'dense/kernel' (saved as 'fc9.weight') not found"),
            std::string::npos)
      << t.status();
  // Names of no model variable, or of one the pattern leaves out.
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + plain,
              "checkpoint.warm_start_names={fc1.weight: dense/kernal}"},
             testing::FreshTestDir("warm_foreign_typo"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "checkpoint.warm_start_names: 'fc1.weight' maps to "
            "'dense/kernal', which is no model variable (the model's are "
            "'dense/kernel' and the like)");
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + plain, names,
              "checkpoint.warm_start_vars=dense_1/.*"},
             testing::FreshTestDir("warm_foreign_unselected"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "checkpoint.warm_start_names: 'fc1.weight' maps to "
            "'dense/kernel', which is not among the variables "
            "checkpoint.warm_start_vars selects");
  // NaN in a file of weights is refused as in a checkpoint, and started
  // from with checkpoint.allow_non_finite.
  for (NamedTensor& named : tensors) {
    if (named.name != "dense_1/bias") continue;
    named.tensor = *named.tensor.Clone();
    named.tensor.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  const std::string nan = dir + "/nan.safetensors";
  ASSERT_TRUE(WriteSafetensors(nan, tensors, {}).ok());
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + nan, names},
             testing::FreshTestDir("warm_foreign_nan"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(
                "'dense_1/bias' holds 1 NaN or infinite of 10 values; set "
                "checkpoint.allow_non_finite=true"),
            std::string::npos)
      << t.status();
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + nan, names,
              "checkpoint.allow_non_finite=true"},
             testing::FreshTestDir("warm_foreign_nan_allowed"));
  EXPECT_TRUE(t.ok()) << t.status();
  // Only what the run reads is checked: a NaN in an entry no variable
  // reads (a mask buffer, say) is no error.
  tensors.push_back(
      {"mask", Tensor::HostFull(DType::kF32, {2},
                                -std::numeric_limits<double>::infinity())});
  const std::string unread = dir + "/unread_nan.safetensors";
  for (NamedTensor& named : tensors) {
    if (named.name == "dense_1/bias") named.tensor = source.at("dense_1/bias");
  }
  ASSERT_TRUE(WriteSafetensors(unread, tensors, {}).ok());
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + unread, names},
             testing::FreshTestDir("warm_foreign_unread"));
  EXPECT_TRUE(t.ok()) << t.status();
  // A variable renamed to the name another selected one reads as its own
  // (layers shifted by one): which would read it is said.
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + plain,
              "checkpoint.warm_start_names={dense_1/kernel: dense/kernel}"},
             testing::FreshTestDir("warm_foreign_clash"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "checkpoint.warm_start_names: 'dense_1/kernel' would start both "
            "'dense_1/kernel' (its own name) and 'dense/kernel' (mapped); map "
            "the first elsewhere too, or leave it out of "
            "checkpoint.warm_start_vars");
  // A mirrortrain format this build does not read is still refused.
  const std::string newer = dir + "/newer.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(newer, tensors, {{"format", "mirrortrain/9"}}).ok());
  t = Create({"train.steps=2", "checkpoint.warm_start_from=" + newer, names},
             testing::FreshTestDir("warm_foreign_newer"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(
      t.status().message().find("unknown checkpoint format 'mirrortrain/9'"),
      std::string::npos)
      << t.status();
}

// checkpoint.warm_start_names qualifies warm_start_from, and one variable
// takes one entry.
TEST(WarmStartErrorTest, NamesNeedAWarmStartAndNameAVariableOnce) {
  auto config = ParseConfig(
      "", "w.yaml",
      Job({"train.steps=1", "checkpoint.warm_start_names={a: dense/kernel}"}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_names: set without "
                "checkpoint.warm_start_from, which it qualifies"),
            std::string::npos)
      << config.status();
  config = ParseConfig(
      "", "w.yaml",
      Job({"train.steps=1", "checkpoint.warm_start_from=/other",
           "checkpoint.warm_start_names={a: dense/kernel, b: dense/kernel}"}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_names: 'a' and 'b' both name "
                "'dense/kernel' (one entry per variable)"),
            std::string::npos)
      << config.status();
  for (const char* bad : {"[a, b]", "{a: [b]}", "{a: null}", "x"}) {
    config =
        ParseConfig("", "w.yaml",
                    Job({"train.steps=1", "checkpoint.warm_start_from=/other",
                         std::string("checkpoint.warm_start_names=") + bad}));
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_NE(config.status().message().find(
                  "checkpoint.warm_start_names: expected a mapping of strings "
                  "to strings, got "),
              std::string::npos)
        << config.status();
  }
  config =
      ParseConfig("", "w.yaml",
                  Job({"train.steps=1", "checkpoint.warm_start_from=/other",
                       "checkpoint.warm_start_names={a: b, a: c}"}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(
                "checkpoint.warm_start_names.a: duplicate key"),
            std::string::npos)
      << config.status();
  // The map, as the resolved config.yaml writes it, reads back the same.
  config = ParseConfig(
      "", "w.yaml",
      Job({"train.steps=1", "checkpoint.warm_start_from=/other",
           "checkpoint.warm_start_names={'fc1.w': dense/kernel, 'true': "
           "dense/bias}"}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->checkpoint.warm_start_names,
            (StringMap{{"fc1.w", "dense/kernel"}, {"true", "dense/bias"}}));
  auto again = ParseConfig(config->resolved_yaml, "config.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << config->resolved_yaml;
  EXPECT_EQ(again->checkpoint.warm_start_names,
            config->checkpoint.warm_start_names);
  EXPECT_EQ(again->resolved_yaml, config->resolved_yaml);
}

}  // namespace
}  // namespace mirrortrain::trainer
