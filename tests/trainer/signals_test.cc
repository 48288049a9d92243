#include "trainer/signals.h"

#include <csignal>

#include "gtest/gtest.h"

namespace mirrortrain::trainer {
namespace {

// The first SIGINT is recorded for a graceful stop; the handler is then
// gone, so a second one ends the process (the default action).
TEST(SignalsTest, TheFirstSignalIsRecordedAndTheSecondIsTheDefault) {
  InstallStopSignalHandlers();
  struct sigaction installed = {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &installed), 0);
  EXPECT_NE(installed.sa_handler, SIG_DFL);
  ASSERT_EQ(std::raise(SIGINT), 0);
  EXPECT_EQ(StopSignal(), SIGINT);
  struct sigaction after = {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, SIG_DFL);
  // SIGTERM's handler is still there, for its own first time.
  struct sigaction term = {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &term), 0);
  EXPECT_NE(term.sa_handler, SIG_DFL);
  EXPECT_EXIT(std::raise(SIGINT), ::testing::KilledBySignal(SIGINT), "");
}

}  // namespace
}  // namespace mirrortrain::trainer
