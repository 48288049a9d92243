// CheckTrainingCheckpoint: the format versions, the position metadata, the
// global_step tensor and non-finite values.
#include "trainer/checkpoint/checkpoint_format.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/safetensors.h"

namespace mirrortrain::trainer {
namespace {

using ::testing::HasSubstr;

class CheckpointFormatTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir("ckpt_format_test"); }

  // A well-formed mirrortrain/2 checkpoint at step 12, with `edit` applied
  // to its metadata and `weights` as its only variable.
  absl::StatusOr<SafetensorsFile> Write(
      const std::map<std::string, std::string>& edit,
      Tensor weights = Tensor::FromVector<float>({1, 2}, {2}),
      Tensor global_step = Tensor::Scalar<int64_t>(12)) {
    std::vector<NamedTensor> tensors = {{"dense/kernel", weights},
                                        {"global_step", global_step}};
    std::map<std::string, std::string> metadata = {
        {"format", std::string(kCheckpointFormat)},
        {"step", "12"},
        {"input_epoch", "1"},
        {"input_batch", "2"},
        {std::string(kDataCrc32cKey), *TensorDataCrc32c(tensors)}};
    for (const auto& [key, value] : edit) {
      if (value == "<erase>") {
        metadata.erase(key);
      } else {
        metadata[key] = value;
      }
    }
    const std::string path =
        absl::StrCat(dir_, "/ckpt-", files_++, ".safetensors");
    absl::Status s = WriteSafetensors(path, tensors, metadata);
    if (!s.ok()) return s;
    return SafetensorsFile::Open(path);
  }

  // The error CheckTrainingCheckpoint gives (empty when it accepts).
  std::string Problem(const absl::StatusOr<SafetensorsFile>& file,
                      bool allow_non_finite = false) {
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return "";
    absl::StatusOr<CheckpointPosition> p =
        CheckTrainingCheckpoint(*file, allow_non_finite);
    if (p.ok()) return "";
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()),
                ::testing::StartsWith(file->path() + ": "));
    return std::string(p.status().message());
  }

  std::string dir_;
  int files_ = 0;
};

TEST_F(CheckpointFormatTest, AcceptsAWellFormedCheckpoint) {
  absl::StatusOr<SafetensorsFile> file = Write({});
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<CheckpointPosition> p = CheckTrainingCheckpoint(*file, false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 12);
  EXPECT_EQ(p->input_epoch, 1);
  EXPECT_EQ(p->input_batch, 2);
  // Files written before the batch size was recorded have none.
  EXPECT_EQ(p->input_batch_size, std::nullopt);
  absl::StatusOr<SafetensorsFile> sized = Write({{"input_batch_size", "64"}});
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(CheckTrainingCheckpoint(*sized, false)->input_batch_size, 64);
}

// mirrortrain/1 predates the checksum and still loads without one.
TEST_F(CheckpointFormatTest, VersionOneLoadsWithoutAChecksum) {
  EXPECT_EQ(Problem(Write({{"format", "mirrortrain/1"},
                           {std::string(kDataCrc32cKey), "<erase>"}})),
            "");
  EXPECT_THAT(Problem(Write({{std::string(kDataCrc32cKey), "<erase>"}})),
              HasSubstr("format mirrortrain/2 without its 'data_crc32c' "
                        "checksum"));
}

TEST_F(CheckpointFormatTest, RejectsUnknownOrMissingFormats) {
  EXPECT_THAT(Problem(Write({{"format", "mirrortrain/3"}})),
              HasSubstr("unknown checkpoint format 'mirrortrain/3' (this "
                        "build reads mirrortrain/2 and mirrortrain/1)"));
  EXPECT_THAT(Problem(Write({{"format", "<erase>"}})),
              HasSubstr("metadata 'format' is missing"));
}

TEST_F(CheckpointFormatTest, RejectsNegativeAbsurdOrMalformedPositions) {
  const std::string max = absl::StrCat(kMaxCheckpointStep);
  struct Case {
    std::string key, value, reason;
  };
  const std::vector<Case> cases = {
      {"step", "-1", "metadata 'step' is -1, outside [0, " + max + "]"},
      {"step", "9223372036854775807",
       "metadata 'step' is 9223372036854775807, outside [0, " + max + "]"},
      {"step", "12.5", "metadata 'step' is missing or not an integer"},
      {"step", "<erase>", "metadata 'step' is missing or not an integer"},
      {"input_epoch", "-3", "metadata 'input_epoch' is -3, outside"},
      {"input_batch", "x",
       "metadata 'input_batch' is missing or not an "
       "integer"},
      {"input_batch_size", "0", "metadata 'input_batch_size' is 0"},
      {"input_batch_size", "-64", "metadata 'input_batch_size' is -64"},
      {"input_batch_size", "64.0",
       "metadata 'input_batch_size' is missing or not an integer"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Problem(Write({{c.key, c.value}})), HasSubstr(c.reason))
        << c.key << "=" << c.value;
  }
}

TEST_F(CheckpointFormatTest, StepMustEqualTheGlobalStepTensor) {
  EXPECT_THAT(Problem(Write({{"step", "13"}})),
              HasSubstr("metadata 'step' is 13 but the 'global_step' tensor "
                        "holds 12"));
  EXPECT_THAT(Problem(Write({}, Tensor::FromVector<float>({1, 2}, {2}),
                            Tensor::FromVector<int64_t>({12, 12}, {2}))),
              HasSubstr("'global_step' is i64[2], not an int64 scalar"));
  EXPECT_THAT(Problem(Write({}, Tensor::FromVector<float>({1, 2}, {2}),
                            Tensor::Scalar<float>(12))),
              HasSubstr("'global_step' is f32[], not an int64 scalar"));
}

TEST_F(CheckpointFormatTest, NonFiniteValuesAreRejectedUnlessAllowed) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    absl::StatusOr<SafetensorsFile> file =
        Write({}, Tensor::FromVector<float>({1, bad, 3}, {3}));
    EXPECT_THAT(Problem(file),
                HasSubstr("'dense/kernel' holds 1 NaN or infinite of 3 values; "
                          "set checkpoint.allow_non_finite=true"))
        << bad;
    EXPECT_EQ(Problem(file, /*allow_non_finite=*/true), "") << bad;
  }
  const double nan = std::nan("");
  EXPECT_THAT(Problem(Write({}, Tensor::FromVector<double>({nan, nan}, {2}))),
              HasSubstr("'dense/kernel' holds 2 NaN or infinite of 2 values"));
}

}  // namespace
}  // namespace mirrortrain::trainer
