#include "trainer/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace mirrortrain::trainer {
namespace {

std::string FormatDuration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600)
    return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

Progress::Progress(int64_t total_steps, int64_t steps_per_epoch,
                   int64_t log_every, bool silent)
    : silent_(silent),
      tty_(isatty(STDERR_FILENO) != 0),
      total_steps_(total_steps),
      steps_per_epoch_(std::max<int64_t>(steps_per_epoch, 1)),
      log_every_(std::max<int64_t>(log_every, 1)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::Update(int64_t step, double loss, double samples_per_sec) {
  if (first_step_ < 0) {
    first_step_ = step - 1;
    start_ = std::chrono::steady_clock::now();
  }
  if (silent_) return;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    // Redraw at most ~10 times a second, and always at the last step.
    if (now - last_draw_ < std::chrono::milliseconds(100) &&
        step != total_steps_) {
      return;
    }
    last_draw_ = now;
    Draw(step, loss, samples_per_sec);
  } else if (step % log_every_ == 0 || step == total_steps_) {
    Draw(step, loss, samples_per_sec);
  }
}

void Progress::Draw(int64_t step, double loss, double samples_per_sec) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  const int64_t done = step - first_step_;
  const double eta =
      done > 0 ? elapsed / done * static_cast<double>(total_steps_ - step) : 0;
  const int64_t epoch = step / steps_per_epoch_;
  std::string stats = absl::StrFormat(
      "step %d/%d epoch %d loss %.4f %.0f samples/s ETA %s", step, total_steps_,
      epoch, loss, samples_per_sec, FormatDuration(eta));
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(
        kWidth * std::min<double>(1.0, static_cast<double>(step) /
                                           std::max<int64_t>(total_steps_, 1)));
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stderr, "\r[%s] %s\033[K", bar.c_str(), stats.c_str());
    bar_visible_ = true;
  } else {
    std::fprintf(stderr, "%s\n", stats.c_str());
  }
  std::fflush(stderr);
}

void Progress::Message(const std::string& line) {
  if (silent_) return;
  if (bar_visible_) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "%s\n", line.c_str());
  bar_visible_ = false;
  std::fflush(stderr);
}

void Progress::Finish() {
  if (bar_visible_) std::fputs("\n", stderr);
  bar_visible_ = false;
}

}  // namespace mirrortrain::trainer
