// metrics.jsonl: one line per logged record, appended; a resumed run drops
// the lines an interrupted run logged after its checkpoint.
#include "trainer/metrics_logger.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mirrortrain::trainer {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

MetricsRecord Train(int64_t step, double loss) {
  return {step, step / 16, "train", "", {{"loss", loss}}};
}

TEST(MetricsLoggerTest, AResumeDropsTheLinesAfterItsStep) {
  const std::string dir = testing::FreshTestDir("metrics_logger_test");
  const std::string path = dir + "/metrics.jsonl";
  {
    auto logger = MetricsLogger::Create(dir);
    ASSERT_TRUE(logger.ok()) << logger.status();
    for (int64_t step : {8, 16, 24, 32}) {
      ASSERT_TRUE((*logger)->Log(Train(step, 0.5)).ok());
    }
    ASSERT_TRUE(
        (*logger)->Log({16, 1, "test", "raw", {{"accuracy", 0.25}}}).ok());
  }
  ASSERT_EQ(Lines(testing::ReadFile(path)).size(), 5u);
  {
    // Resumed from the checkpoint of step 16: 24 and 32 are logged again.
    auto logger = MetricsLogger::Create(dir, 16);
    ASSERT_TRUE(logger.ok()) << logger.status();
    ASSERT_TRUE((*logger)->Log(Train(24, 0.25)).ok());
  }
  EXPECT_EQ(Lines(testing::ReadFile(path)),
            (std::vector<std::string>{
                ToJson(Train(8, 0.5)), ToJson(Train(16, 0.5)),
                ToJson({16, 1, "test", "raw", {{"accuracy", 0.25}}}),
                ToJson(Train(24, 0.25))}));
  // A fresh run (no resume) and a resume with nothing after it append.
  {
    auto logger = MetricsLogger::Create(dir, 24);
    ASSERT_TRUE(logger.ok()) << logger.status();
  }
  EXPECT_EQ(Lines(testing::ReadFile(path)).size(), 4u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mirrortrain::trainer
