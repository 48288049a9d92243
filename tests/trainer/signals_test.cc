#include "trainer/signals.h"

#include <csignal>
#include <cstdlib>

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

// SIGHUP is a stop signal as SIGINT is; SIGPIPE too, and it stays handled
// (every write to the closed pipe raises it again) without replacing the
// first signal recorded.
TEST(SignalsTest, HangUpAndBrokenPipeStopTheRun) {
  // Each child runs this test alone from the start: the signal the test
  // above recorded in this process is not there.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallStopSignalHandlers();
        std::raise(SIGPIPE);
        std::raise(SIGPIPE);
        std::raise(SIGHUP);  // The first signal is the one reported.
        std::_Exit(StopSignal() == SIGPIPE ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        InstallStopSignalHandlers();
        std::raise(SIGHUP);
        std::_Exit(StopSignal() == SIGHUP ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace mirrortrain::trainer
