#include "trainer/config.h"

#include <array>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mirrortrain::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ConfigTest, DefaultsApplyToAnEmptyFile) {
  auto c = ParseConfig("", "empty.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.global_batch_size, 128);
  EXPECT_EQ(c->model.preset, "mlp");
  EXPECT_EQ(c->model.preset_params.IntList("hidden_units"),
            (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(c->optimizer.name, "momentum");
  // DESIGN.md: an absent ema.decay is no EMA (Keras's use_ema=False).
  EXPECT_FALSE(c->ema.decay.has_value());
  EXPECT_FALSE(c->optimizer.clip_global_norm.has_value());
  EXPECT_EQ(c->distribute.devices, (std::vector<std::string>{"cpu:0"}));
  EXPECT_EQ(c->name, "empty");
}

// A merge of softmax branches last is refused at the merge's line (Keras
// would merge probabilities, the loss reads logits).
TEST(ConfigTest, AMergeOfOutputActivationsIsRefusedAtItsLine) {
  EXPECT_THAT(
      Message(ParseConfig("model:\n  layers:\n    - {type: dense, units: 3}\n"
                          "    - type: parallel\n      merge: average\n"
                          "      layers:\n"
                          "        - {type: dense, units: 2, activation: "
                          "softmax}\n"
                          "        - {type: dense, units: 2}\n",
                          "m.yaml", {})
                  .status()),
      HasSubstr("m.yaml:4: model.layers[1]: the model's output merges a "
                "branch whose last layer (model.layers[1].layers[0]) applies "
                "softmax"));
}

// `metrics`: names or maps of a name and keys, defaults filled, written to
// the resolved config (and read back from it); absent, none and nothing
// written. Errors name the entry and line.
TEST(ConfigTest, MetricsAreNamesOrMapsThatFitTheLoss) {
  auto c = ParseConfig(
      "metrics: [sparse_top_k_categorical_accuracy,\n"
      "          {name: sparse_top_k_categorical_accuracy, k: 2}]\n",
      "m.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->metrics.size(), 2u);
  EXPECT_EQ(c->metrics[0].name, "sparse_top_k_categorical_accuracy");
  EXPECT_EQ(c->metrics[0].params.Int("k"), 5);
  EXPECT_EQ(c->metrics[1].params.Int("k"), 2);
  // Keras's names for a repeat.
  EXPECT_EQ(c->metrics[0].reported, "sparse_top_k_categorical_accuracy");
  EXPECT_EQ(c->metrics[1].reported, "sparse_top_k_categorical_accuracy_1");
  auto again = ParseConfig(c->resolved_yaml, "m.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->metrics.size(), 2u);
  EXPECT_EQ(again->metrics[1].params.Int("k"), 2);
  auto none = ParseConfig("", "m.yaml", {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->metrics.empty());
  EXPECT_THAT(none->resolved_yaml, Not(HasSubstr("metrics")));
  // Null and empty are none too, written alike (the same config hash).
  for (const char* empty : {"metrics: []\n", "metrics: null\n"}) {
    auto c2 = ParseConfig(empty, "m.yaml", {});
    ASSERT_TRUE(c2.ok()) << c2.status();
    EXPECT_TRUE(c2->metrics.empty());
    EXPECT_EQ(c2->hash, none->hash) << empty;
  }
  EXPECT_THAT(Message(ParseConfig("metrics: [top5]\n", "m.yaml", {}).status()),
              HasSubstr("m.yaml:1: metrics[0].name: unknown value 'top5'"));
  EXPECT_THAT(
      Message(ParseConfig("loss: {name: mean_squared_error}\nmetrics:\n"
                          "  - sparse_top_k_categorical_accuracy\n",
                          "m.yaml", {})
                  .status()),
      HasSubstr("metrics[0].name: sparse_top_k_categorical_accuracy reads one "
                "logit per class, which loss.name mean_squared_error does not "
                "train"));
  EXPECT_THAT(
      Message(ParseConfig("metrics: {name: x}\n", "m.yaml", {}).status()),
      HasSubstr("metrics: expected a list of metrics"));
  EXPECT_THAT(
      Message(ParseConfig("metrics: [{k: 3}]\n", "m.yaml", {}).status()),
      HasSubstr("metrics[0]: names no metric"));
  EXPECT_THAT(
      Message(ParseConfig("metrics: [{name: sparse_top_k_categorical_accuracy, "
                          "k: 0}]\n",
                          "m.yaml", {})
                  .status()),
      HasSubstr("metrics[0].k"));
}

// Without optimizer.learning_rate (or with it null) an optimizer trains at
// Keras's default for it, as `keras.optimizers.Adam()` does, and the
// resolved config says which.
TEST(ConfigTest, LearningRateDefaultsToTheOptimizersKerasDefault) {
  const std::pair<const char*, double> keras[] = {
      {"sgd", 0.01},   {"momentum", 0.01}, {"adagrad", 0.001},
      {"adam", 0.001}, {"adamax", 0.001},  {"adamw", 0.001},
      {"lion", 0.001}, {"nadam", 0.001},   {"rmsprop", 0.001}};
  for (const auto& [name, rate] : keras) {
    SCOPED_TRACE(name);
    auto c = ParseConfig(absl::StrCat("optimizer: {name: ", name, "}\n"),
                         "o.yaml", {});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_DOUBLE_EQ(c->optimizer.learning_rate, rate);
    auto again = ParseConfig(c->resolved_yaml, "o.yaml", {});
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_DOUBLE_EQ(again->optimizer.learning_rate, rate);
    EXPECT_THAT(c->resolved_yaml,
                HasSubstr(absl::StrCat("learning_rate: ", rate)));
  }
  auto c = ParseConfig("optimizer: {name: adam, learning_rate: 0.1}\n",
                       "o.yaml", {"optimizer.learning_rate=null"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->optimizer.learning_rate, 0.001);
  c = ParseConfig("", "o.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->optimizer.learning_rate, 0.01);  // momentum
}

// piecewise_constant's values are the rates (Keras passes the schedule as
// the learning rate): a learning_rate beside them would be ignored, so it
// is an error, and the resolved config leaves it null.
TEST(ConfigTest, PiecewiseConstantTakesNoLearningRate) {
  const std::string piecewise =
      "optimizer:\n  learning_rate: 0.1\n  schedule: {name: "
      "piecewise_constant, boundaries: [5], values: [0.1, 0.01]}\n";
  auto c = ParseConfig(piecewise, "p.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "p.yaml:2: optimizer.learning_rate: unused by schedule "
            "piecewise_constant, whose values are the rates (leave it out, "
            "or null)");
  c = ParseConfig("optimizer: {learning_rate: 0.1}\n", "p.yaml",
                  {"optimizer.schedule={name: piecewise_constant, values: "
                   "[0.1]}"});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("(chosen by --set optimizer.schedule={name: "
                        "piecewise_constant, values: [0.1]})"));
  c = ParseConfig(piecewise, "p.yaml", {"optimizer.learning_rate=null"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->resolved_yaml, HasSubstr("learning_rate: ~"));
  // The resolved config reads back as itself.
  auto again = ParseConfig(c->resolved_yaml, "config.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);
}

TEST(ConfigTest, FileValuesAndOverrides) {
  auto c = ParseConfig(
      "optimizer:\n  name: adam\n  learning_rate: 0.001\n"
      "model: {name: cnn, conv_filters: [8]}\n",
      "x.yaml",
      {"optimizer.learning_rate=0.01", "distribute.devices=[cpu:0,cpu:1]",
       "optimizer.schedule={name: cosine_decay, decay_steps: 50}",
       "ema.decay=null", "optimizer.clip_global_norm=5"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.name, "adam");
  EXPECT_DOUBLE_EQ(c->optimizer.learning_rate, 0.01);
  EXPECT_EQ(c->distribute.devices.size(), 2u);
  EXPECT_EQ(c->optimizer.schedule, "cosine_decay");
  EXPECT_EQ(c->optimizer.schedule_params.Int("decay_steps"), 50);
  EXPECT_FALSE(c->ema.decay.has_value());
  EXPECT_DOUBLE_EQ(*c->optimizer.clip_global_norm, 5.0);
  EXPECT_EQ(c->model.preset_params.IntList("conv_filters"),
            (std::vector<int64_t>{8}));
}

TEST(ConfigTest, ResolvedYamlRoundTrips) {
  auto c = ParseConfig("seed: 7\n", "a.yaml", {"train.steps=3"});
  ASSERT_TRUE(c.ok());
  auto again = ParseConfig(c->resolved_yaml, "b.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << c->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);
  EXPECT_EQ(again->hash, c->hash);
  EXPECT_EQ(*again->train.steps, 3);
}

// Strings that would read as numbers, booleans or null plain are written
// quoted, so a run's config.yaml reads back as the same config.
TEST(ConfigTest, ResolvedYamlQuotesStringsThatLookLikeOtherTypes) {
  auto c = ParseConfig(
      "seed: 010\n"
      "model:\n  layers:\n    - {type: flatten, name: 'true'}\n"
      "    - {type: dense, units: 10, name: \"12\"}\n"
      "optimizer: {name: adamw, exclude_from_weight_decay: ['1e3', 'null', "
      "bias]}\n",
      "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->seed, 10);  // Decimal, not C's octal.
  EXPECT_NE(c->resolved_yaml.find("name: \"true\""), std::string::npos)
      << c->resolved_yaml;
  EXPECT_NE(c->resolved_yaml.find("[\"1e3\", \"null\", bias]"),
            std::string::npos)
      << c->resolved_yaml;
  auto again = ParseConfig(c->resolved_yaml, "b.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << c->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);
  EXPECT_EQ(again->model.layers[0].name, "true");
  EXPECT_EQ(again->model.layers[1].name, "12");
  // yes/on are strings in YAML 1.2, not booleans.
  EXPECT_THAT(
      Message(ParseConfig("data: {shuffle: yes}\n", "j.yaml", {}).status()),
      HasSubstr("data.shuffle: expected true or false, got yes"));
  // Two --set of elements of the file's list: the file and both named.
  EXPECT_THAT(Message(ParseConfig("model:\n  hidden_units: [4, 4]\n", "j.yaml",
                                  {"model.hidden_units[0]=0",
                                   "model.hidden_units[1]=0"})
                          .status()),
              HasSubstr("j.yaml:2 and --set model.hidden_units[0]=0 and --set "
                        "model.hidden_units[1]=0: model.hidden_units:"));
  // A normalization's epsilon is float32 too.
  EXPECT_THAT(Message(ParseConfig("model:\n  layers:\n    - {type: "
                                  "batch_normalization, epsilon: 1e-50}\n",
                                  "j.yaml", {})
                          .status()),
              HasSubstr("(0 in float32, which computes it)"));
  // 1e39 is infinite in float32.
  EXPECT_THAT(
      Message(ParseConfig("optimizer: {learning_rate: 1e39}\n", "j.yaml", {})
                  .status()),
      HasSubstr("(infinite in float32, which computes it)"));
}

TEST(ConfigTest, PrecisionIsFp32UnlessAnotherIsAsked) {
  auto c = ParseConfig("seed: 1\n", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision, "fp32");
  for (const char* p : {"tf32", "bf16"}) {
    c = ParseConfig(absl::StrCat("precision: ", p, "\n"), "a.yaml", {});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->precision, p);
  }
  c = ParseConfig("precision: fp16\n", "a.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(c.status()), HasSubstr("precision"));
  EXPECT_THAT(Message(c.status()), HasSubstr("fp16"));
}

TEST(ConfigTest, CudaGraphIsAutoUnlessTurnedOff) {
  auto c = ParseConfig("seed: 1\n", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.cuda_graph, "auto");
  c = ParseConfig("train: {cuda_graph: off}\n", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.cuda_graph, "off");
  c = ParseConfig("train: {cuda_graph: always}\n", "a.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(c.status()), HasSubstr("train.cuda_graph"));
  EXPECT_THAT(Message(c.status()), HasSubstr("always"));
}

TEST(ConfigTest, CommunicationIsHighPriorityUnlessAskedOtherwise) {
  auto c = ParseConfig("seed: 1\n", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->distribute.communication_priority, "high");
  c = ParseConfig("distribute: {communication_priority: normal}\n", "a.yaml",
                  {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->distribute.communication_priority, "normal");
  c = ParseConfig("distribute:\n  communication_priority: urgent\n", "a.yaml",
                  {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("a.yaml:2: distribute.communication_priority: "
                        "unknown value 'urgent'"));
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  auto c =
      ParseConfig("seed: 1\noptimizer:\n  learning_rat: 0.1\n", "j.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(c.status()),
            "j.yaml:3: optimizer.learning_rat: unknown key for optimizer "
            "momentum");
  // Lines that end in a lone CR (old Mac text) or CR LF are lines too: the
  // same key is named at the same line, and a config reads as it does with
  // LF line breaks.
  for (const char* eol : {"\r", "\r\n"}) {
    c = ParseConfig(absl::StrCat("seed: 1", eol, "optimizer:", eol,
                                 "  learning_rat: 0.1", eol),
                    "j.yaml", {});
    EXPECT_EQ(Message(c.status()),
              "j.yaml:3: optimizer.learning_rat: unknown key for optimizer "
              "momentum");
    auto with =
        ParseConfig(absl::StrCat("seed: 7", eol, "model:", eol, "  name: mlp",
                                 eol, "data:", eol, "  name: synthetic", eol),
                    "ok.yaml", {});
    auto plain =
        ParseConfig("seed: 7\nmodel:\n  name: mlp\ndata:\n  name: synthetic\n",
                    "ok.yaml", {});
    ASSERT_TRUE(with.ok()) << with.status();
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(with->seed, 7);
    EXPECT_EQ(with->resolved_yaml, plain->resolved_yaml);
  }
}

// An entry of a parallel is one branch: a repeat there is refused where it
// is written (a sequential entry repeats its layers).
TEST(ConfigTest, AParallelEntryIsNotRepeated) {
  auto c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten}\n    - type: parallel\n"
      "      layers:\n        - {type: dense, units: 4}\n"
      "        - {type: dense, units: 4,\n           repeat: 2}\n",
      "p.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "p.yaml:8: model.layers[1].layers[1].repeat: an entry of parallel "
            "is one branch (repeat layers inside a sequential entry)");
  c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten}\n    - type: parallel\n"
      "      layers:\n        - {type: dense, units: 4}\n"
      "        - type: sequential\n          layers:\n"
      "            - {type: dense, units: 4, repeat: 2}\n",
      "p.yaml", {});
  EXPECT_TRUE(c.ok()) << c.status();
}

// Keras's int-or-tuple axes: one integer is a list of it; the resolved
// config writes the list, which reads back.
TEST(ConfigTest, OneIntegerIsAListOfItWhereKerasTakesEither) {
  auto c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten}\n"
      "    - {type: unit_normalization, axis: -1}\n"
      "    - {type: prelu, shared_axes: 1}\n"
      "    - {type: dense, units: 3}\n",
      "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.layers[1].params.IntList("axis"),
            std::vector<int64_t>{-1});
  EXPECT_EQ(c->model.layers[2].params.IntList("shared_axes"),
            std::vector<int64_t>{1});
  EXPECT_THAT(c->resolved_yaml, HasSubstr("shared_axes: [1]"));
  auto again = ParseConfig(c->resolved_yaml, "again.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model.layers[2].params.IntList("shared_axes"),
            std::vector<int64_t>{1});
  // And from --set.
  c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten}\n"
      "    - {type: unit_normalization}\n    - {type: dense, units: 3}\n",
      "a.yaml", {"model.layers[1].axis=1"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.layers[1].params.IntList("axis"), std::vector<int64_t>{1});
  c = ParseConfig(
      "model:\n  layers:\n    - {type: unit_normalization, axis: x}\n",
      "a.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("a.yaml:3: model.layers[0].axis: expected an integer "
                        "or a list of integers, got x"));
  // Elsewhere a list stays a list.
  c = ParseConfig("model:\n  hidden_units: 5\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("expected a list of integers"));
}

TEST(ConfigTest, WrongTypes) {
  auto c = ParseConfig("data:\n  global_batch_size: lots\n", "j.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "j.yaml:2: data.global_batch_size: expected an integer >= 1, got "
            "lots");
  c = ParseConfig("model:\n  hidden_units: 5\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("expected a list of integers"));
  c = ParseConfig("data: 3\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("data: expected a mapping"));
  // YAML's types: quoted scalars are strings, plain numbers and booleans
  // are not.
  c = ParseConfig("optimizer: {learning_rate: '0.1'}\n", "j.yaml", {});
  EXPECT_EQ(
      Message(c.status()),
      "j.yaml:1: optimizer.learning_rate: expected a number > 0, or null, got "
      "'0.1' (quoted: a string)");
  c = ParseConfig("optimizer: {name: adamw, exclude_from_weight_decay: true}\n",
                  "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("optimizer.exclude_from_weight_decay: expected a list "
                        "of strings, got true"));
  c = ParseConfig(
      "optimizer: {name: adamw, exclude_from_weight_decay: [1e3]}\n", "j.yaml",
      {});
  EXPECT_THAT(Message(c.status()), HasSubstr("got [1e3]"));
  c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten, name: 'true'}\n"
      "    - {type: dense, units: 10, name: '0x1F'}\n",
      "j.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.layers[0].name, "true");
  EXPECT_EQ(c->model.layers[1].name, "0x1F");
}

TEST(ConfigTest, OutOfRangeAndUnknownNames) {
  auto c = ParseConfig("optimizer: {learning_rate: -1}\n", "j.yaml", {});
  EXPECT_EQ(
      Message(c.status()),
      "j.yaml:1: optimizer.learning_rate: expected a number > 0, or null, "
      "got -1");
  c = ParseConfig("optimizer: {name: lamb}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("optimizer.name: unknown value 'lamb'"));
  c = ParseConfig("model: {name: resnet}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("model.name: unknown value"));
  c = ParseConfig("model: {dropout: 1.0}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("model.dropout: expected a number in [0, 1), got 1"));
  // > 0 in float32, which computes rates and epsilons: 1e-320 is 0 there.
  c = ParseConfig("optimizer: {name: adam, epsilon: 1e-320}\n", "j.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "j.yaml:1: optimizer.epsilon: expected a number > 0, got 1e-320 "
            "(0 in float32, which computes it)");
  c = ParseConfig("optimizer: {name: adam, epsilon: 1e-44}\n", "j.yaml", {});
  EXPECT_TRUE(c.ok()) << c.status();
  // < 1 in float32 likewise: a beta of 0.99999999 is 1 there, where Adam's
  // bias correction 1 - beta1^t would divide by zero (a NaN at step 2).
  for (const char* key : {"beta1", "beta2"}) {
    c = ParseConfig(
        absl::StrCat("optimizer: {name: adam, ", key, ": 0.99999999}\n"),
        "j.yaml", {});
    EXPECT_EQ(Message(c.status()),
              absl::StrCat("j.yaml:1: optimizer.", key,
                           ": expected a number in [0, 1), got 0.99999999 "
                           "(1 in float32, which computes it)"));
  }
  c = ParseConfig("optimizer: {name: adam, beta2: 0.9999999}\n", "j.yaml", {});
  EXPECT_TRUE(c.ok()) << c.status();
  // Finite in float32, where the slots and inputs live: 1e39 would train
  // on infinities (an accumulator of 1e39 makes every update 0, and the
  // first checkpoint refuses the state). A schedule's decay_rate may grow
  // the rate past float32 on its own: the trainer stops on that state.
  for (const char* yaml :
       {"optimizer: {name: adagrad, initial_accumulator_value: 1e39}",
        "data: {normalize: {mean: [1e39], std: [1]}}",
        "data: {normalize: {mean: [0], std: [1e39]}}"}) {
    c = ParseConfig(absl::StrCat(yaml, "\n"), "j.yaml", {});
    EXPECT_THAT(Message(c.status()),
                HasSubstr("(infinite in float32, which computes it)"))
        << yaml;
  }
  // An empty shape is no example shape (null means the data's).
  c = ParseConfig("model: {input_shape: []}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("j.yaml:1: model.input_shape: "));
  // An integer no 64 bits hold: not a contradiction with ">= 0".
  c = ParseConfig("seed: 9223372036854775808\n", "j.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "j.yaml:1: seed: expected an integer >= 0, got "
            "9223372036854775808 (beyond the 64-bit integers, "
            "[-9223372036854775808, 9223372036854775807])");
}

// A strategy takes its own keys only, and resolves only those (so the
// resolved config parses again).
TEST(ConfigTest, StrategiesTakeOnlyTheirOwnKeys) {
  const std::string ps =
      "distribute:\n  strategy: parameter_server\n  ps_devices: [cpu:0]\n"
      "  max_staleness: 2\n";
  absl::StatusOr<Config> c = ParseConfig(ps, "ps.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->resolved_yaml, HasSubstr("max_staleness: 2"));
  EXPECT_THAT(c->resolved_yaml, HasSubstr("ps_min_shard_bytes: 262144"));
  EXPECT_THAT(c->resolved_yaml, Not(HasSubstr("bucket_bytes")));
  EXPECT_THAT(c->resolved_yaml, Not(HasSubstr("variables_device")));
  ASSERT_TRUE(ParseConfig(c->resolved_yaml, "again.yaml", {}).ok());
  for (const char* strategy :
       {"one_device", "mirrored", "central_storage", "parameter_server"}) {
    c = ParseConfig(absl::StrCat("distribute: {strategy: ", strategy, "}\n"),
                    "s.yaml", {});
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<Config> again =
        ParseConfig(c->resolved_yaml, "again.yaml", {});
    EXPECT_TRUE(again.ok()) << strategy << ": " << again.status();
    EXPECT_EQ(c->resolved_yaml.find("variables_device") != std::string::npos,
              std::string(strategy) == "central_storage")
        << strategy;
  }
  // Switching the strategy on the command line names the switch.
  c = ParseConfig(ps, "ps.yaml", {"distribute.strategy=mirrored"});
  EXPECT_EQ(Message(c.status()),
            "ps.yaml:3: distribute.ps_devices: a key of parameter_server, "
            "unused by strategy mirrored (chosen by --set "
            "distribute.strategy=mirrored)");
  c = ParseConfig("distribute: {strategy: one_device}\n", "o.yaml",
                  {"distribute.bucket_bytes=4096"});
  EXPECT_EQ(Message(c.status()),
            "--set distribute.bucket_bytes=4096: distribute.bucket_bytes: a "
            "key of mirrored and central_storage, unused by strategy "
            "one_device");
  // One --set that both chose the component and wrote the key is named
  // once, where the line starts.
  c = ParseConfig("", "a.yaml", {"optimizer={name: adam, momentum: 0.9}"});
  EXPECT_EQ(Message(c.status()),
            "--set optimizer={name: adam, momentum: 0.9}: optimizer.momentum: "
            "unknown key for optimizer adam");
  c = ParseConfig("distribute: {strategy: one_device}\n", "o.yaml",
                  {"distribute.strategy=mirrored"});
  ASSERT_TRUE(c.ok()) << c.status();
  c = ParseConfig("", "o.yaml",
                  {"distribute={strategy: one_device, devices: [cpu:0, "
                   "cpu:1]}"});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("one_device takes exactly one device, got 2 (for "
                        "several: distribute.strategy: mirrored)"));
  // Summing in the update is mirrored's alone (on by default).
  c = ParseConfig("distribute: {strategy: mirrored}\n", "m.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->distribute.sum_in_update);
  c = ParseConfig("distribute: {strategy: mirrored, sum_in_update: false}\n",
                  "m.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->distribute.sum_in_update);
  c = ParseConfig(
      "distribute:\n  strategy: central_storage\n  sum_in_update: false\n",
      "cs.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "cs.yaml:3: distribute.sum_in_update: a key of mirrored, unused by "
            "strategy central_storage");
  // A null is "not set".
  EXPECT_TRUE(
      ParseConfig("distribute: {strategy: mirrored, max_staleness: null}\n",
                  "m.yaml", {})
          .ok());
}

TEST(ConfigTest, MissingDeviceIsAConfigError) {
  auto c = ParseConfig("distribute: {devices: [gpu:7]}\n", "j.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(c.status()), HasSubstr("j.yaml:1: distribute.devices: "));
  EXPECT_THAT(Message(c.status()), HasSubstr("gpu:7"));
  c = ParseConfig(
      "distribute: {strategy: one_device, devices: [cpu:0, cpu:1]}\n", "j.yaml",
      {});
  EXPECT_THAT(Message(c.status()), HasSubstr("one_device takes exactly one"));
  // Central storage's own device too, named as its key (it was found when
  // the model was built, blamed on the first layer).
  c = ParseConfig(
      "distribute: {strategy: central_storage, variables_device: gpu:7}\n",
      "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("j.yaml:1: distribute.variables_device: "));
  EXPECT_THAT(Message(c.status()), HasSubstr("gpu:7"));
  // Other strategies do not take it.
  EXPECT_EQ(Message(ParseConfig("distribute: {variables_device: gpu:7}\n",
                                "j.yaml", {})
                        .status()),
            "j.yaml:1: distribute.variables_device: a key of central_storage, "
            "unused by strategy mirrored");
  // NCCL on devices it cannot take: said at the key, with the file's line.
  c = ParseConfig(
      "distribute:\n  devices: [cpu:0, cpu:1]\n  cross_device_ops: nccl\n",
      "j.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "j.yaml:3: distribute.cross_device_ops: nccl needs distinct GPU "
            "devices (NCCL allows one rank per GPU); use local");
}

TEST(ConfigTest, MalformedYaml) {
  auto c = ParseConfig("data: [1, 2\nseed: 3\n", "bad.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(c.status()), HasSubstr("bad.yaml:"));
  EXPECT_THAT(Message(c.status()), HasSubstr("malformed YAML"));
  // Beyond yaml-cpp's depth guard: said so, not its "bad file", and not
  // called malformed (it is valid YAML).
  c = ParseConfig(
      "seed: " + std::string(3000, '[') + std::string(3000, ']') + "\n",
      "deep.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("deep.yaml:1: YAML nested deeper than the parser's "
                        "limit of 2000 levels"));
  // A control character (a NUL: a binary file) is named at its line.
  c = ParseConfig(std::string("seed: 1\ndata: \0\n", 16), "nul.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "nul.yaml:2: malformed YAML: control character 0x00 (not a text "
            "file?)");
  // UTF-16 (its byte-order mark): said so, not decoded into other
  // characters.
  c = ParseConfig(std::string("\xFF\xFEseed: 1\n"), "u16.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "u16.yaml:1: malformed YAML: UTF-16 text (save it as UTF-8)");
  c = ParseConfig(std::string("\xFF\xFE\0\0s\0\0\0", 8), "u32.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "u32.yaml:1: malformed YAML: UTF-32 text (save it as UTF-8)");
  // Lines ending in CR LF or a lone CR count as lines.
  c = ParseConfig(std::string("seed: 1\r\ndata: 2\rmodel: \x01\n", 26),
                  "cr.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "cr.yaml:3: malformed YAML: control character 0x01 (not a text "
            "file?)");
  // A complex key is no config key.
  c = ParseConfig("? [a, b]\n: 1\n", "k.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "k.yaml:1: [a, b]: a key must be a name, not a list or a mapping");
}

TEST(ConfigTest, BadOverrides) {
  auto c = ParseConfig("", "j.yaml", {"optimizer.lr=0.1"});
  EXPECT_EQ(Message(c.status()),
            "--set optimizer.lr=0.1: optimizer.lr: unknown key for optimizer "
            "momentum");
  c = ParseConfig("", "j.yaml", {"seed"});
  EXPECT_THAT(Message(c.status()), HasSubstr("expected KEY=VALUE"));
  c = ParseConfig("", "j.yaml", {"seed=[1"});
  EXPECT_THAT(Message(c.status()), HasSubstr("seed: malformed YAML"));
  // A key the file does not have, made by a --set that goes through it.
  c = ParseConfig("data: {name: synthetic}\n", "j.yaml", {"data.nope.a=1"});
  EXPECT_EQ(Message(c.status()).rfind("--set data.nope.a=1: data.nope: ", 0),
            0u)
      << Message(c.status());
  // A trailing dot names no key.
  c = ParseConfig("", "j.yaml", {"seed.=5"});
  EXPECT_EQ(Message(c.status()), "--set seed.=5: seed.: empty key");
}

// helper-79's findings: each was a crash or a silently different config.
TEST(ConfigTest, AliasesNullSectionsTagsAndNulsAreRefused) {
  // An alias inside the node it names: a list holding itself (a stack
  // overflow in the key check before), also as a key and from --set.
  auto c = ParseConfig("seed: &a [*a]\n", "cyc.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("cyc.yaml:1: seed[0][0]"));
  EXPECT_THAT(Message(c.status()),
              HasSubstr("YAML nested deeper than 2000 levels through aliases"));
  c = ParseConfig("&a [*a]: 1\n", "key.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("through aliases"));
  c = ParseConfig("", "j.yaml", {"model.hidden_units=&a [*a]"});
  EXPECT_THAT(Message(c.status()), HasSubstr("through aliases"));
  // A --set of a value an alias shares would change every use of it.
  const std::string shared =
      "train: {epochs: 1, log_every_steps: &n 100}\n"
      "checkpoint: {every_steps: *n}\n";
  c = ParseConfig(shared, "s.yaml", {"train.log_every_steps=1"});
  EXPECT_EQ(Message(c.status()),
            "--set train.log_every_steps=1: train.log_every_steps is shared "
            "through a YAML alias with checkpoint.every_steps, which setting "
            "it would change too (write the value out in the file instead of "
            "the alias)");
  c = ParseConfig(
      "model:\n  layers: [&h {type: dense, units: 8}, *h, "
      "{type: dense, units: 10}]\n",
      "h.yaml", {"model.layers[0].units=4"});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("model.layers[0] is shared through a YAML alias with "
                        "model.layers[1]"));
  c = ParseConfig(shared, "s.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->checkpoint.every_steps, 100);
  // A key set inside a section the file made null (`ema:` is EMA off).
  c = ParseConfig("ema:\n", "e.yaml", {"ema.evaluate_raw=false"});
  EXPECT_EQ(Message(c.status()),
            "--set ema.evaluate_raw=false: ema is null; set it whole (--set "
            "ema={...}) to give it keys");
  c = ParseConfig("", "e.yaml", {"ema=null", "ema.use_num_updates=false"});
  EXPECT_THAT(Message(c.status()), HasSubstr("ema is null"));
  // So is one inside a null list entry (which was made a mapping).
  c = ParseConfig("model:\n  layers:\n    - {type: flatten}\n    -\n", "l.yaml",
                  {"model.layers[1].type=dense"});
  EXPECT_EQ(Message(c.status()),
            "--set model.layers[1].type=dense: model.layers[1] is null; set it "
            "whole (--set model.layers[1]={...}) to give it keys");
  // A core-schema tag is the scalar's type.
  c = ParseConfig("train: {epochs: !!float 5}\n", "t.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("t.yaml:1: train.epochs: expected an integer"));
  c = ParseConfig("data: {shuffle: !!int true}\n", "t.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("data.shuffle: expected true"));
  c = ParseConfig("train: {epochs: !!int 5}\n", "t.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.epochs, 5);
  c = ParseConfig("optimizer: {learning_rate: !!int 0.5}\n", "t.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("optimizer.learning_rate: expected a number"));
  for (const char* rate : {"!!int 1", "!!float 1", "!!float 0.5"}) {
    c = ParseConfig(absl::StrCat("optimizer: {learning_rate: ", rate, "}\n"),
                    "t.yaml", {});
    EXPECT_TRUE(c.ok()) << rate << ": " << c.status();
  }
  // No path holds a NUL (it opened the path's first part).
  c = ParseConfig("checkpoint: {restore: \"a\\0b\"}\n", "n.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "n.yaml:1: checkpoint.restore: expected a string, got 'a\\x00b' "
            "(quoted: a string)");
  // A preset's lists are bounded as layer lists are.
  std::string units = "1";
  for (int i = 0; i < 49999; ++i) units += ",1";
  c = ParseConfig("model: {name: mlp, hidden_units: [" + units + "]}\n",
                  "p.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("model.hidden_units: expected a list of integers in "
                        "[1, 2147483647] (at most 49999), got a list of "
                        "50000"));
  // central_storage's device is one device.
  c = ParseConfig("", "d.yaml",
                  {"distribute.strategy=central_storage",
                   "distribute.variables_device=all_gpus"});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("distribute.variables_device: bad device 'all_gpus'"));
}

// The README's key table is `mirrortrain config --schema`'s output.
TEST(ConfigTest, ReadmeListsTheSchema) {
  std::ifstream in(absl::StrCat(MT_SOURCE_DIR, "/README.md"));
  std::stringstream readme;
  readme << in.rdbuf();
  const std::string text = readme.str();
  const std::string begin = "<!-- schema begin -->\n";
  const size_t a = text.find(begin);
  const size_t b = text.find("<!-- schema end -->");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(text.substr(a + begin.size(), b - a - begin.size()),
            SchemaMarkdown())
      << "regenerate: build/bin/mirrortrain config --schema";
}

// An empty layer name is no name: the key left out (or null) gives the
// Keras auto-name, an empty string is an error.
TEST(ConfigTest, EmptyLayerNameIsAnError) {
  auto c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten, name: ''}\n"
      "    - {type: dense, units: 10}\n",
      "n.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "n.yaml:3: model.layers[0].name: empty (leave it out, or null, "
            "for the Keras auto-name)");
  c = ParseConfig(
      "model:\n  layers:\n    - {type: flatten, name: null}\n"
      "    - {type: dense, units: 10}\n",
      "n.yaml", {});
  EXPECT_TRUE(c.ok()) << c.status();
}

// Variable names are the layer names joined by '/': a '/' in a name would
// make one layer's variables look like another's (Keras 3 refuses it too).
TEST(ConfigTest, LayerNamesTakeNoSlashOrControlCharacters) {
  const auto parse = [](absl::string_view name) {
    return Message(
        ParseConfig(absl::StrCat("model:\n  layers:\n    - {type: flatten}\n"
                                 "    - {type: dense, units: 10, name: \"",
                                 name, "\"}\n"),
                    "n.yaml", {})
            .status());
  };
  EXPECT_EQ(parse("head/out"),
            "n.yaml:4: model.layers[1].name: 'head/out' has the character "
            "'/' (a layer name may not contain '/' or control characters)");
  EXPECT_EQ(parse("a\\tb"),
            "n.yaml:4: model.layers[1].name: 'a\\tb' has the character "
            "'\\t' (a layer name may not contain '/' or control characters)");
  EXPECT_EQ(parse("a\\x7f.b"),
            "n.yaml:4: model.layers[1].name: 'a\\x7f.b' has the character "
            "'\\x7f' (a layer name may not contain '/' or control "
            "characters)");
  EXPECT_EQ(parse("head.out-1 \\u00e9"), "");
}

TEST(ConfigTest, LayerListsNestAndReportPaths) {
  auto c = ParseConfig(
      "model:\n"
      "  layers:\n"
      "    - {type: conv2d, filters: 4, kernel_size: 3, padding: same}\n"
      "    - type: residual\n"
      "      repeat: 2\n"
      "      layers:\n"
      "        - {type: conv2d, filters: 4, kernel_size: 3, padding: same}\n"
      "    - {type: flatten}\n"
      "    - {type: dense, units: 10}\n",
      "m.yaml", {"model.layers[3].units=10"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->model.layers.size(), 4u);
  EXPECT_EQ(c->model.preset, "");
  EXPECT_EQ(c->model.layers[1].repeat, 2);
  EXPECT_EQ(c->model.layers[1].layers[0].params.Int("filters"), 4);
  EXPECT_EQ(c->model.layers[0].params.String("activation"), "linear");
  // The resolved YAML reads back to the same config.
  auto again = ParseConfig(c->resolved_yaml, "again.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << c->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);

  // Keras's (height, width) pairs read, and read back, as written.
  c = ParseConfig(
      "model:\n  input_shape: [28, 28, 1]\n  layers:\n"
      "    - {type: conv2d, filters: 2, kernel_size: [1, 7], strides: [2, 1]}\n"
      "    - {type: max_pooling2d, pool_size: [3, 2]}\n"
      "    - {type: flatten}\n    - {type: dense, units: 10}\n",
      "pairs.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.layers[0].params.IntPair("kernel_size"),
            (std::array<int64_t, 2>{1, 7}));
  EXPECT_EQ(c->model.layers[0].params.IntPair("strides"),
            (std::array<int64_t, 2>{2, 1}));
  EXPECT_EQ(c->model.layers[1].params.IntPair("pool_size"),
            (std::array<int64_t, 2>{3, 2}));
  EXPECT_FALSE(c->model.layers[1].params.OptionalIntPair("strides"));
  again = ParseConfig(c->resolved_yaml, "again.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << c->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);
  EXPECT_NE(c->resolved_yaml.find("kernel_size: [1, 7]"), std::string::npos)
      << c->resolved_yaml;

  // Keras's ((top, bottom), (left, right)) sides read flat, and the flat
  // form they resolve to reads back the same.
  c = ParseConfig(
      "model:\n  input_shape: [8, 8, 1]\n  layers:\n"
      "    - {type: zero_padding2d, padding: [[0, 1], [2, 3]]}\n"
      "    - {type: cropping2d, cropping: [1, [2, 0]]}\n"
      "    - {type: flatten}\n    - {type: dense, units: 10}\n",
      "sides.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.layers[0].params.IntBox("padding"),
            (std::array<int64_t, 4>{0, 1, 2, 3}));
  // Keras's mixed form: an integer for both sides of one axis.
  EXPECT_EQ(c->model.layers[1].params.IntBox("cropping"),
            (std::array<int64_t, 4>{1, 1, 2, 0}));
  again = ParseConfig(c->resolved_yaml, "again.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << c->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);
  EXPECT_NE(c->resolved_yaml.find("padding: [0, 1, 2, 3]"), std::string::npos)
      << c->resolved_yaml;

  // Layer lists that are wrong, and the one line each gets.
  const std::vector<std::pair<std::string, std::string>> bad_layers = {
      {"model:\n  layers:\n    - type: residual\n      layers:\n"
       "        - {type: conv2d, filters: abc, kernel_size: 3}\n",
       "m.yaml:5: model.layers[0].layers[0].filters: expected an integer in "
       "[1, 2147483647], got abc"},
      // Keras's (height, width) pairs: two integers in range.
      {"model:\n  layers:\n    - {type: conv2d, filters: 2, kernel_size: "
       "[1, 3, 3]}\n",
       "m.yaml:3: model.layers[0].kernel_size: expected an integer or a list "
       "of 2 integers in [1, 2147483647], got [1, 3, 3]"},
      // Sides: an integer, two, or two pairs (or four flat), in range.
      {"model:\n  layers:\n    - {type: zero_padding2d, padding: [[1], "
       "[2, 3]]}\n",
       "m.yaml:3: model.layers[0].padding: expected an integer, a list of 2 "
       "or 4, or 2 lists of 2 integers in [0, 1048576], got [[1], [2, 3]]"},
      {"model:\n  layers:\n    - {type: cropping2d, cropping: [1, 2, 3]}\n",
       "m.yaml:3: model.layers[0].cropping: expected an integer, a list of 2 "
       "or 4, or 2 lists of 2 integers in [0, 1048576], got [1, 2, 3]"},
      {"model:\n  layers:\n    - {type: cropping2d, cropping: [[0, -1], "
       "[0, 0]]}\n",
       "m.yaml:3: model.layers[0].cropping: expected an integer, a list of 2 "
       "or 4, or 2 lists of 2 integers in [0, 1048576], got [0, -1, 0, 0]"},
      {"model:\n  layers:\n    - {type: max_pooling2d, strides: [2, 0]}\n",
       "m.yaml:3: model.layers[0].strides: expected an integer or a list of 2 "
       "integers in [1, 2147483647], or null, got [2, 0]"},
      {"model:\n  layers:\n    - {type: dense, units: 3, kernel_initializer: "
       "he}\n",
       "m.yaml:3: model.layers[0].kernel_initializer: unknown value 'he' "
       "(expected one of glorot_uniform, glorot_normal, he_uniform, he_normal, "
       "lecun_uniform, lecun_normal, zeros, ones, orthogonal)"},
      {"model:\n  layers:\n    - {type: flatten, units: 3}\n",
       "m.yaml:3: model.layers[0].units: unknown key for layer type flatten"},
      // A softmax on the output layer (inside a container) with layers
      // behind it that pass values on: Keras's loss then reads the
      // probabilities, which the logits cannot stand for.
      {"model:\n  layers:\n    - {type: flatten}\n    - type: sequential\n"
       "      layers:\n        - {type: dense, units: 10, activation: "
       "softmax}\n        - {type: dropout, rate: 0.1}\n"
       "    - {type: reshape, target_shape: [10]}\n",
       "m.yaml:6: model.layers[1].layers[0].activation: softmax on the output "
       "layer, then a reshape (model.layers[2]): the loss takes the logits "
       "before the softmax, which must make the model's output; put it last"},
      {"model:\n  layers:\n    - {type: flatten}\n"
       "    - {type: activation, activation: softmax}\n"
       "    - {type: dropout, rate: 0.1}\n",
       "m.yaml:4: model.layers[1].activation: softmax on the output layer, "
       "then a dropout (model.layers[2]): the loss takes the logits before "
       "the softmax, which must make the model's output; put it last"},
      // Permute can move the class axis; repeat_vector repeats the
      // probabilities: a softmax before either is refused as before a
      // reshape.
      {"model:\n  input_shape: [4, 3]\n  layers:\n"
       "    - {type: dense, units: 10, activation: softmax}\n"
       "    - {type: permute, dims: [2, 1]}\n",
       "m.yaml:4: model.layers[0].activation: softmax on the output layer, "
       "then a permute (model.layers[1]): the loss takes the logits before "
       "the softmax, which must make the model's output; put it last"},
      {"model:\n  input_shape: [4]\n  layers:\n"
       "    - {type: dense, units: 10, activation: softmax}\n"
       "    - {type: repeat_vector, n: 2}\n",
       "m.yaml:4: model.layers[0].activation: softmax on the output layer, "
       "then a repeat_vector (model.layers[1]): the loss takes the logits "
       "before the softmax, which must make the model's output; put it "
       "last"},
      {"model:\n  layers:\n    - {type: residual}\n",
       "m.yaml:3: model.layers[0].layers: required: layer type residual holds "
       "a list of layers"},
  };
  for (const auto& [yaml, message] : bad_layers) {
    c = ParseConfig(yaml, "m.yaml", {});
    EXPECT_EQ(Message(c.status()), message);
  }
  c = ParseConfig("model:\n  name: mlp\n  layers: [{type: flatten}]\n",
                  "m.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("model.name: give either a preset name or layers"));
  c = ParseConfig("model:\n  layers: []\n", "m.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("model.layers: expected a non-empty list of layers"));
  // A name inside a repeated container would be given once per copy: said
  // at the named layer, with the repeat that causes it.
  c = ParseConfig(
      "model:\n  layers:\n    - type: residual\n      repeat: 2\n"
      "      layers:\n        - {type: dense, units: 4, name: c}\n",
      "m.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "m.yaml:6: model.layers[0].layers[0].name: a layer inside a "
            "repeated entry cannot have a fixed name (model.layers[0] has "
            "repeat: 2)");
  // Nested repeats multiply: refused before anything is built.
  const std::string nested =
      "model:\n  layers:\n    - type: sequential\n      repeat: 10000\n"
      "      layers:\n        - {type: activation, activation: relu, "
      "repeat: ";
  c = ParseConfig(nested + "9}\n", "m.yaml", {});
  EXPECT_TRUE(c.ok()) << c.status();  // 10 000 x (1 + 9): the most.
  for (const char* inner : {"10}\n", "10000}\n"}) {
    c = ParseConfig(nested + inner, "m.yaml", {});
    EXPECT_EQ(Message(c.status()),
              "m.yaml:3: model.layers: expands to more than 100000 layers "
              "(repeat multiplies)");
  }
}

TEST(ConfigTest, EveryComponentsDefaultsResolve) {
  // Each registered optimizer, schedule and data source with its defaults.
  for (const char* set :
       {"optimizer={name: sgd}", "optimizer={name: momentum}",
        "optimizer={name: adagrad}", "optimizer={name: adam}",
        "optimizer={name: rmsprop}", "optimizer.schedule={name: constant}",
        "optimizer.schedule={name: exponential_decay}",
        "optimizer.schedule={name: cosine_decay}",
        "optimizer.schedule={name: piecewise_constant, values: [0.1]}",
        "data={name: synthetic}", "model={name: cnn}"}) {
    auto c = ParseConfig("", "d.yaml", {set});
    EXPECT_TRUE(c.ok()) << set << ": " << c.status();
  }
}

TEST(ConfigTest, MissingFile) {
  auto c = LoadConfig("/nonexistent/x.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "/nonexistent/x.yaml: cannot open: No such file or directory");
}

TEST(ConfigTest, DuplicateKeysAndExtraDocumentsAreErrors) {
  auto c = ParseConfig("seed: 1\ndata:\n  shuffle: true\n  shuffle: false\n",
                       "j.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "j.yaml:4: data.shuffle: duplicate key (first at line 3)");
  c = ParseConfig("seed: 1\n---\nseed: 2\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("more than one YAML document"));
  c = ParseConfig("", "j.yaml", {"data={shuffle: true, shuffle: false}"});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("--set data={shuffle: true, shuffle: false}: "
                        "data.shuffle: duplicate key"));
  // yaml-cpp's LoadAll never returns on this.
  c = ParseConfig(",a", "j.yaml", {});
  EXPECT_FALSE(c.ok());
}

TEST(ConfigTest, NullSectionIsAnErrorExceptEmaWhichMeansOff) {
  auto c = ParseConfig("", "j.yaml", {"ema=null"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->ema.decay.has_value());
  c = ParseConfig("ema:\n", "j.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->ema.decay.has_value());
  c = ParseConfig("", "j.yaml", {"train=null"});
  EXPECT_EQ(Message(c.status()),
            "--set train=null: train: expected a mapping of keys, got null "
            "(leave the section out for its defaults)");
  c = ParseConfig("optimizer:\n  schedule:\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr(": optimizer.schedule: expected a mapping"));
}

// A key given as null turns off what it starts, its qualifiers then inert:
// --set turns a config's early stopping or warm start off in one key. Left
// out, a qualifier without it is still an error.
TEST(ConfigTest, NullTurnsOffWhatItsQualifiersQualify) {
  const std::string early =
      "train: {early_stopping_patience: 3, early_stopping_monitor: accuracy, "
      "early_stopping_min_delta: 0.01}\n";
  auto c = ParseConfig(early, "e.yaml", {"train.early_stopping_patience=null"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->train.early_stopping_patience.has_value());
  const std::string warm =
      "checkpoint: {warm_start_from: /some/run, warm_start_vars: 'dense/.*', "
      "warm_start_weights: ema, warm_start_names: {a: dense/kernel}}\n";
  c = ParseConfig(warm, "w.yaml", {"checkpoint.warm_start_from=null"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->checkpoint.warm_start_from.empty());
  // The resolved config, null and qualifiers, reads back the same.
  auto again = ParseConfig(c->resolved_yaml, "config.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);
  c = ParseConfig("train: {early_stopping_min_delta: 0.5}\n", "e.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "e.yaml:1: train.early_stopping_min_delta: set without "
            "train.early_stopping_patience, which it qualifies");
  c = ParseConfig("checkpoint: {warm_start_weights: ema}\n", "w.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "w.yaml:1: checkpoint.warm_start_weights: set without "
            "checkpoint.warm_start_from, which it qualifies");
}

TEST(ConfigTest, MessagesStayOnOneLine) {
  auto c = ParseConfig("\"a\\nb\": 1\n", "j\nk.yaml", {});
  EXPECT_EQ(Message(c.status()), "j\\nk.yaml:1: a\\nb: unknown key");
}

TEST(ConfigTest, SizesAndTheWatchdogHaveBounds) {
  auto c = ParseConfig("model: {hidden_units: [2147483648]}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("j.yaml:1: model.hidden_units: expected a list of "
                        "integers in [1, 2147483647]"));
  c = ParseConfig("distribute: {watchdog_seconds: 0.0009}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("distribute.watchdog_seconds: expected a number in "
                        "[0.001, 1000000]"));
}

TEST(ConfigTest, DataNormalizeAndAugment) {
  auto c = ParseConfig(
      "data:\n  name: synthetic\n"
      "  normalize: {mean: [0.5, 0.25, 0], std: [0.25, 1, 2]}\n"
      "  augment: {random_crop_padding: 4, random_erasing: 0.25,\n"
      "            erasing_scale: [0.05, 0.2]}\n",
      "a.yaml", {"data.augment.horizontal_flip=true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.normalize.mean, (std::vector<double>{0.5, 0.25, 0}));
  EXPECT_EQ(c->data.normalize.stddev, (std::vector<double>{0.25, 1, 2}));
  EXPECT_EQ(c->data.augment.random_crop_padding, 4);
  EXPECT_TRUE(c->data.augment.horizontal_flip);
  EXPECT_EQ(c->data.augment.random_erasing, 0.25);
  EXPECT_EQ(c->data.augment.erasing_scale, (std::array<double, 2>{0.05, 0.2}));
  // torchvision's default.
  EXPECT_EQ(c->data.augment.erasing_ratio, (std::array<double, 2>{0.3, 3.3}));
  // The resolved config reads back to the same.
  auto again = ParseConfig(c->resolved_yaml, "r.yaml", {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data.normalize.stddev, c->data.normalize.stddev);
  EXPECT_EQ(again->resolved_yaml, c->resolved_yaml);

  // Absent: neither.
  c = ParseConfig("", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->data.normalize.enabled());
  EXPECT_FALSE(c->data.augment.enabled());
}

TEST(ConfigTest, BadDataNormalizeAndAugmentNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data: {normalize: {mean: [0.5]}}",
       "b.yaml:1: data.normalize.std: required with mean"},
      {"data: {normalize: {std: [0.5]}}",
       "b.yaml:1: data.normalize.mean: required with std"},
      {"data: {normalize: {mean: [0.5, 0.5], std: [0.5]}}",
       "b.yaml:1: data.normalize.std: has 1 values, mean has 2"},
      {"data: {normalize: {mean: [0.5], std: [0]}}",
       "b.yaml:1: data.normalize.std: "},
      {"data: {normalize: {mean: [], std: []}}",
       "b.yaml:1: data.normalize.mean: "},
      {"data: {normalize: [0.5]}",
       "b.yaml:1: data.normalize: expected a mapping of keys"},
      {"data: {augment: {random_crop_padding: -1}}",
       "b.yaml:1: data.augment.random_crop_padding: "},
      {"data: {augment: {random_erasing: 1.5}}",
       "b.yaml:1: data.augment.random_erasing: "},
      {"data: {augment: {erasing_scale: [0.3, 0.1]}}",
       "b.yaml:1: data.augment.erasing_scale: must be [lo, hi] with lo <= hi, "
       "got [0.3, 0.1]"},
      {"data: {augment: {erasing_ratio: [0.5]}}",
       "b.yaml:1: data.augment.erasing_ratio: must be [lo, hi] with lo <= hi, "
       "got [0.5] (two values needed)"},
      {"data: {augment: {erasing_ratio: [0, 2]}}",
       "b.yaml:1: data.augment.erasing_ratio: "},
      {"data: {augment: {vertical_flip: true}}",
       "b.yaml:1: data.augment.vertical_flip: unknown key"},
      {"data: {name: cifar10}", "b.yaml:1: data.dir: required"},
      {"data: {name: npz, path: x.npz, num_classes: 0}",
       "b.yaml:1: data.num_classes: "},
  };
  for (const auto& [yaml, expected] : cases) {
    auto c = ParseConfig(yaml + "\n", "b.yaml", {});
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_THAT(Message(c.status()), HasSubstr(expected)) << yaml;
  }
}

}  // namespace
}  // namespace mirrortrain::trainer
