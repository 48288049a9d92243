// Progress reporting on stderr: a redrawn bar (step, epoch, loss,
// samples/s, ETA) when stderr is a terminal, plain periodic lines otherwise.
#ifndef MIRRORTRAIN_TRAINER_PROGRESS_H_
#define MIRRORTRAIN_TRAINER_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace mirrortrain::trainer {

class Progress {
 public:
  // `total_steps` for the ETA; `log_every` is the plain-line period.
  // `silent`: prints nothing (processes other than a job's chief).
  Progress(int64_t total_steps, int64_t steps_per_epoch, int64_t log_every,
           bool silent = false);

  // After each step. `loss` is the mean since the last logged step, and the
  // epoch shown the epochs completed: a plain line says what the
  // metrics.jsonl line of its step says.
  void Update(int64_t step, double loss, double samples_per_sec);
  // A line that must not be overwritten (evaluations, warnings).
  void Message(const std::string& line);
  void Finish();

 private:
  void Draw(int64_t step, double loss, double samples_per_sec);

  bool silent_;
  bool tty_;
  int64_t total_steps_;
  int64_t steps_per_epoch_;
  int64_t log_every_;
  bool bar_visible_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t first_step_ = -1;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_PROGRESS_H_
