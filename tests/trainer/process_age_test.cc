#include "trainer/process_age.h"

#include <gtest/gtest.h>

#include <optional>

namespace mirrortrain::trainer {
namespace {

TEST(StartTicksFromStatTest, ReadsTheTwentySecondField) {
  // A real line's shape: pid, (comm), then fields 3 to 52.
  EXPECT_EQ(StartTicksFromStat("4242 (mirrortrain) S 1 4242 4242 0 -1 4194560 "
                               "120 0 0 0 3 1 0 0 20 0 5 0 987654 1000 200"),
            987654u);
}

TEST(StartTicksFromStatTest, CommandNamesMayHoldSpacesAndParentheses) {
  EXPECT_EQ(StartTicksFromStat("7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 "
                               "0 1 0 31337 0"),
            31337u);
}

TEST(StartTicksFromStatTest, RejectsMalformedLines) {
  EXPECT_EQ(StartTicksFromStat(""), std::nullopt);
  EXPECT_EQ(StartTicksFromStat("12 no name R 1 2 3"), std::nullopt);
  // Too few fields after the name.
  EXPECT_EQ(StartTicksFromStat("12 (x) R 1 2 3 4 5"), std::nullopt);
  // The start time is not a number.
  EXPECT_EQ(StartTicksFromStat("7 (x) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 "
                               "0 soon 0"),
            std::nullopt);
}

TEST(ProcessAgeSecondsTest, IsThisTestProcessAgeOnLinux) {
#ifdef __linux__
  const std::optional<double> age = ProcessAgeSeconds();
  ASSERT_TRUE(age.has_value());
  // A tick of rounding either way; a test binary runs for minutes at most.
  EXPECT_GT(*age, -0.02);
  EXPECT_LT(*age, 600.0);
  // It grows with the process.
  const std::optional<double> later = ProcessAgeSeconds();
  ASSERT_TRUE(later.has_value());
  EXPECT_GE(*later, *age);
#else
  GTEST_SKIP() << "ProcessAgeSeconds reads /proc/self/stat (Linux only)";
#endif
}

}  // namespace
}  // namespace mirrortrain::trainer
