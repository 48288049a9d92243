// metrics.jsonl: one line per logged record, appended; a resumed run drops
// the lines an interrupted run logged after its checkpoint.
#include "trainer/metrics_logger.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
  // A resume with nothing after it appends.
  {
    auto logger = MetricsLogger::Create(dir, 24);
    ASSERT_TRUE(logger.ok()) << logger.status();
  }
  EXPECT_EQ(Lines(testing::ReadFile(path)).size(), 4u);
  // A fresh run (train starts one only where no checkpoint is: the lines
  // are from a run that ended before its first) starts the file over.
  {
    auto logger = MetricsLogger::Create(dir);
    ASSERT_TRUE(logger.ok()) << logger.status();
    ASSERT_TRUE((*logger)->Log(Train(8, 0.75)).ok());
  }
  EXPECT_EQ(Lines(testing::ReadFile(path)),
            std::vector<std::string>{ToJson(Train(8, 0.75))});
  std::filesystem::remove_all(dir);
}

// A write torn by a crash or a full disk leaves part of a line: a resume
// drops it (and any other line not of ours), so the file stays JSON lines.
TEST(MetricsLoggerTest, TornLinesAreDropped) {
  const std::string dir = testing::FreshTestDir("metrics_logger_test");
  const std::string path = dir + "/metrics.jsonl";
  const std::string whole = ToJson(Train(8, 0.5));
  for (const std::string& torn :
       {std::string("{\""), std::string("{\"step\": 3"),
        whole.substr(0, whole.size() - 1), std::string("junk")}) {
    SCOPED_TRACE(torn);
    // In the middle (a torn write, then a restart that appended) and last.
    testing::WriteBytes(path, absl::StrCat(whole, "\n", torn, "\n",
                                           ToJson(Train(16, 0.5)), "\n", torn));
    {
      auto logger = MetricsLogger::Create(dir, 16);
      ASSERT_TRUE(logger.ok()) << logger.status();
      ASSERT_TRUE((*logger)->Log(Train(24, 0.25)).ok());
    }
    EXPECT_EQ(Lines(testing::ReadFile(path)),
              (std::vector<std::string>{whole, ToJson(Train(16, 0.5)),
                                        ToJson(Train(24, 0.25))}));
  }
  // A whole last line that lost only its newline keeps its record.
  testing::WriteBytes(path, whole);
  {
    auto logger = MetricsLogger::Create(dir, 8);
    ASSERT_TRUE(logger.ok()) << logger.status();
    ASSERT_TRUE((*logger)->Log(Train(16, 0.25)).ok());
  }
  EXPECT_EQ(testing::ReadFile(path),
            absl::StrCat(whole, "\n", ToJson(Train(16, 0.25)), "\n"));
  // A fresh run starts over from junk too.
  testing::WriteBytes(path, "junk line\n" + whole + "\n");
  {
    auto logger = MetricsLogger::Create(dir);
    ASSERT_TRUE(logger.ok()) << logger.status();
  }
  EXPECT_EQ(testing::ReadFile(path), "");
  // Something that is not a file is said so.
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  auto logger = MetricsLogger::Create(dir);
  EXPECT_EQ(logger.status().message(), path + ": not a regular file");
  std::filesystem::remove_all(dir);
}

// A rerun of a finished run evaluates its last step again: the new records
// replace the old ones, the training lines stay.
TEST(MetricsLoggerTest, EvaluationsAtAStepAreReplaced) {
  const std::string dir = testing::FreshTestDir("metrics_logger_test");
  const MetricsRecord raw = {16, 1, "test", "raw", {{"accuracy", 0.25}}};
  const MetricsRecord ema = {16, 1, "test", "ema", {{"accuracy", 0.5}}};
  const MetricsRecord early = {8, 0, "test", "raw", {{"accuracy", 0.125}}};
  {
    auto logger = MetricsLogger::Create(dir);
    ASSERT_TRUE(logger.ok()) << logger.status();
    for (const MetricsRecord& r :
         {Train(8, 0.5), early, Train(16, 0.5), raw, ema}) {
      ASSERT_TRUE((*logger)->Log(r).ok());
    }
  }
  auto logger = MetricsLogger::Create(dir, 16);
  ASSERT_TRUE(logger.ok()) << logger.status();
  ASSERT_TRUE((*logger)->DropEvaluationsAt(16).ok());
  ASSERT_TRUE((*logger)->Log(raw).ok());
  ASSERT_TRUE((*logger)->Log(ema).ok());
  EXPECT_EQ(Lines(testing::ReadFile(dir + "/metrics.jsonl")),
            (std::vector<std::string>{ToJson(Train(8, 0.5)), ToJson(early),
                                      ToJson(Train(16, 0.5)), ToJson(raw),
                                      ToJson(ema)}));
  logger->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mirrortrain::trainer
