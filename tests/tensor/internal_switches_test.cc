// Internal switches: parsed from "name=on|off" lists, all checked before
// any is set; every registered switch is documented in the README.
#include "tensor/internal_switches.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mirrortrain {
namespace {

// Switches of this test binary alone.
int test_a = -1, test_b = -1;
MT_REGISTER(InternalSwitch, {.name = "test_switch_a",
                             .doc = "a test's",
                             .set = [](bool on) { test_a = on; }});
MT_REGISTER(InternalSwitch, {.name = "test_switch_b",
                             .doc = "a test's",
                             .set = [](bool on) { test_b = on; }});
// One that counts its path's calls.
int64_t test_c_calls = 0;
MT_REGISTER(InternalSwitch, {.name = "test_switch_c",
                             .doc = "a test's",
                             .set = [](bool) {},
                             .calls = [] { return test_c_calls; }});

TEST(InternalSwitchesTest, SetsEachNamedSwitchAndSaysWhat) {
  test_a = test_b = -1;
  absl::StatusOr<std::string> applied =
      ApplyInternalSwitches(" test_switch_a=off, ,test_switch_b = on,");
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, "test_switch_a=off, test_switch_b=on");
  EXPECT_EQ(test_a, 0);
  EXPECT_EQ(test_b, 1);
  EXPECT_EQ(*ApplyInternalSwitches(""), "");
  EXPECT_EQ(*ApplyInternalSwitches(" , ,"), "");
}

TEST(InternalSwitchesTest, ABadItemSetsNothing) {
  test_a = test_b = -1;
  absl::StatusOr<std::string> applied =
      ApplyInternalSwitches("test_switch_a=on,no_such_switch=on");
  EXPECT_EQ(applied.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(applied.status().message().find("unknown switch 'no_such_switch' "
                                            "(known: "),
            std::string::npos)
      << applied.status();
  EXPECT_NE(applied.status().message().find("test_switch_b"),
            std::string::npos);
  applied = ApplyInternalSwitches("test_switch_b=on,test_switch_a=yes");
  EXPECT_EQ(applied.status().message(),
            "switch 'test_switch_a': expected on or off, got 'yes'");
  applied = ApplyInternalSwitches("test_switch_a");
  EXPECT_EQ(applied.status().message(),
            "switch 'test_switch_a': expected on or off, got ''");
  applied = ApplyInternalSwitches("test_switch_b=on, =on");
  EXPECT_EQ(applied.status().message(), "'=on' names no switch");
  applied = ApplyInternalSwitches("test_switch_a=on,test_switch_a=off");
  EXPECT_EQ(applied.status().message(),
            "switch 'test_switch_a' is given twice");
  EXPECT_EQ(test_a, -1);
  EXPECT_EQ(test_b, -1);
}

// Only switches that were applied and count their calls are reported,
// each once however often it was applied, with the count when asked.
TEST(InternalSwitchesTest, ReportsTheCallsOfAppliedSwitchesThatCountThem) {
  EXPECT_EQ(InternalSwitchCalls().find("test_switch_c"), std::string::npos);
  ASSERT_TRUE(ApplyInternalSwitches("test_switch_a=on").ok());
  EXPECT_EQ(InternalSwitchCalls(), "");
  ASSERT_TRUE(ApplyInternalSwitches("test_switch_c=on").ok());
  ASSERT_TRUE(ApplyInternalSwitches("test_switch_c=off").ok());
  test_c_calls = 0;
  EXPECT_EQ(InternalSwitchCalls(), "test_switch_c: 0 calls");
  test_c_calls = 12;
  EXPECT_EQ(InternalSwitchCalls(), "test_switch_c: 12 calls");
}

TEST(InternalSwitchesTest, TheReadmeNamesEverySwitch) {
  std::ifstream f(absl::StrCat(MT_SOURCE_DIR, "/README.md"));
  std::stringstream readme;
  readme << f.rdbuf();
  for (const InternalSwitch* s : Registry<InternalSwitch>::Global().Entries()) {
    if (s->name.rfind("test_", 0) == 0) continue;
    EXPECT_NE(readme.str().find(absl::StrCat("`", s->name, "`")),
              std::string::npos)
        << s->name;
  }
}

}  // namespace
}  // namespace mirrortrain
