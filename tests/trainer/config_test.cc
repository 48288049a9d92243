#include "trainer/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mirrortrain::trainer {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ConfigTest, DefaultsApplyToAnEmptyFile) {
  auto c = ParseConfig("", "empty.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.global_batch_size, 128);
  EXPECT_EQ(c->model.preset, "mlp");
  EXPECT_EQ(c->model.preset_params.IntList("hidden_units"),
            (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(c->optimizer.name, "momentum");
  EXPECT_DOUBLE_EQ(*c->ema.decay, 0.999);
  EXPECT_FALSE(c->optimizer.clip_global_norm.has_value());
  EXPECT_EQ(c->distribute.devices, (std::vector<std::string>{"cpu:0"}));
  EXPECT_EQ(c->name, "empty");
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

TEST(ConfigTest, PrecisionIsFp32UnlessTf32IsAsked) {
  auto c = ParseConfig("seed: 1\n", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision, "fp32");
  c = ParseConfig("precision: tf32\n", "a.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision, "tf32");
  c = ParseConfig("precision: fp16\n", "a.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(c.status()), HasSubstr("precision"));
  EXPECT_THAT(Message(c.status()), HasSubstr("fp16"));
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  auto c =
      ParseConfig("seed: 1\noptimizer:\n  learning_rat: 0.1\n", "j.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(c.status()),
            "j.yaml:3: optimizer.learning_rat: unknown key for optimizer "
            "momentum");
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
}

TEST(ConfigTest, OutOfRangeAndUnknownNames) {
  auto c = ParseConfig("optimizer: {learning_rate: -1}\n", "j.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "j.yaml:1: optimizer.learning_rate: expected a number > 0, got -1");
  c = ParseConfig("optimizer: {name: lion}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("optimizer.name: unknown value 'lion'"));
  c = ParseConfig("model: {name: resnet}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()), HasSubstr("model.name: unknown value"));
  c = ParseConfig("model: {dropout: 1.0}\n", "j.yaml", {});
  EXPECT_THAT(Message(c.status()),
              HasSubstr("model.dropout: expected a number in [0, 1), got 1"));
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
}

TEST(ConfigTest, MalformedYaml) {
  auto c = ParseConfig("data: [1, 2\nseed: 3\n", "bad.yaml", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(c.status()), HasSubstr("bad.yaml:"));
  EXPECT_THAT(Message(c.status()), HasSubstr("malformed YAML"));
}

TEST(ConfigTest, BadOverrides) {
  auto c = ParseConfig("", "j.yaml", {"optimizer.lr=0.1"});
  EXPECT_EQ(Message(c.status()),
            "--set optimizer.lr=0.1: optimizer.lr: unknown key for optimizer "
            "momentum");
  c = ParseConfig("", "j.yaml", {"seed"});
  EXPECT_THAT(Message(c.status()), HasSubstr("expected KEY=VALUE"));
  c = ParseConfig("", "j.yaml", {"seed=[1"});
  EXPECT_THAT(Message(c.status()), HasSubstr("value is not YAML"));
}

TEST(ConfigTest, MissingFile) {
  auto c = LoadConfig("/nonexistent/x.yaml", {});
  EXPECT_EQ(Message(c.status()),
            "/nonexistent/x.yaml: cannot read config file");
}

}  // namespace
}  // namespace mirrortrain::trainer
