// The Trainer's synchronous loop: each step enqueued on every replica,
// then finished (its loss, global norm and token-id checks read back, the
// processes' agreement on stopping, logging, evaluation, checkpoints) once
// the devices are done with it. On GPU replicas with their own copies one
// step runs while the host prepares the next (steps in flight); a step
// after which the state is read is finished before the next starts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/ops/index_checks.h"
#include "tensor/status_macros.h"
#include "trainer/signals.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {

absl::Status Trainer::SaveIfNew() {
  // Without a run directory (tests, tools) nothing is written.
  if (run_dir_.empty() || last_saved_step_ == global_step()) {
    return absl::OkStatus();
  }
  MT_ASSIGN_OR_RETURN(std::string path, SaveCheckpoint());
  progress_->Message(absl::StrCat("saved ", path));
  return absl::OkStatus();
}

absl::Status Trainer::StopBySignal(int64_t step) {
  MT_RETURN_IF_ERROR(SaveIfNew());
  progress_->Message(absl::StrCat("stopped by signal after step ", step));
  return absl::CancelledError(absl::StrCat("stopped by signal at step ", step));
}

absl::Status Trainer::LogTrainWindow(LoopState& loop, int64_t step,
                                     double samples_per_sec) {
  MetricsRecord rec{step,
                    step / loop.steps_per_epoch,
                    "train",
                    "",
                    {{"loss", log_window_.loss / log_window_.steps},
                     // The rate of the next update (from the step: the
                     // parameter servers' snapshot may be older).
                     {"learning_rate", primary().optimizer->schedule()(step)},
                     {"samples_per_sec", samples_per_sec}}};
  // Sequences of tokens (the text source's bytes, or ids an embedding
  // reads): the labelled tokens per second too (several
  // labels per example are not tokens otherwise: an example's binary
  // labels, a segmentation's pixels).
  if (const int64_t t = train_data_.labels_per_example();
      t > 1 && loss_->name == models::kDefaultLoss &&
      (train_data_.bytes_as_tokens || primary().model->reads_token_ids())) {
    rec.values.push_back(
        {"tokens_per_sec", samples_per_sec * static_cast<double>(t)});
  }
  if (ps_) {
    // How stale the window's updates were (UpdateClock).
    const std::vector<int64_t> counts = clock().TakeStalenessCounts();
    double updates = 0, sum = 0, max = 0;
    for (size_t s = 0; s < counts.size(); ++s) {
      updates += static_cast<double>(counts[s]);
      sum += static_cast<double>(counts[s] * static_cast<int64_t>(s));
      if (counts[s] > 0) max = static_cast<double>(s);
    }
    rec.values.push_back({"staleness_mean", updates > 0 ? sum / updates : 0});
    rec.values.push_back({"staleness_max", max});
    rec.histograms.push_back({"staleness", counts});
  }
  if (logger_) MT_RETURN_IF_ERROR(logger_->Log(rec));
  log_window_ = {};
  loop.window_samples = 0;
  loop.window_start = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

absl::Status Trainer::AfterSteps(LoopState& loop, int64_t step, double loss_sum,
                                 int64_t steps, int64_t samples) {
  log_window_.loss += loss_sum;
  log_window_.steps += steps;
  loop.window_samples += samples;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    loop.window_start)
          .count();
  const double samples_per_sec =
      seconds > 0 ? loop.window_samples / seconds : 0;
  progress_->Update(
      step, log_window_.steps > 0 ? log_window_.loss / log_window_.steps : 0,
      samples_per_sec);
  if (step % config_.train.log_every_steps == 0 || step == loop.total_steps) {
    MT_RETURN_IF_ERROR(LogTrainWindow(loop, step, samples_per_sec));
  }
  if (EvaluationDue(loop, step)) {
    MT_ASSIGN_OR_RETURN(const EvalResult watched, EvaluateAndLog(step));
    if (early_stopping_.has_value() &&
        early_stopping_->Update(Watched(watched), step)) {
      // This step ends the run, as the last one would: its train window
      // logged, a checkpoint saved, no evaluation again.
      progress_->Message(EarlyStopMessage(step));
      loop.total_steps = step;
      if (log_window_.steps > 0) {
        MT_RETURN_IF_ERROR(LogTrainWindow(loop, step, samples_per_sec));
      }
    }
    loop.evaluated_at_end = step == loop.total_steps;
  }
  if (SaveDue(step)) MT_RETURN_IF_ERROR(SaveIfNew());
  if (step_observer_) step_observer_(step);
  return absl::OkStatus();
}

std::string Trainer::EarlyStopMessage(int64_t step) const {
  const EarlyStopping& e = *early_stopping_;
  return absl::StrCat(
      "early stopping at step ", step, ": the ", e.options().watch,
      " has not improved on ",
      e.best().has_value() ? absl::StrFormat("%.4f", *e.best()) : "nan",
      " (step ", e.best_step(), ") for ", e.wait(), " evaluation",
      e.wait() == 1 ? "" : "s",
      " (train.early_stopping_patience: ", e.options().patience, ")");
}

bool Trainer::EvaluationDue(const LoopState& loop, int64_t step) const {
  const int64_t every = config_.train.eval_every_epochs;
  const int64_t every_steps = config_.train.eval_every_steps;
  return (step % loop.steps_per_epoch == 0 && every > 0 &&
          (step / loop.steps_per_epoch) % every == 0) ||
         (every_steps > 0 && step % every_steps == 0);
}

bool Trainer::SaveDue(int64_t step) const {
  const int64_t every = config_.checkpoint.every_steps;
  return every > 0 && step % every == 0;
}

bool Trainer::ReplicaCheckDue(int64_t step) const {
  const int64_t every = config_.distribute.check_replicas_every_steps;
  return every > 0 && step % every == 0;
}

bool Trainer::ReadsStateAfter(const LoopState& loop, int64_t step) const {
  return step == loop.total_steps || EvaluationDue(loop, step) ||
         SaveDue(step) || ReplicaCheckDue(step) || step_observer_ != nullptr;
}

absl::StatusOr<Tensor> Trainer::PinnedHostLike(const Tensor& t) {
  MT_ASSIGN_OR_RETURN(Allocator * pinned, cuda::PinnedHostAllocator());
  return Tensor::EmptyWith(pinned, t.dtype(), t.shape());
}

absl::StatusOr<Tensor> Trainer::HostCopyAsync(const Tensor& t) {
  if (t.device().is_cpu()) return t.Clone();
  MT_ASSIGN_OR_RETURN(Tensor host, PinnedHostLike(t));
  MT_RETURN_IF_ERROR(cuda::CopyAsync(host.raw_data(), Device::Cpu(),
                                     t.raw_data(), t.device(), t.bytes()));
  return host;
}

absl::StatusOr<distribute::DeviceFence> Trainer::FenceAfterCopies(
    const absl::Status& copied) {
  absl::StatusOr<distribute::DeviceFence> done =
      copied.ok() ? strategy_->Fence() : copied;
  // Copies already queued write into a pending step's host buffers, which
  // the caller drops with the error.
  if (!done.ok()) SettleDevices();
  return done;
}

absl::Status Trainer::ReadBackNow(PendingStep& p) {
  absl::Status copied =
      strategy_->Enqueue([&](distribute::ReplicaContext& ctx) -> absl::Status {
        for (const auto& [host, device] : p.Readbacks(ctx.replica_id())) {
          if (!device->defined()) continue;
          MT_RETURN_IF_ERROR(cuda::CopyAsync(
              host->raw_data(), Device::Cpu(), device->raw_data(),
              device->device(), device->bytes()));
        }
        return absl::OkStatus();
      });
  MT_ASSIGN_OR_RETURN(p.done, FenceAfterCopies(copied));
  p.MarkReadBack();
  return absl::OkStatus();
}

absl::Status Trainer::ReadBackDeferred() {
  for (PendingStep& p : pending_) {
    if (p.deferred) MT_RETURN_IF_ERROR(ReadBackNow(p));
  }
  return absl::OkStatus();
}

absl::Status Trainer::FinishTraining(LoopState& loop, int64_t step) {
  double no_loss = 0;
  MT_ASSIGN_OR_RETURN(int stop, AgreeAfterStep(no_loss));
  if (!loop.evaluated_at_end && stop == 0) {
    // A rerun of a finished run evaluates its last step again.
    if (logger_) MT_RETURN_IF_ERROR(logger_->DropEvaluationsAt(step));
    MT_RETURN_IF_ERROR(EvaluateAndLog(step).status());
    MT_ASSIGN_OR_RETURN(stop, AgreeAfterStep(no_loss));
  }
  // A signal during the last step's evaluation (or the one above) still
  // ends the run as a signal does.
  if (stop != 0) return StopBySignal(step);
  return SaveIfNew();
}

absl::StatusOr<int> Trainer::AgreeAfterStep(double& loss,
                                            const absl::Status& failed) {
  if (processes_->size() == 1) {
    MT_RETURN_IF_ERROR(failed);
    return StopSignal();
  }
  // The loss, then each process's status code at 1 + its rank and its stop
  // signal at 1 + P + its rank: every process then knows who failed and
  // which signals came where. One launcher signal reaches all with the
  // same number; when they got different ones (SIGINT here, SIGTERM
  // there), a process that got none takes the lowest rank's (the chief's
  // first) and one that got its own keeps it (its exit code).
  const int processes = processes_->size();
  const int rank = processes_->rank();
  std::vector<double> values(1 + 2 * processes, 0.0);
  values[0] = loss;
  values[1 + rank] = static_cast<double>(failed.code());
  values[1 + processes + rank] = static_cast<double>(StopSignal());
  if (absl::Status summed = processes_->AllReduceSum(absl::MakeSpan(values),
                                                     "the end of the step");
      !summed.ok()) {
    return failed.ok() ? summed : failed;
  }
  loss = values[0];
  const absl::Span<const double> codes =
      absl::MakeConstSpan(values).subspan(1, processes);
  absl::StatusOr<absl::Status> agreed = processes_->AgreeOnCodes(failed, codes);
  if (!agreed.ok()) return failed.ok() ? agreed.status() : failed;
  MT_RETURN_IF_ERROR(*agreed);
  // The decision is the summed values' alone: a signal that reached this
  // process after it wrote its own stops it at the next agreement, with
  // the others.
  for (int p = 0; p < processes; ++p) {
    if (const double signal = values[1 + processes + p]; signal != 0) {
      RecordStopSignal(static_cast<int>(signal));  // Kept if it has its own.
      return StopSignal();
    }
  }
  return 0;
}

absl::Status Trainer::PendStep(int64_t step, std::vector<Batch> micro_batches,
                               bool in_flight) {
  PendingStep p;
  p.step = step;
  p.micro_batches = std::move(micro_batches);
  for (std::vector<Tensor>* v :
       {&p.losses, &p.global_norms, &p.index_checks, &p.device_losses,
        &p.device_global_norms, &p.device_index_checks}) {
    v->resize(replicas_.size());
  }
  // A replay's scalars wait for the next replay's batched copy, unless the
  // step is finished before the next one starts.
  p.deferred = in_flight && step_graph_.replayed && BatchedStepCopies();
  const auto copy = [&](int id) -> absl::Status {
    const Replica& r = replicas_[id];
    // Only a step whose ops were given the record can have written it.
    const Tensor record = DefersIndexChecks() && r.index_checks.written()
                              ? r.index_checks.tensor()
                              : Tensor();
    const Tensor* scalars[] = {&r.loss, &r.global_norm, &record};
    int k = 0;
    for (const auto& [host, device] : p.Readbacks(id)) {
      const Tensor& t = *scalars[k++];
      if (!t.defined()) continue;
      if (p.deferred) {
        MT_ASSIGN_OR_RETURN(*host, PinnedHostLike(t));
        *device = t;
      } else {
        MT_ASSIGN_OR_RETURN(*host, HostCopyAsync(t));
      }
    }
    return absl::OkStatus();
  };
  absl::Status copied = absl::OkStatus();
  if (strategy_->devices()[0].is_cuda()) {
    // Each replica copies its scalars to the host on its own stream, after
    // its step, so reading them later needs no other ordering (a deferred
    // replay's scalars: the next staging on the same stream, or
    // ReadBackNow).
    copied = strategy_->Enqueue([&](distribute::ReplicaContext& ctx) {
      return copy(ctx.replica_id());
    });
  } else {
    // CPU steps are done when they return: copies on this thread.
    for (int id = 0; id < num_replicas() && copied.ok(); ++id) {
      copied = copy(id);
    }
  }
  MT_ASSIGN_OR_RETURN(p.done, FenceAfterCopies(copied));
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status Trainer::FinishStep(LoopState& loop, int& stop) {
  PendingStep p = std::move(pending_.front());
  pending_.pop_front();
  const int64_t step = p.step;
  // No replay read it back (the loop stops before the next step: a stop
  // signal): the graph's outputs still hold it.
  if (p.deferred) {
    if (absl::Status read = ReadBackNow(p); !read.ok()) {
      return absl::Status(read.code(),
                          absl::StrCat("step ", step, ": ", read.message()));
    }
  }
  if (absl::Status done = p.done.Wait(); !done.ok()) {
    // A device fault surfaces at the first wait after it: this step's, or
    // (steps in flight) the next one's.
    return absl::Status(
        done.code(),
        absl::StrCat("step ", step, " or the step after it: ", done.message()));
  }
  // The error this step ends with: a bad token id first (its replica's
  // record; the cause of whatever the loss became), else a non-finite
  // global norm.
  absl::Status failed = absl::OkStatus();
  for (size_t i = 0; i < replicas_.size() && failed.ok(); ++i) {
    if (!p.index_checks[i].defined()) continue;
    failed = replicas_[i].index_checks.ErrorIn(p.index_checks[i]);
    if (!failed.ok()) {
      failed = absl::Status(
          failed.code(),
          absl::StrCat("step ", step, ": replica ", i, ": ", failed.message()));
    }
  }
  double loss = 0;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    // A failed read is this step's failure, agreed below like the others.
    const absl::StatusOr<double> value = HostValue(p.losses[i]);
    if (!value.ok() && failed.ok()) {
      failed =
          absl::Status(value.status().code(),
                       absl::StrCat("step ", step, ": reading replica ", i,
                                    "'s loss: ", value.status().message()));
    }
    loss += value.value_or(std::numeric_limits<double>::quiet_NaN());
    if (failed.ok()) {
      failed =
          CheckGlobalNorm(p.global_norms[i], absl::StrCat("at step ", step));
    }
  }
  // The job's loss, stop decision and failure (processes may find different
  // ones: ids are checked per replica), the same in every process.
  absl::StatusOr<int> agreed = AgreeAfterStep(loss, failed);
  if (!agreed.ok()) {
    // An agreed failure, or this process's own, names its step already.
    if (!failed.ok() || distribute::IsAgreed(agreed.status())) {
      return agreed.status();
    }
    return absl::Status(
        agreed.status().code(),
        absl::StrCat("step ", step, ": ", agreed.status().message()));
  }
  stop = *agreed;
  if (!std::isfinite(loss)) {
    // Every process has this loss: one report, from the chief.
    return distribute::MarkAgreed(absl::AbortedError(
        absl::StrCat("non-finite loss (", loss, ") at step ", step)));
  }
  if (ReplicaCheckDue(step)) {
    absl::Status same = CheckReplicasIdentical();
    if (!same.ok()) {
      same = absl::InternalError(
          absl::StrCat("step ", step, ": ", same.message()));
    }
    // A process that drifted alone stops every one here.
    MT_RETURN_IF_ERROR(processes_->AgreedStatus(same));
  }
  int64_t samples = 0;
  for (const Batch& b : p.micro_batches) samples += b.labels.dim(0);
  return AfterSteps(loop, step, loss, 1, samples);
}

void Trainer::DiscardPendingSteps() {
  // An error here leaves nothing better to do than what the caller does
  // with the error that ended the loop.
  for (const PendingStep& p : pending_) p.done.Wait().IgnoreError();
  pending_.clear();
}

void Trainer::SettleDevices() {
  absl::StatusOr<distribute::DeviceFence> all = strategy_->Fence();
  if (all.ok()) {
    all->Wait().IgnoreError();
    return;
  }
  // No fence: every GPU of the strategy waited for whole, so nothing queued
  // still writes into host buffers about to be dropped.
  for (const Device& d : strategy_->devices()) {
    if (d.is_cuda()) cuda::Synchronize(d.index).IgnoreError();
  }
}

absl::Status Trainer::Train() {
  if (data_needs_ != DataNeeds::kTrainAndTest) {
    return absl::FailedPreconditionError(
        "Train: this trainer loaded no training split");
  }
  LoopState loop;
  loop.steps_per_epoch = StepsPerEpoch();
  MT_ASSIGN_OR_RETURN(loop.total_steps, TotalSteps());
  // A run early stopping ended (its checkpoint's state says so) is
  // finished: run again, it evaluates its last step again.
  const bool ended_early =
      early_stopping_.has_value() && early_stopping_->stopped();
  if (ended_early) loop.total_steps = std::min(loop.total_steps, global_step());
  loop.window_start = std::chrono::steady_clock::now();
  progress_ = std::make_unique<Progress>(loop.total_steps, loop.steps_per_epoch,
                                         config_.train.log_every_steps,
                                         /*silent=*/!processes_->chief());
  // However training ends, the bar's line is ended before anything else is
  // printed (an error, the shell's prompt).
  absl::Cleanup end_bar = [this] { progress_->Finish(); };
  {
    // The time to the first step, where it went (a time-to-accuracy run
    // pays it once).
    const std::chrono::duration<double> total =
        std::chrono::steady_clock::now() - startup_.began;
    std::string line = absl::StrFormat(
        "start-up %.2f s: devices %.2f s, model %.2f s; test split %.2f s "
        "and training split %.2f s loading meanwhile",
        total.count(), startup_.devices.count(), startup_.model.count(),
        startup_.test_split.count(), startup_.training_split.count());
    if (startup_.gpu_libraries.count() > 0) {
      absl::StrAppendFormat(&line, "; GPU libraries %.2f s meanwhile",
                            startup_.gpu_libraries.count());
    }
    if (startup_.before.has_value()) {
      absl::StrAppendFormat(&line, "; process launch to start-up %.2f s",
                            *startup_.before);
    }
    progress_->Message(line);
  }
  if (!restored_from_.empty()) {
    progress_->Message(
        absl::StrCat("restored ", restored_from_, " at step ", global_step()));
  }
  if (!warm_start_summary_.empty()) {
    progress_->Message(absl::StrCat("warm start: ", warm_start_summary_));
  }
  if (ended_early) {
    progress_->Message(
        absl::StrCat("this run ended by ", EarlyStopMessage(global_step())));
  }
  if (!cuda_graph_.reason.empty() && strategy_->devices()[0].is_cuda()) {
    progress_->Message(
        absl::StrCat("train.cuda_graph: eager steps: ", cuda_graph_.reason));
  }
  if (ps_) return TrainAsync(loop);
  // Only GPU replicas that update their own copies run a step while the
  // host prepares the next; elsewhere a step is done when it returns.
  steps_in_flight_ = std::max<size_t>(
      min_steps_in_flight_,
      strategy_->devices()[0].is_cuda() &&
              placement() == distribute::VariablePlacement::kMirrored
          ? 2
          : 1);
  // However the loop ends, no device work is left reading or writing what
  // the pending steps hold.
  absl::Cleanup discard_pending = [this] { DiscardPendingSteps(); };
  int64_t step = global_step();
  double no_loss = 0;
  MT_ASSIGN_OR_RETURN(int stop, AgreeAfterStep(no_loss));
  while (step < loop.total_steps) {
    // One process: a signal received since (during logging, evaluation or
    // saving) counts at once, as it always did.
    if (processes_->size() == 1) stop = StopSignal();
    if (stop != 0) {
      while (!pending_.empty()) MT_RETURN_IF_ERROR(FinishStep(loop, stop));
      return StopBySignal(step);
    }
    MT_ASSIGN_OR_RETURN(std::vector<Batch> micro_batches, NextMicroBatches());
    if (absl::Status s = Step(micro_batches, step); !s.ok()) {
      // Nothing queued may still read the batches dropped with the error.
      SettleDevices();
      return s;
    }
    ++step;
    // The devices run this step while the host prepares the next, unless
    // the state after it is read (evaluation, checkpoint, checks).
    const size_t keep = ReadsStateAfter(loop, step) ? 0 : steps_in_flight_ - 1;
    MT_RETURN_IF_ERROR(
        PendStep(step, std::move(micro_batches), /*in_flight=*/keep > 0));
    while (pending_.size() > keep) MT_RETURN_IF_ERROR(FinishStep(loop, stop));
  }
  return FinishTraining(loop, step);
}

}  // namespace mirrortrain::trainer
