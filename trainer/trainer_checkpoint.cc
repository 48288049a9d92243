// The Trainer's checkpointing: what a checkpoint holds (replica 0's state,
// global_step, the input position and the config hash) and how a run is
// restored into every replica.
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/checkpoint_format.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/saver.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {

absl::Status Trainer::MaybeRestoreForTraining() {
  const std::string& restore = config_.checkpoint.restore;
  if (restore == "none") return absl::OkStatus();
  if (restore == "latest") {
    if (run_dir_.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> latest =
        LatestCheckpoint(absl::StrCat(run_dir_, "/checkpoints"));
    // No checkpoint yet: a fresh run.
    if (absl::IsNotFound(latest.status())) return absl::OkStatus();
    MT_RETURN_IF_ERROR(latest.status());
    return RestoreCheckpoint(*latest);
  }
  return RestoreCheckpoint(restore);
}

absl::Status Trainer::RestoreCheckpoint(const std::string& path_or_dir) {
  MT_ASSIGN_OR_RETURN(std::string path, ResolveCheckpoint(path_or_dir));
  MT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  MT_ASSIGN_OR_RETURN(
      const CheckpointPosition position,
      CheckTrainingCheckpoint(file, config_.checkpoint.allow_non_finite));
  const int64_t step = position.step;
  const int64_t input_epoch = position.input_epoch;
  const int64_t input_batch = position.input_batch;
  // Restored once into replica 0 (all checks before any assignment), then
  // mirrored to the other replicas.
  MT_RETURN_IF_ERROR(Saver(ReplicaState(0)).Restore(path));
  for (distribute::MirroredVariable& v : mirrored_) {
    MT_ASSIGN_OR_RETURN(Tensor value, v.value().Clone());
    MT_RETURN_IF_ERROR(v.AssignAll(value));
  }
  for (Replica& r : replicas_) r.optimizer->set_iterations(step);
  if (train_iterator_) {
    absl::Status seek = train_iterator_->Seek({input_epoch, input_batch});
    if (!seek.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": input position (epoch ", input_epoch, ", batch ",
          input_batch, ") does not fit this config's data: ", seek.message()));
    }
  }
  auto hash = file.metadata().find("config_hash");
  if (hash != file.metadata().end() &&
      hash->second != absl::StrCat(config_.hash) && progress_ == nullptr) {
    std::fprintf(stderr,
                 "mirrortrain: note: %s was written with a different config\n",
                 path.c_str());
  }
  restored_from_ = path;
  last_saved_step_ = step;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Trainer::SaveCheckpoint() {
  if (run_dir_.empty()) {
    return absl::FailedPreconditionError(
        "SaveCheckpoint: this trainer has no run directory");
  }
  const int64_t step = global_step();
  MT_ASSIGN_OR_RETURN(
      Variable global_step,
      Variable::Create("global_step", Tensor::Scalar<int64_t>(step),
                       /*trainable=*/false));
  std::vector<Variable*> vars = ReplicaState(0);
  vars.push_back(&global_step);
  const BatchIterator::Position pos = train_iterator_->position();
  const int64_t steps_per_epoch = train_iterator_->BatchesPerEpoch();
  const std::map<std::string, std::string> metadata = {
      {"format", std::string(kCheckpointFormat)},
      {"step", absl::StrCat(step)},
      {"epoch", absl::StrCat(step / steps_per_epoch)},
      {"input_epoch", absl::StrCat(pos.epoch)},
      {"input_batch", absl::StrCat(pos.batch)},
      // All randomness (init, shuffling, dropout) is a pure function of the
      // seed and the step/epoch counters, so this is the whole RNG state.
      {"rng",
       absl::StrCat("counter-based; seed ", config_.seed, ", step ", step)},
      {"seed", absl::StrCat(config_.seed)},
      {"config_hash", absl::StrCat(config_.hash)},
      {"replicas", absl::StrCat(num_replicas())},
  };
  MT_ASSIGN_OR_RETURN(
      std::string path,
      Saver(vars).Save(absl::StrCat(run_dir_, "/checkpoints"), step, metadata,
                       static_cast<int>(config_.checkpoint.max_to_keep)));
  last_saved_step_ = step;
  return path;
}

}  // namespace mirrortrain::trainer
