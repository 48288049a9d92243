// Early stopping on a test metric, after Keras's EarlyStopping callback
// (keras.callbacks.EarlyStopping, mode "auto", no baseline): after each of
// the run's scheduled evaluations, the monitored value is an improvement
// when it beats the best so far by more than min_delta (the first one
// always is); `wait` counts the evaluations since the best, and training
// stops after an evaluation that did not improve once wait >= patience.
// (So patience 0 and 1 both stop at the first evaluation without
// improvement, as in Keras 3.) Values compare in double; a NaN never
// improves.
//
// The state travels in checkpoint metadata, so a resumed run decides as an
// uninterrupted one, and a run that stopped is finished when run again
// (unless a larger patience lets it go on).
//
// Thread contract: not synchronised; the training loop's thread only.
#ifndef MIRRORTRAIN_TRAINER_EARLY_STOPPING_H_
#define MIRRORTRAIN_TRAINER_EARLY_STOPPING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace mirrortrain::trainer {

class EarlyStopping {
 public:
  struct Options {
    int64_t patience = 0;
    bool maximize = false;  // accuracy; loss is minimised.
    double min_delta = 0;   // >= 0.
    // What is watched, e.g. "EMA test loss": a checkpoint's state of
    // another watch is not taken over.
    std::string watch;
  };

  explicit EarlyStopping(const Options& options) : options_(options) {}

  // The monitored value of the evaluation at `step`; true when training
  // stops after it.
  bool Update(double value, int64_t step);
  // Whether the last Update (or the restored state) stopped training.
  bool stopped() const { return wait_ > 0 && wait_ >= options_.patience; }

  const std::optional<double>& best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  int64_t wait() const { return wait_; }

  const Options& options() const { return options_; }

  // Adds the state to a checkpoint's metadata (keys early_stopping_*).
  void Save(std::map<std::string, std::string>& metadata) const;
  // The state a checkpoint's metadata holds (`path` names it in errors),
  // or the initial state when it holds none (a run without early stopping)
  // or one of another (or no named) watch, which *note then says (else it
  // is emptied).
  static absl::StatusOr<EarlyStopping> Restored(
      const Options& options,
      const std::map<std::string, std::string>& metadata,
      const std::string& path, std::string* note);

 private:
  Options options_;
  std::optional<double> best_;
  int64_t best_step_ = 0;
  int64_t wait_ = 0;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_EARLY_STOPPING_H_
