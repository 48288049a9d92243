#include "trainer/signals.h"

#include <atomic>
#include <csignal>

namespace mirrortrain::trainer {
namespace {

std::atomic<int> stop_signal{0};

extern "C" void OnStopSignal(int sig) {
  stop_signal.store(sig, std::memory_order_relaxed);
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
}

int StopSignal() { return stop_signal.load(std::memory_order_relaxed); }

void RecordStopSignal(int sig) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
}

}  // namespace mirrortrain::trainer
