#include "trainer/signals.h"

#include <atomic>
#include <csignal>

namespace mirrortrain::trainer {
namespace {

std::atomic<int> stop_signal{0};

// The first stop signal received is the one reported (lock-free, so safe
// in a handler).
extern "C" void OnStopSignal(int sig) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
}

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  // Once: a second Ctrl-C (or SIGTERM) ends the process at once, as the
  // default action does, when the graceful stop takes too long.
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal or SSH session.
  sigaction(SIGHUP, &sa, nullptr);
  // The reader of our output gone (a `| tee` killed): the write fails with
  // EPIPE and the run stops as for SIGTERM, with its checkpoint. Every
  // later write to the pipe raises it again: it stays handled.
  struct sigaction pipe = {};
  pipe.sa_handler = OnStopSignal;
  sigemptyset(&pipe.sa_mask);
  sigaction(SIGPIPE, &pipe, nullptr);
}

int StopSignal() { return stop_signal.load(std::memory_order_relaxed); }

void RecordStopSignal(int sig) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
}

}  // namespace mirrortrain::trainer
