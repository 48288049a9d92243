// Learning-rate schedules against Keras (tests/golden/ema_schedules.txt,
// written by scripts/golden/ema_schedules.py), plus option validation.
#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/optim/build_optimizer.h"

namespace mirrortrain::trainer {
namespace {

const std::map<std::string, Tensor>& Golden() {
  return testing::CachedGolden("ema_schedules.txt");
}

// The settings scripts/golden/ema_schedules.py gave Keras.
struct Spec {
  std::string name;
  double learning_rate;
  testing::Values values;
};

absl::StatusOr<std::unique_ptr<LearningRateSchedule>> Make(const Spec& spec) {
  return testing::BuildSchedule(spec.name, spec.learning_rate, spec.values);
}

std::map<std::string, Spec> GoldenSchedules() {
  using V = std::vector<int64_t>;
  using D = std::vector<double>;
  std::map<std::string, Spec> out;
  const testing::Values exp = {{"decay_steps", 100}, {"decay_rate", 0.5}};
  out["exponential_decay"] = {"exponential_decay", 0.1, exp};
  testing::Values stair = exp;
  stair.push_back({"staircase", true});
  out["exponential_decay_staircase"] = {"exponential_decay", 0.1, stair};
  out["piecewise_constant"] = {
      "piecewise_constant",
      0.1,
      {{"boundaries", V{100, 500}}, {"values", D{0.1, 0.01, 0.001}}}};
  out["cosine_decay"] = {
      "cosine_decay", 0.1, {{"decay_steps", 1000}, {"alpha", 0.05}}};
  out["cosine_decay_warmup"] = {
      "cosine_decay",
      0.1,
      {{"decay_steps", 1000}, {"alpha", 0.0}, {"warmup_steps", 100}}};
  out["polynomial_decay"] = {
      "polynomial_decay",
      0.1,
      {{"decay_steps", 1000}, {"end_learning_rate", 0.001}, {"power", 0.5}}};
  out["polynomial_decay_cycle"] = {"polynomial_decay",
                                   0.1,
                                   {{"decay_steps", 300},
                                    {"end_learning_rate", 0.01},
                                    {"power", 2.0},
                                    {"cycle", true}}};
  const testing::Values inverse = {{"decay_steps", 100}, {"decay_rate", 0.5}};
  out["inverse_time_decay"] = {"inverse_time_decay", 0.1, inverse};
  testing::Values inverse_stair = inverse;
  inverse_stair.push_back({"staircase", true});
  out["inverse_time_decay_staircase"] = {"inverse_time_decay", 0.1,
                                         inverse_stair};
  out["cosine_decay_restarts"] = {"cosine_decay_restarts",
                                  0.1,
                                  {{"first_decay_steps", 200},
                                   {"t_mul", 2.0},
                                   {"m_mul", 0.8},
                                   {"alpha", 0.1}}};
  out["cosine_decay_restarts_even"] = {"cosine_decay_restarts",
                                       0.1,
                                       {{"first_decay_steps", 200},
                                        {"t_mul", 1.0},
                                        {"m_mul", 1.0},
                                        {"alpha", 0.1}}};
  return out;
}

TEST(LrScheduleGoldenTest, EveryScheduleInTheFileMatchesKeras) {
  const auto& g = Golden();
  ASSERT_FALSE(g.empty()) << "cannot load "
                          << testing::GoldenPath("ema_schedules.txt");
  const Tensor& steps = g.at("sched/steps");
  const auto schedules = GoldenSchedules();
  int checked = 0;
  double worst = 0;
  for (const auto& [name, tensor] : g) {
    if (name.rfind("sched/", 0) != 0 || name == "sched/steps") continue;
    const std::string kind = name.substr(6);
    auto it = schedules.find(kind);
    ASSERT_NE(it, schedules.end()) << "no settings for golden " << name;
    auto schedule = Make(it->second);
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    ASSERT_EQ(tensor.num_elements(), steps.num_elements());
    for (int64_t i = 0; i < steps.num_elements(); ++i) {
      const int64_t step = steps.data<int64_t>()[i];
      const double want = tensor.data<double>()[i];
      const double got = (**schedule)(step);
      const double diff = std::abs(got - want);
      if (want != 0) worst = std::max(worst, diff / std::abs(want));
      // Within 2 ulp; in practice the values agree exactly.
      EXPECT_LE(diff, 4.5e-16 * std::abs(want))
          << name << " at step " << step << ": " << got << " vs Keras " << want;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 11);
  std::printf("[ golden   ] schedules: max rel diff vs Keras %.3g\n", worst);
}

TEST(LrScheduleTest, ConstantIgnoresTheStep) {
  auto s = Make({"constant", 0.05, {}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 0.05);
  EXPECT_EQ((**s)(123456), 0.05);
}

TEST(LrScheduleTest, PiecewiseBoundaryStaysInTheEarlierInterval) {
  auto s = Make({"piecewise_constant",
                 7.0,  // ignored
                 {{"boundaries", std::vector<int64_t>{10, 20}},
                  {"values", std::vector<double>{3, 2, 1}}}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 3);
  EXPECT_EQ((**s)(10), 3);
  EXPECT_EQ((**s)(11), 2);
  EXPECT_EQ((**s)(20), 2);
  EXPECT_EQ((**s)(21), 1);
}

TEST(LrScheduleTest, WarmupWrapsAnySchedule) {
  auto s = Make({"exponential_decay",
                 0.8,
                 {{"decay_steps", 10},
                  {"decay_rate", 0.5},
                  {"staircase", true},
                  {"warmup_steps", 4}}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 0.0);
  EXPECT_EQ((**s)(1), 0.2);
  EXPECT_EQ((**s)(2), 0.4);
  EXPECT_EQ((**s)(4), 0.8);
  EXPECT_EQ((**s)(13), 0.8);
  EXPECT_EQ((**s)(14), 0.4);

  auto constant = Make({"constant", 1.0, {{"warmup_steps", 2}}});
  ASSERT_TRUE(constant.ok());
  EXPECT_EQ((**constant)(1), 0.5);
  EXPECT_EQ((**constant)(2), 1.0);
}

TEST(LrScheduleTest, CosineHoldsAlphaAfterDecaySteps) {
  auto s = Make({"cosine_decay", 2.0, {{"decay_steps", 10}, {"alpha", 0.25}}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 2.0);
  EXPECT_DOUBLE_EQ((**s)(5), 2.0 * (0.75 * 0.5 + 0.25));
  EXPECT_EQ((**s)(10), 0.5);
  EXPECT_EQ((**s)(1000), 0.5);
}

void ExpectInvalid(const Spec& spec, const std::string& message) {
  auto s = Make(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(message), std::string::npos)
      << "'" << s.status().message() << "' lacks '" << message << "'";
}

TEST(LrScheduleTest, BadOptionsNameTheKey) {
  using V = std::vector<int64_t>;
  using D = std::vector<double>;
  ExpectInvalid({"linear", 0.1, {}}, "optimizer.schedule.name");
  ExpectInvalid({"linear", 0.1, {}},
                "constant, cosine_decay, cosine_decay_restarts, "
                "exponential_decay, inverse_time_decay, piecewise_constant, "
                "polynomial_decay");
  ExpectInvalid({"inverse_time_decay", 0.1, {}},
                "optimizer.schedule.decay_rate");
  ExpectInvalid({"cosine_decay_restarts", 0.1, {{"t_mul", 0.5}}},
                "optimizer.schedule.t_mul: expected a number >= 1, got 0.5");
  ExpectInvalid({"polynomial_decay", 0.1, {{"power", -1.0}}},
                "optimizer.schedule.power");
  ExpectInvalid({"constant", 0, {}},
                "optimizer.learning_rate: expected a number > 0, got 0");
  ExpectInvalid({"constant", NAN, {}}, "optimizer.learning_rate");
  ExpectInvalid({"exponential_decay", 0.1, {{"decay_steps", 0}}},
                "optimizer.schedule.decay_steps: expected an integer >= 1, "
                "got 0");
  ExpectInvalid({"exponential_decay", 0.1, {{"decay_rate", 0.0}}},
                "optimizer.schedule.decay_rate");
  ExpectInvalid({"cosine_decay", 0.1, {{"decay_steps", -5}}},
                "optimizer.schedule.decay_steps: expected an integer >= 1, "
                "got -5");
  ExpectInvalid({"cosine_decay", 0.1, {{"alpha", 1.5}}},
                "optimizer.schedule.alpha");
  ExpectInvalid(
      {"piecewise_constant",
       0.1,
       {{"boundaries", V{10, 20}}, {"values", D{1, 2}}}},
      "optimizer.schedule.values: must have one more entry than boundaries");
  ExpectInvalid({"piecewise_constant",
                 0.1,
                 {{"boundaries", V{20, 20}}, {"values", D{1, 2, 3}}}},
                "optimizer.schedule.boundaries: must be strictly increasing, "
                "got [20, 20]");
  ExpectInvalid({"piecewise_constant",
                 0.1,
                 {{"boundaries", V{10, 20}}, {"values", D{1, -2, 3}}}},
                "optimizer.schedule.values: expected a list of numbers >= 0");
  ExpectInvalid({"constant", 0.1, {{"warmup_steps", -1}}},
                "optimizer.schedule.warmup_steps: expected an integer >= 0, "
                "got -1");
}

}  // namespace
}  // namespace mirrortrain::trainer
