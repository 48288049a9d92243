// metrics.jsonl: one line per logged record, appended; a resumed run drops
// the lines an interrupted run logged after its checkpoint.
#include "trainer/metrics_logger.h"

#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/escaping.h"
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

// The event files in `dir`.
std::set<std::string> EventFiles(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0) out.insert(e.path());
  }
  return out;
}

// The second record of a TFRecord file (the first is the file version),
// after its Event's wall_time (key 0x09 and 8 bytes), in hex.
std::string SecondEventAfterWallTime(const std::string& path) {
  const std::string file = testing::ReadFile(path);
  uint64_t first = 0, second = 0;
  std::memcpy(&first, file.data(), 8);
  const size_t at = 12 + first + 4;
  std::memcpy(&second, file.data() + at, 8);
  return absl::BytesToHexString(file.substr(at + 12 + 9, second - 9));
}

// Each event file starts with a SessionLog START at the step its run
// continues from (TensorBoard then drops what earlier files hold from
// there on, as metrics.jsonl dropped those lines): 0 for a fresh run, the
// checkpoint's step + 1 for a resumed one.
TEST(MetricsLoggerTest, EventFilesStartWhereTheRunContinues) {
  const std::string dir = testing::FreshTestDir("metrics_logger_test");
  std::set<std::string> before;
  for (const std::optional<int64_t> resumed_at :
       {std::optional<int64_t>(), std::optional<int64_t>(16)}) {
    auto logger = MetricsLogger::Create(dir, resumed_at);
    ASSERT_TRUE(logger.ok()) << logger.status();
    std::set<std::string> now = EventFiles(dir), added;
    absl::c_set_difference(now, before, std::inserter(added, added.end()));
    ASSERT_EQ(added.size(), 1u);
    // Event{step, session_log{status: START}}: step 0 (the writer keeps
    // the zero field), then step 17.
    EXPECT_EQ(SecondEventAfterWallTime(*added.begin()),
              resumed_at ? "10113a020801" : "10003a020801");
    before = now;
  }
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
