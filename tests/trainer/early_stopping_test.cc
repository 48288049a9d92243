// EarlyStopping against Keras's callback (scripts/golden/early_stopping.py),
// and its state's round trip through checkpoint metadata.
#include "trainer/early_stopping.h"

#include <cmath>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mirrortrain::trainer {
namespace {

// Feeds `values` (evaluation i at step 10 * (i + 1)) until it stops;
// returns the evaluation it stopped after, or -1. With `resume_at` >= 0 the
// state goes through metadata into a new object before that evaluation.
int64_t StopsAfter(const EarlyStopping::Options& options, const Tensor& values,
                   int64_t* best_evaluation, int64_t resume_at = -1) {
  EarlyStopping e(options);
  for (int64_t i = 0; i < values.num_elements(); ++i) {
    if (i == resume_at) {
      std::map<std::string, std::string> metadata = {{"step", "1"}};
      e.Save(metadata);
      std::string note;
      absl::StatusOr<EarlyStopping> resumed =
          EarlyStopping::Restored(options, metadata, "ckpt", &note);
      EXPECT_TRUE(resumed.ok()) << resumed.status();
      EXPECT_EQ(note, "");
      if (resumed.ok()) e = *resumed;
    }
    const bool stop = e.Update(values.ScalarAt(i), 10 * (i + 1));
    EXPECT_EQ(stop, e.stopped());
    if (stop) {
      *best_evaluation = e.best_step() / 10 - 1;
      return i;
    }
  }
  *best_evaluation = e.best_step() / 10 - 1;
  return -1;
}

TEST(EarlyStoppingTest, StopsWhereKerasDoes) {
  absl::StatusOr<std::map<std::string, Tensor>> golden =
      testing::LoadGolden(testing::GoldenPath("early_stopping.txt"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  int cases = 0, stopped = 0;
  for (const auto& [name, values] : *golden) {
    if (!absl::EndsWith(name, "/values")) continue;
    const std::string tag = name.substr(0, name.size() - 7);
    SCOPED_TRACE(tag);
    const EarlyStopping::Options options{
        .patience =
            static_cast<int64_t>(golden->at(tag + "/patience").ScalarAt(0)),
        .maximize = absl::StrContains(tag, "/accuracy/"),
        .min_delta = golden->at(tag + "/min_delta").ScalarAt(0)};
    const int64_t want = golden->at(tag + "/stop").ScalarAt(0);
    const int64_t want_best = golden->at(tag + "/best").ScalarAt(0);
    int64_t best = -2;
    EXPECT_EQ(StopsAfter(options, values, &best), want);
    EXPECT_EQ(best, want_best);
    // Resumed from a checkpoint between any two evaluations: the same.
    for (int64_t at = 1; at < values.num_elements(); ++at) {
      EXPECT_EQ(StopsAfter(options, values, &best, at), want) << at;
    }
    ++cases;
    stopped += want >= 0;
  }
  EXPECT_EQ(cases, 64);
  EXPECT_GT(stopped, 10);
  EXPECT_LT(stopped, cases);
}

// A NaN never improves, and goes through metadata as a NaN; a checkpoint
// without the state gives the initial one, one of another watch too (with
// a note); bad metadata is named.
TEST(EarlyStoppingTest, NanAnotherWatchAndBadMetadata) {
  const EarlyStopping::Options options{.patience = 2, .watch = "test loss"};
  EarlyStopping e(options);
  EXPECT_FALSE(e.Update(std::nan(""), 5));
  EXPECT_FALSE(e.Update(1.0, 10));
  EXPECT_TRUE(e.Update(0.5, 15));
  EXPECT_EQ(e.best_step(), 5);
  std::map<std::string, std::string> metadata;
  e.Save(metadata);
  std::string note;
  absl::StatusOr<EarlyStopping> back =
      EarlyStopping::Restored(options, metadata, "c", &note);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->best().has_value() && std::isnan(*back->best()));
  EXPECT_EQ(back->wait(), 2);
  EXPECT_TRUE(back->stopped());
  back = EarlyStopping::Restored(options, {{"step", "10"}}, "c", &note);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->best().has_value());
  EXPECT_EQ(note, "");
  EarlyStopping::Options accuracy = options;
  accuracy.maximize = true;
  accuracy.watch = "EMA test accuracy";
  back = EarlyStopping::Restored(accuracy, metadata, "c", &note);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->stopped());
  EXPECT_FALSE(back->best().has_value());
  EXPECT_EQ(note,
            "c watched the test loss; early stopping starts afresh on the EMA "
            "test accuracy");
  std::map<std::string, std::string> bad = metadata;
  bad["early_stopping_best_step"] = "x";
  EXPECT_EQ(EarlyStopping::Restored(options, bad, "c.safetensors", &note)
                .status()
                .message(),
            "c.safetensors: metadata early_stopping_best_step: 'x' is not an "
            "integer >= 0");
  bad = {{"early_stopping_best", "1.5"}};
  EXPECT_EQ(EarlyStopping::Restored(options, bad, "c.safetensors", &note)
                .status()
                .message(),
            "c.safetensors: metadata has early_stopping_best but no "
            "early_stopping_best_step");
}

}  // namespace
}  // namespace mirrortrain::trainer
