// The Trainer's asynchronous driver (parameter_server): worker threads
// that each loop on their own input (read the parameter servers, compute a
// gradient, push it), and the coordinator on Train()'s thread, which lets
// the workers run up to the next step where something is due (a log line,
// an evaluation, a checkpoint, the end), holds them there, and does it on a
// consistent state (UpdateClock; no push half-applied).
#include <algorithm>
#include <cmath>
#include <future>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "distribute/parameter_server_strategy.h"
#include "tensor/status_macros.h"
#include "trainer/signals.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

// How often the coordinator looks at stop signals while workers run.
constexpr std::chrono::milliseconds kPollInterval(50);

}  // namespace

distribute::UpdateClock& Trainer::clock() const {
  return static_cast<distribute::ParameterServerStrategy&>(*strategy_).clock();
}

BatchIterator& Trainer::WorkerInput(int worker) {
  return worker == 0 ? *train_iterator_ : *worker_iterators_[worker - 1];
}

absl::Status Trainer::SeekWorkers(const std::vector<int64_t>& batches) {
  const int64_t steps_per_epoch = train_iterator_->BatchesPerEpoch();
  for (int w = 0; w < num_replicas(); ++w) {
    MT_RETURN_IF_ERROR(WorkerInput(w).Seek(
        {batches[w] / steps_per_epoch, batches[w] % steps_per_epoch}));
  }
  std::lock_guard<std::mutex> lock(async_window_->mu);
  async_window_->start = batches;
  std::fill(async_window_->pushes.begin(), async_window_->pushes.end(), 0);
  return absl::OkStatus();
}

absl::Status Trainer::SeekWorkers(int64_t total_batches) {
  const int workers = num_replicas();
  std::vector<int64_t> batches(workers);
  for (int w = 0; w < workers; ++w) {
    batches[w] =
        total_batches / workers + (w < total_batches % workers ? 1 : 0);
  }
  return SeekWorkers(batches);
}

absl::Status Trainer::SnapshotShards() {
  // An epoch boundary evaluates raw and EMA weights and may save: one
  // gather for all three while the workers are held.
  const int64_t version = ps_->version();
  if (version == snapshot_version_) return absl::OkStatus();
  snapshot_version_ = -1;  // Until the copy is whole.
  MT_RETURN_IF_ERROR(ps_->CopyTo(state_->model->variables(), *state_->optimizer,
                                 state_->ema.get()));
  state_->optimizer->set_iterations(global_step());
  snapshot_version_ = version;
  return absl::OkStatus();
}

std::vector<int64_t> Trainer::ParameterServerUpdates() const {
  return ps_ ? ps_->UpdatesPerShard() : std::vector<int64_t>{};
}

std::vector<int64_t> Trainer::WorkerPushes() const {
  if (!async_window_) return {};
  std::lock_guard<std::mutex> lock(async_window_->mu);
  return async_window_->pushes;
}

std::vector<int64_t> Trainer::WorkerBatches() const {
  if (!async_window_) return {};
  std::lock_guard<std::mutex> lock(async_window_->mu);
  std::vector<int64_t> batches = async_window_->start;
  for (size_t w = 0; w < batches.size(); ++w) {
    batches[w] += async_window_->pushes[w];
  }
  return batches;
}

std::vector<int64_t> Trainer::WorkerInputPositions() {
  std::vector<int64_t> read;
  if (!ps_) return read;
  for (int w = 0; w < num_replicas(); ++w) {
    const BatchIterator::Position at = WorkerInput(w).position();
    read.push_back(at.epoch * WorkerInput(w).BatchesPerEpoch() + at.batch);
  }
  return read;
}

int64_t Trainer::MaxStaleness() const {
  return ps_ ? clock().max_staleness_seen() : 0;
}

absl::Status Trainer::WorkerLoop(distribute::ReplicaContext& ctx) {
  const int w = ctx.replica_id();
  Replica& r = replicas_[w];
  BatchIterator& input = WorkerInput(w);
  distribute::UpdateClock& updates = clock();
  const std::vector<Variable*> vars = r.model->variables();
  while (true) {
    absl::StatusOr<int64_t> read = updates.BeginRead(w);
    if (absl::IsOutOfRange(read.status())) return absl::OkStatus();
    MT_RETURN_IF_ERROR(read.status());
    MT_RETURN_IF_ERROR(ps_->Read(vars));
    MT_ASSIGN_OR_RETURN(const std::vector<Tensor> read_state,
                        ps_->ForwardState(vars));
    MT_ASSIGN_OR_RETURN(Batch batch, input.Next());
    const int64_t rows = batch.labels.dim(0);
    MT_ASSIGN_OR_RETURN(StepGradients grads,
                        ComputeGradients(ctx, r, absl::MakeConstSpan(&batch, 1),
                                         StepSeed(config_.seed, *read, w)));
    MT_ASSIGN_OR_RETURN(const double loss, HostValue(r.loss));
    absl::StatusOr<int64_t> ticket = updates.Reserve(w);
    // Over (the last update is taken, or a stop signal): this gradient is
    // dropped, never pushed, so nothing wrong with it can fail the run.
    if (absl::IsOutOfRange(ticket.status())) return absl::OkStatus();
    MT_RETURN_IF_ERROR(ticket.status());
    if (!std::isfinite(loss)) {
      return absl::AbortedError(absl::StrCat(
          "non-finite loss (", loss, ") in the update read at step ", *read));
    }
    MT_RETURN_IF_ERROR(CheckGlobalNorm(
        r.global_norm, absl::StrCat("in the update read at step ", *read)));
    MT_RETURN_IF_ERROR(ps_->Push(vars, read_state, grads.sums, *ticket));
    {
      std::lock_guard<std::mutex> lock(async_window_->mu);
      async_window_->loss += loss;
      ++async_window_->updates;
      async_window_->samples += rows;
      ++async_window_->pushes[w];
    }
    updates.Applied(w);
  }
}

absl::Status Trainer::TrainAsync(LoopState& loop) {
  distribute::UpdateClock& updates = clock();
  int64_t step = global_step();
  // Also makes the clock usable again after an earlier Train's Finish (not
  // after an abort: the clock stays aborted, and so does the trainer).
  updates.Reset(step);
  std::future<absl::Status> workers = std::async(std::launch::async, [this] {
    return strategy_->Run(
        [this](distribute::ReplicaContext& ctx) { return WorkerLoop(ctx); });
  });
  // However the coordinator leaves, the workers stop and are joined.
  absl::Status workers_status;
  bool joined = false;
  auto join = [&] {
    if (joined) return;
    updates.Finish();
    workers_status = workers.get();
    joined = true;
  };
  absl::Cleanup stop_workers = [&] {
    updates.Abort(absl::CancelledError("the coordinator stopped"));
    join();
  };
  // The next step where the coordinator has something to do.
  auto next_due = [&](int64_t from) {
    auto next_multiple = [from](int64_t every) {
      return every > 0 ? (from / every + 1) * every : INT64_MAX;
    };
    int64_t next = std::min(loop.total_steps,
                            next_multiple(config_.train.log_every_steps));
    if (config_.train.eval_every_epochs > 0) {
      next = std::min(next, next_multiple(loop.steps_per_epoch));
    }
    next = std::min(next, next_multiple(config_.train.eval_every_steps));
    return std::min(next, next_multiple(config_.checkpoint.every_steps));
  };
  bool stopped = false;
  while (step < loop.total_steps && !stopped) {
    // A signal that came during the last logging, evaluation or saving
    // lets no more updates through.
    if (StopSignal() == 0) updates.SetLimit(next_due(step));
    while (true) {
      if (StopSignal() != 0 && !stopped) {
        updates.HoldAtReserved();
        stopped = true;
      }
      absl::StatusOr<bool> reached = updates.WaitForLimit(kPollInterval);
      if (!reached.ok()) {
        // A worker failed: report its error, not the abort.
        join();
        return workers_status.ok() ? reached.status() : workers_status;
      }
      if (*reached) break;
    }
    const int64_t now = updates.applied();
    double loss = 0;
    int64_t done = 0, samples = 0;
    {
      std::lock_guard<std::mutex> lock(async_window_->mu);
      loss = async_window_->loss;
      done = async_window_->updates;
      samples = async_window_->samples;
      async_window_->loss = 0;
      async_window_->updates = async_window_->samples = 0;
    }
    step = now;
    if (done > 0)
      MT_RETURN_IF_ERROR(AfterSteps(loop, step, loss, done, samples));
  }
  join();
  std::move(stop_workers).Cancel();
  MT_RETURN_IF_ERROR(workers_status);
  if (stopped) return StopBySignal(step);
  return FinishTraining(loop, step);
}

}  // namespace mirrortrain::trainer
