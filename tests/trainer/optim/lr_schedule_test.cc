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

namespace mirrortrain::trainer {
namespace {

const std::map<std::string, Tensor>& Golden() {
  return testing::CachedGolden("ema_schedules.txt");
}

// The settings scripts/golden/ema_schedules.py gave Keras.
std::map<std::string, ScheduleOptions> GoldenSchedules() {
  std::map<std::string, ScheduleOptions> out;
  ScheduleOptions exp;
  exp.name = "exponential_decay";
  exp.learning_rate = 0.1;
  exp.decay_steps = 100;
  exp.decay_rate = 0.5;
  out["exponential_decay"] = exp;
  exp.staircase = true;
  out["exponential_decay_staircase"] = exp;
  ScheduleOptions pw;
  pw.name = "piecewise_constant";
  pw.boundaries = {100, 500};
  pw.values = {0.1, 0.01, 0.001};
  out["piecewise_constant"] = pw;
  ScheduleOptions cos;
  cos.name = "cosine_decay";
  cos.learning_rate = 0.1;
  cos.decay_steps = 1000;
  cos.alpha = 0.05;
  out["cosine_decay"] = cos;
  cos.alpha = 0;
  cos.warmup_steps = 100;
  out["cosine_decay_warmup"] = cos;
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
    auto schedule = MakeSchedule(it->second);
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
  EXPECT_EQ(checked, 5);
  std::printf("[ golden   ] schedules: max rel diff vs Keras %.3g\n", worst);
}

TEST(LrScheduleTest, ConstantIgnoresTheStep) {
  ScheduleOptions o;
  o.learning_rate = 0.05;
  auto s = MakeSchedule(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 0.05);
  EXPECT_EQ((**s)(123456), 0.05);
}

TEST(LrScheduleTest, PiecewiseBoundaryStaysInTheEarlierInterval) {
  ScheduleOptions o;
  o.name = "piecewise_constant";
  o.learning_rate = -1;  // ignored
  o.boundaries = {10, 20};
  o.values = {3, 2, 1};
  auto s = MakeSchedule(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 3);
  EXPECT_EQ((**s)(10), 3);
  EXPECT_EQ((**s)(11), 2);
  EXPECT_EQ((**s)(20), 2);
  EXPECT_EQ((**s)(21), 1);
}

TEST(LrScheduleTest, WarmupWrapsAnySchedule) {
  ScheduleOptions o;
  o.name = "exponential_decay";
  o.learning_rate = 0.8;
  o.decay_steps = 10;
  o.decay_rate = 0.5;
  o.staircase = true;
  o.warmup_steps = 4;
  auto s = MakeSchedule(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 0.0);
  EXPECT_EQ((**s)(1), 0.2);
  EXPECT_EQ((**s)(2), 0.4);
  EXPECT_EQ((**s)(4), 0.8);
  EXPECT_EQ((**s)(13), 0.8);
  EXPECT_EQ((**s)(14), 0.4);

  ScheduleOptions c;
  c.learning_rate = 1.0;
  c.warmup_steps = 2;
  auto constant = MakeSchedule(c);
  ASSERT_TRUE(constant.ok());
  EXPECT_EQ((**constant)(1), 0.5);
  EXPECT_EQ((**constant)(2), 1.0);
}

TEST(LrScheduleTest, CosineHoldsAlphaAfterDecaySteps) {
  ScheduleOptions o;
  o.name = "cosine_decay";
  o.learning_rate = 2.0;
  o.decay_steps = 10;
  o.alpha = 0.25;
  auto s = MakeSchedule(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((**s)(0), 2.0);
  EXPECT_DOUBLE_EQ((**s)(5), 2.0 * (0.75 * 0.5 + 0.25));
  EXPECT_EQ((**s)(10), 0.5);
  EXPECT_EQ((**s)(1000), 0.5);
}

void ExpectInvalid(const ScheduleOptions& o, const std::string& message) {
  auto s = MakeSchedule(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(message), std::string::npos)
      << "'" << s.status().message() << "' lacks '" << message << "'";
}

TEST(LrScheduleTest, BadOptionsNameTheKey) {
  ScheduleOptions o;
  o.name = "linear";
  o.learning_rate = 0.1;
  ExpectInvalid(o, "optimizer.schedule.name");
  ExpectInvalid(o,
                "constant, exponential_decay, piecewise_constant, "
                "cosine_decay");

  o = {};
  o.learning_rate = 0;
  ExpectInvalid(o,
                "optimizer.learning_rate must be a finite number > 0, "
                "got 0");
  o.learning_rate = NAN;
  ExpectInvalid(o, "optimizer.learning_rate");

  o = {};
  o.name = "exponential_decay";
  o.learning_rate = 0.1;
  o.decay_rate = 0.5;
  ExpectInvalid(o, "optimizer.schedule.decay_steps must be > 0, got 0");
  o.decay_steps = 10;
  o.decay_rate = 0;
  ExpectInvalid(o, "optimizer.schedule.decay_rate");

  o = {};
  o.name = "cosine_decay";
  o.learning_rate = 0.1;
  o.decay_steps = -5;
  ExpectInvalid(o, "optimizer.schedule.decay_steps must be > 0, got -5");
  o.decay_steps = 5;
  o.alpha = 1.5;
  ExpectInvalid(o, "optimizer.schedule.alpha");

  o = {};
  o.name = "piecewise_constant";
  o.boundaries = {10, 20};
  o.values = {1, 2};
  ExpectInvalid(o,
                "optimizer.schedule.values must have one more entry than "
                "optimizer.schedule.boundaries");
  o.values = {1, 2, 3};
  o.boundaries = {20, 20};
  ExpectInvalid(o,
                "optimizer.schedule.boundaries must be strictly "
                "increasing, got [20, 20]");
  o.boundaries = {10, 20};
  o.values = {1, -2, 3};
  ExpectInvalid(o, "optimizer.schedule.values[1]");

  o = {};
  o.learning_rate = 0.1;
  o.warmup_steps = -1;
  ExpectInvalid(o, "optimizer.schedule.warmup_steps must be >= 0, got -1");
}

}  // namespace
}  // namespace mirrortrain::trainer
