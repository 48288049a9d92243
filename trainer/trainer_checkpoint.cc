// The Trainer's checkpointing: what a checkpoint holds (the training state:
// replica 0's, the central copy or the parameter servers' gathered,
// global_step, the input position and the config hash), how a run is
// restored into every replica, and which runs may use a run directory's
// checkpoints (only its continuation).
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/checkpoint_dir.h"
#include "trainer/checkpoint/checkpoint_format.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/saver.h"
#include "trainer/checkpoint/warm_start.h"
#include "trainer/one_line.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {

namespace {

namespace fs = std::filesystem;

constexpr char kStartOver[] =
    "to start over, train into a new --run_dir with --set "
    "checkpoint.restore=none";

// `s` saying how to start over: a restore that fails never falls back to a
// fresh start by itself.
absl::Status WithStartOver(const absl::Status& s) {
  return absl::Status(s.code(),
                      absl::StrCat(s.message(), " (", kStartOver, ")"));
}

// `s` named as checkpoint.warm_start_from's (opening or loading it).
absl::Status AsWarmStartError(const absl::Status& s) {
  return absl::Status(
      s.code(), absl::StrCat("checkpoint.warm_start_from: ", s.message()));
}

// A parameter_server checkpoint's batches per worker (`worker_batches`:
// comma-separated counts, one per worker, adding up to the `read` batches
// its input position says; a save derives that from them); nullopt when it
// has none (another strategy wrote it).
absl::StatusOr<std::optional<std::vector<int64_t>>> RecordedWorkerBatches(
    const SafetensorsFile& file, int64_t read) {
  auto it = file.metadata().find("worker_batches");
  if (it == file.metadata().end()) return std::nullopt;
  std::vector<int64_t> batches;
  int64_t sum = 0;
  bool ok = true;
  // Each at most 2^53, as every position a checkpoint holds, and so is
  // their sum (the input position a save derives from them).
  for (absl::string_view part : absl::StrSplit(it->second, ',')) {
    int64_t b = 0;
    ok = ok && !part.empty() && absl::c_all_of(part, absl::ascii_isdigit) &&
         absl::SimpleAtoi(part, &b) && b <= kMaxCheckpointStep;
    sum += ok ? b : 0;
    ok = ok && sum <= kMaxCheckpointStep;
    batches.push_back(b);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": metadata worker_batches '", OneLine(it->second),
        "' is not a count of batches per worker (decimal, adding up to at "
        "most ",
        kMaxCheckpointStep, ")"));
  }
  if (sum != read) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": metadata worker_batches '",
                     absl::StrJoin(batches, ","), "' do not add up to the ",
                     read, " batches its input position says were read"));
  }
  return batches;
}

// Whether the checkpoint file `path` lies directly in the directory `dir`.
bool IsIn(const std::string& path, const std::string& dir) {
  std::error_code path_ec, dir_ec;
  const fs::path file = fs::weakly_canonical(path, path_ec);
  const fs::path directory = fs::weakly_canonical(dir, dir_ec);
  return !path_ec && !dir_ec && file.parent_path() == directory;
}

}  // namespace

std::string Trainer::CheckpointDir() const {
  return absl::StrCat(run_dir_, "/checkpoints");
}

absl::Status Trainer::CheckCheckpointsWritable() const {
  const std::string dir = CheckpointDir();
  std::error_code ec;
  // A directory the user cannot write (not theirs, read-only: EACCES and
  // EPERM, EROFS; a file in the way) is bad input, exit 2, as
  // run_dir_lock.cc treats the run directory; a full disk or an I/O error
  // is not.
  auto users_choice = [](absl::StatusCode code) {
    return code == absl::StatusCode::kPermissionDenied ||
                   code == absl::StatusCode::kFailedPrecondition
               ? absl::StatusCode::kInvalidArgument
               : code;
  };
  const bool existed = fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) {
    const absl::Status s = absl::ErrnoToStatus(
        ec.value(), absl::StrCat(dir, ": cannot create checkpoint directory"));
    return absl::Status(users_choice(s.code()), s.message());
  }
  // The temporary file a save of the largest step makes (the longest name
  // it writes), created as a save creates it and removed unused.
  const absl::Status writable =
      AtomicFileWriter::Create(
          absl::StrCat(dir, "/",
                       CheckpointFileName(std::numeric_limits<int64_t>::max())))
          .status();
  // As found: the first save makes the directory.
  if (!existed) fs::remove(dir, ec);
  if (writable.ok()) return writable;
  return absl::Status(
      users_choice(writable.code()),
      absl::StrCat(dir, ": a checkpoint cannot be written there (",
                   writable.message(), ")"));
}

absl::Status Trainer::PrepareRestoreForTraining() {
  const std::string& restore = config_.checkpoint.restore;
  // A run that restores nothing of its own (config.cc refuses the key
  // beside a checkpoint path).
  auto warm_start = [&]() -> absl::Status {
    const std::string& from = config_.checkpoint.warm_start_from;
    if (from.empty()) return absl::OkStatus();
    absl::StatusOr<CheckedCheckpoint> checkpoint =
        OpenCheckpoint(from, /*weights_only_ok=*/true);
    if (!checkpoint.ok()) return AsWarmStartError(checkpoint.status());
    pending_warm_start_ = *std::move(checkpoint);
    return absl::OkStatus();
  };
  if (run_dir_.empty()) {
    if (restore == "none" || restore == "latest") return warm_start();
    MT_ASSIGN_OR_RETURN(pending_restore_, OpenCheckpoint(restore));
    return absl::OkStatus();
  }
  const std::string dir = CheckpointDir();
  MT_ASSIGN_OR_RETURN(const CheckpointDirContents contents,
                      ScanCheckpointDir(dir));
  const bool holds_checkpoints =
      contents.has_index || !contents.checkpoints.empty();
  // The checkpoint to restore; empty: a fresh start.
  std::string source;
  if (restore == "latest") {
    if (contents.has_index) {
      absl::StatusOr<std::string> latest = LatestCheckpoint(dir);
      if (!latest.ok()) return WithStartOver(latest.status());
      source = *std::move(latest);
    } else if (holds_checkpoints) {
      return WithStartOver(absl::InvalidArgumentError(absl::StrCat(
          dir, " holds ", contents.checkpoints.front(),
          contents.checkpoints.size() > 1
              ? absl::StrCat(" and ", contents.checkpoints.size() - 1,
                             " more checkpoints")
              : "",
          " but no '", CheckpointIndexName(),
          "' index naming the latest, so the run cannot be resumed")));
    }
  } else if (restore != "none") {
    absl::StatusOr<std::string> resolved = ResolveCheckpoint(restore);
    if (!resolved.ok()) {
      // Named as the key; a keyword in other case ("Latest") reads as a
      // path.
      const bool keyword = absl::EqualsIgnoreCase(restore, "latest") ||
                           absl::EqualsIgnoreCase(restore, "none");
      return WithStartOver(absl::Status(
          resolved.status().code(),
          absl::StrCat("checkpoint.restore: ", resolved.status().message(),
                       keyword ? " (the keywords are lower case: latest, "
                                 "none)"
                               : "")));
    }
    source = *std::move(resolved);
  }
  // Only a continuation of the run there may save over its checkpoints.
  if (holds_checkpoints && (source.empty() || !IsIn(source, dir))) {
    return WithStartOver(absl::InvalidArgumentError(absl::StrCat(
        run_dir_, " holds the checkpoints of a run (", dir,
        "), which a run that does not restore from them (checkpoint.restore=",
        restore, ") would overwrite")));
  }
  if (source.empty()) return warm_start();
  absl::StatusOr<CheckedCheckpoint> checkpoint = OpenCheckpoint(source);
  if (!checkpoint.ok()) return WithStartOver(checkpoint.status());
  pending_restore_ = *std::move(checkpoint);
  return absl::OkStatus();
}

absl::Status Trainer::RestoreForTraining() {
  if (pending_restore_.has_value()) {
    absl::Status s = Restore(*pending_restore_);
    pending_restore_.reset();  // The file's bytes are no longer needed.
    if (!s.ok()) return run_dir_.empty() ? s : WithStartOver(s);
  }
  if (pending_warm_start_.has_value()) {
    absl::Status s = WarmStart(*pending_warm_start_);
    pending_warm_start_.reset();
    MT_RETURN_IF_ERROR(s);
  }
  if (run_dir_.empty()) return absl::OkStatus();
  const std::string dir = CheckpointDir();
  MT_ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                      RemoveCheckpointLeftovers(dir, restored_from_));
  if (!removed.empty()) {
    std::fprintf(
        stderr,
        "mirrortrain: removed %zu file(s) that interrupted saves left in "
        "%s (%s%s)\n",
        removed.size(), dir.c_str(), removed.front().c_str(),
        removed.size() > 1 ? ", ..." : "");
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::CheckedCheckpoint> Trainer::OpenCheckpoint(
    const std::string& path_or_dir, bool weights_only_ok) const {
  auto open = [&]() -> absl::StatusOr<SafetensorsFile> {
    MT_ASSIGN_OR_RETURN(const std::string path, ResolveCheckpoint(path_or_dir));
    return SafetensorsFile::Open(path);
  };
  absl::StatusOr<SafetensorsFile> opened = open();
  std::error_code ec;
  if (absl::IsNotFound(opened.status()) && fs::is_directory(path_or_dir, ec)) {
    // A run saving into that directory may have pruned its latest between
    // our reading the index and opening the file (or checking it exists):
    // the index names a newer one now.
    opened = open();
  }
  MT_ASSIGN_OR_RETURN(SafetensorsFile file, std::move(opened));
  if (weights_only_ok && !IsMirrortrainCheckpoint(file)) {
    // Its entries are checked where they are read (RestoreEntries).
    return CheckedCheckpoint{std::move(file), CheckpointPosition{}};
  }
  MT_ASSIGN_OR_RETURN(
      const CheckpointPosition position,
      CheckTrainingCheckpoint(file, config_.checkpoint.allow_non_finite));
  return CheckedCheckpoint{std::move(file), position};
}

absl::StatusOr<BatchIterator::Position> Trainer::InputPositionNow(
    const std::string& path, const CheckpointPosition& position) const {
  const int64_t now = config_.data.global_batch_size;
  const int64_t then = position.input_batch_size.value_or(now);
  if (then == now) {
    return BatchIterator::Position{position.input_epoch, position.input_batch};
  }
  // Example order does not depend on the batch size: the next batch starts
  // at the same example, if the new size divides the examples done.
  const int64_t batch = position.input_batch;
  if (batch > std::numeric_limits<int64_t>::max() / then ||
      batch * then % now != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the run has read ", batch, " batches of ", then,
                     " examples of epoch ", position.input_epoch,
                     "; data.global_batch_size: ", now,
                     " does not divide them (resume with a size that divides ",
                     batch, " x ", then, ", or at an epoch's end)"));
  }
  return BatchIterator::Position{position.input_epoch, batch * then / now};
}

absl::Status Trainer::RestoreCheckpoint(const std::string& path_or_dir) {
  std::string path = path_or_dir;
  if (processes_->size() > 1) {
    // One file for every process: the chief resolves a directory's latest
    // (a run still saving, or hosts that see the index change at different
    // times, could give each process its own) and sends its path.
    absl::Status resolved = absl::OkStatus();
    if (processes_->chief()) {
      absl::StatusOr<std::string> latest = ResolveCheckpoint(path_or_dir);
      if (latest.ok()) {
        path = *std::move(latest);
      } else {
        resolved = latest.status();
      }
    }
    MT_RETURN_IF_ERROR(processes_->AgreedStatus(resolved));
    MT_RETURN_IF_ERROR(
        processes_->BroadcastString(path, 0, "the checkpoint to restore"));
  }
  MT_ASSIGN_OR_RETURN(const CheckedCheckpoint checkpoint,
                      OpenCheckpoint(path, /*weights_only_ok=*/true));
  if (!IsMirrortrainCheckpoint(checkpoint.file)) {
    return RestoreWeights(checkpoint.file);
  }
  return Restore(checkpoint);
}

absl::Status Trainer::RestoreEntries(
    const SafetensorsFile& file,
    std::vector<std::pair<std::string, Variable*>> entries) const {
  if (!IsMirrortrainCheckpoint(file)) {
    std::vector<std::string> names;
    for (const auto& entry : entries) {
      if (file.Contains(entry.first)) names.push_back(entry.first);
    }
    MT_RETURN_IF_ERROR(
        CheckEntriesFinite(file, names, config_.checkpoint.allow_non_finite));
  }
  return Saver::FromNameMap(std::move(entries)).Restore(file);
}

absl::Status Trainer::RestoreWeights(const SafetensorsFile& file) {
  const Replica& p = primary();
  snapshot_version_ = -1;
  std::vector<std::pair<std::string, Variable*>> entries;
  for (Variable* v : p.model->variables()) entries.emplace_back(v->name(), v);
  bool averaged = false;
  if (p.ema) {
    for (Variable* v : p.ema->TrackedVariables()) {
      const std::string shadow =
          ExponentialMovingAverage::ShadowName(v->name());
      averaged = averaged || file.Contains(shadow);
      entries.emplace_back(shadow, p.ema->Shadow(*v));
    }
    // A model whose every layer is frozen averages nothing.
    if (!averaged && !p.ema->TrackedVariables().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(),
          ": a file of weights only, without the EMA averages the EMA weights "
          "need (no '<name>/ExponentialMovingAverage' entries); use --weights "
          "raw"));
    }
  }
  MT_RETURN_IF_ERROR(RestoreEntries(file, std::move(entries)));
  MT_RETURN_IF_ERROR(SpreadRestoredState(0));
  restored_from_ = file.path();
  last_saved_step_ = 0;
  return WaitForLoopThreadWork();
}

absl::Status Trainer::Restore(const CheckedCheckpoint& checkpoint) {
  const SafetensorsFile& file = checkpoint.file;
  const CheckpointPosition& position = checkpoint.position;
  const std::string& path = file.path();
  // Restored once into the training state (all checks before any
  // assignment), then mirrored to the other replicas, or scattered to the
  // parameter servers; state_ no longer holds a gather of them.
  snapshot_version_ = -1;
  std::optional<EarlyStopping> stopping;
  std::string stopping_note;
  if (early_stopping_.has_value()) {
    MT_ASSIGN_OR_RETURN(stopping, EarlyStopping::Restored(
                                      early_stopping_->options(),
                                      file.metadata(), path, &stopping_note));
  }
  MT_RETURN_IF_ERROR(Saver(TrainingState()).Restore(file));
  MT_RETURN_IF_ERROR(SpreadRestoredState(position.step));
  if (stopping.has_value()) early_stopping_ = *std::move(stopping);
  if (train_iterator_ && ps_) {
    // Asynchronous workers resume where their applied updates leave each
    // (worker_batches, from a parameter_server run of as many workers);
    // else at their round-robin share of the batches the checkpoint's run
    // read (its input position: a step of a run that accumulated read
    // several). Another batch size would move them to other examples.
    const int64_t now = config_.data.global_batch_size;
    const int64_t then = position.input_batch_size.value_or(now);
    if (then != now) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": written with data.global_batch_size: ", then,
          "; parameter_server workers resume only with that size (got ", now,
          ")"));
    }
    int64_t total = 0;
    if (__builtin_mul_overflow(position.input_epoch,
                               train_iterator_->BatchesPerEpoch(), &total) ||
        __builtin_add_overflow(total, position.input_batch, &total)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": input position (epoch ", position.input_epoch,
                       ", batch ", position.input_batch,
                       ") is past 2^63 batches of this config's data"));
    }
    MT_ASSIGN_OR_RETURN(const std::optional<std::vector<int64_t>> recorded,
                        RecordedWorkerBatches(file, total));
    if (recorded.has_value() &&
        recorded->size() == static_cast<size_t>(num_replicas())) {
      MT_RETURN_IF_ERROR(SeekWorkers(*recorded));
    } else {
      MT_RETURN_IF_ERROR(SeekWorkers(total));
    }
  } else if (train_iterator_) {
    MT_ASSIGN_OR_RETURN(const BatchIterator::Position at,
                        InputPositionNow(path, position));
    absl::Status seek = train_iterator_->Seek(at);
    if (!seek.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": input position (epoch ", position.input_epoch,
                       ", batch ", position.input_batch,
                       ") does not fit this config's data: ", seek.message()));
    }
  }
  auto hash = file.metadata().find("config_hash");
  if (hash != file.metadata().end() &&
      hash->second != absl::StrCat(config_.hash) && progress_ == nullptr &&
      processes_->chief()) {
    std::fprintf(stderr,
                 "mirrortrain: note: %s was written with a different config\n",
                 path.c_str());
  }
  if (!stopping_note.empty() && processes_->chief()) {
    std::fprintf(stderr, "mirrortrain: note: %s\n", stopping_note.c_str());
  }
  restored_from_ = path;
  last_saved_step_ = position.step;
  log_window_ = {position.log_window_loss, position.log_window_steps};
  return WaitForLoopThreadWork();
}

absl::Status Trainer::WarmStart(const CheckedCheckpoint& checkpoint) {
  const Replica& p = primary();
  snapshot_version_ = -1;
  const CheckpointConfig& settings = config_.checkpoint;
  const bool ema_weights = settings.warm_start_weights == "ema";
  const std::vector<Variable*> variables = p.model->variables();
  MT_ASSIGN_OR_RETURN(auto entries,
                      WarmStartEntries(variables, settings.warm_start_vars,
                                       settings.warm_start_names, ema_weights,
                                       checkpoint.file));
  const size_t started = entries.size();
  // Every selected variable must be there (one missing would keep its
  // initializer unsaid); the file's other entries are ignored.
  absl::Status loaded = RestoreEntries(checkpoint.file, std::move(entries));
  if (!loaded.ok()) return AsWarmStartError(loaded);
  // The averages start at the weights they average, as at initial ones.
  if (p.ema) {
    for (Variable* v : p.ema->TrackedVariables()) {
      MT_RETURN_IF_ERROR(p.ema->Shadow(*v)->Assign(v->value()));
    }
  }
  MT_RETURN_IF_ERROR(SpreadRestoredState(0));
  warm_start_summary_ = absl::StrCat(
      ema_weights ? "the EMA weights of " : "the model weights of ",
      checkpoint.file.path());
  if (started < variables.size()) {
    absl::StrAppend(&warm_start_summary_, " for ", started, " of ",
                    variables.size(),
                    " model variables (checkpoint.warm_start_vars)");
  }
  return WaitForLoopThreadWork();
}

absl::Status Trainer::SpreadRestoredState(int64_t step) {
  for (distribute::MirroredVariable& v : mirrored_) {
    MT_ASSIGN_OR_RETURN(Tensor value, v.value().Clone());
    MT_RETURN_IF_ERROR(v.AssignAll(value));
  }
  for (Replica& r : replicas_) {
    if (r.optimizer) r.optimizer->set_iterations(step);
  }
  if (state_) state_->optimizer->set_iterations(step);
  if (ps_) {
    MT_RETURN_IF_ERROR(ps_->CopyFrom(state_->model->variables(),
                                     *state_->optimizer, state_->ema.get(),
                                     step));
    clock().Reset(step);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Trainer::SaveCheckpoint() {
  if (run_dir_.empty()) {
    return absl::FailedPreconditionError(
        "SaveCheckpoint: this trainer has no run directory");
  }
  if (run_dir_lock_.has_value()) MT_RETURN_IF_ERROR(run_dir_lock_->CheckHeld());
  // parameter_server: called only while no push is under way (the
  // coordinator holds the workers), so the gathered state is consistent.
  if (ps_) MT_RETURN_IF_ERROR(SnapshotShards());
  const int64_t step = global_step();
  MT_ASSIGN_OR_RETURN(
      Variable global_step,
      Variable::Create("global_step", Tensor::Scalar<int64_t>(step),
                       /*trainable=*/false));
  std::vector<Variable*> vars = TrainingState();
  vars.push_back(&global_step);
  const int64_t steps_per_epoch = StepsPerEpoch();
  // parameter_server: each worker's batches whose updates were applied, and
  // the position one input stream would have after all of them (what one
  // worker resumes from exactly).
  const std::vector<int64_t> worker_batches =
      ps_ ? WorkerBatches() : std::vector<int64_t>{};
  const int64_t read = absl::c_accumulate(worker_batches, int64_t{0});
  const BatchIterator::Position pos =
      ps_ ? BatchIterator::Position{read / steps_per_epoch,
                                    read % steps_per_epoch}
          : train_iterator_->position();
  std::map<std::string, std::string> metadata = {
      {"format", std::string(kCheckpointFormat)},
      {"step", absl::StrCat(step)},
      {"epoch", absl::StrCat(step / steps_per_epoch)},
      {"input_epoch", absl::StrCat(pos.epoch)},
      {"input_batch", absl::StrCat(pos.batch)},
      {"input_batch_size", absl::StrCat(config_.data.global_batch_size)},
      // All randomness (init, shuffling, dropout) is a pure function of the
      // seed and the step/epoch counters, so this is the whole RNG state.
      {"rng",
       absl::StrCat("counter-based; seed ", config_.seed, ", step ", step)},
      {"seed", absl::StrCat(config_.seed)},
      {"config_hash", absl::StrCat(config_.hash)},
      {"replicas", absl::StrCat(strategy_->num_replicas_in_sync())},
      // %.17g: the sum comes back to the same double.
      {"log_window_loss", absl::StrFormat("%.17g", log_window_.loss)},
      {"log_window_steps", absl::StrCat(log_window_.steps)},
  };
  if (ps_) metadata["worker_batches"] = absl::StrJoin(worker_batches, ",");
  if (early_stopping_.has_value()) early_stopping_->Save(metadata);
  // A file that restoring would refuse is not written (the last one stays):
  // an update that went non-finite after the last loss was checked.
  if (!config_.checkpoint.allow_non_finite) {
    MT_RETURN_IF_ERROR(CheckFiniteState(vars, step));
  }
  MT_ASSIGN_OR_RETURN(std::string path,
                      Saver(vars).Save(CheckpointDir(), step, metadata,
                                       config_.checkpoint.max_to_keep));
  last_saved_step_ = step;
  return path;
}

}  // namespace mirrortrain::trainer
