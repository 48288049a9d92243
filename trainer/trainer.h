// The training loop: one job, written against distribute::Strategy, so the
// same loop runs one device, mirrored replicas, central storage or
// asynchronous parameter-server workers.
//
// Per step (DESIGN.md, "One training step"): the global batch is cut into
// contiguous replica shards; each replica runs forward and backward with the
// loss divided by the global batch; gradients are SUM-all-reduced, clipped,
// applied by the replica's optimizer, then the EMA is updated. With
// train.accumulation_steps K a step takes K consecutive batches of the
// input (micro-batches; fewer at the end of an epoch): each runs forward and
// backward with the loss divided by the labels of all K, their gradients are
// summed on the replica and all-reduced once with the last one's backward,
// so the step equals one on the K-times-larger batch (batch normalization
// aside: its statistics are per micro-batch). global_step counts steps.
// Where the update goes follows the strategy's VariablePlacement: every
// replica's copy (mirrored), the one central copy, which the replicas read
// before the step (central_storage), or, asynchronously, the
// parameter-server shards (parameter_server: trainer_async.cc; each worker
// loops on its own input and the Train() thread only coordinates).
//
// A job of several processes (an MPI launcher; distribute/process_group.h):
// every process runs a Trainer on the same config; process p's replicas are
// global replicas p*L .. p*L+L-1, each computing its global-replica shard of
// the same global batch. Only the chief (process 0) locks and writes the run
// directory (config, metrics, events, checkpoints) and prints progress; it
// alone restores a checkpoint and broadcasts the state to the others, so
// checkpoints do not depend on the process count. Losses, evaluations and
// stop signals are reduced over all processes, so every process takes the
// same decisions at the same step.
//
// Ownership: the Trainer owns the strategy, the per-replica models,
// optimizers and EMAs (or the one central / parameter-server state), the
// datasets and the loggers. Thread contract: all public methods from one
// thread.
#ifndef MIRRORTRAIN_TRAINER_TRAINER_H_
#define MIRRORTRAIN_TRAINER_TRAINER_H_

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/mirrored_variable.h"
#include "distribute/process_group.h"
#include "distribute/strategy.h"
#include "distribute/update_clock.h"
#include "models/metrics.h"
#include "models/model.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/ops/index_checks.h"
#include "tensor/staged_tensor.h"
#include "trainer/checkpoint/checkpoint_format.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/config.h"
#include "trainer/cuda_graph_policy.h"
#include "trainer/data/batch_iterator.h"
#include "trainer/data/dataset.h"
#include "trainer/data/device_stager.h"
#include "trainer/early_stopping.h"
#include "trainer/metrics_logger.h"
#include "trainer/optim/ema.h"
#include "trainer/optim/optimizer.h"
#include "trainer/parameter_server_shards.h"
#include "trainer/progress.h"
#include "trainer/run_dir_lock.h"

namespace mirrortrain::trainer {

struct EvalResult {
  int64_t examples = 0;
  // Labels evaluated: examples, or tokens of sequence data; those unmasked
  // of a masked model (models::Model::output_masked).
  int64_t labels = 0;
  // Mean per-label (example, token or target) loss, with the training
  // objective's loss.label_smoothing (as Keras and torchvision evaluate).
  double loss = 0;
  // The loss's metric (LossType::metric), per label: "accuracy" (the
  // fraction predicted right) or "mean_absolute_error".
  std::string metric_name = "accuracy";
  double metric = 0;
  // Byte tokens (the `text` source): the unsmoothed loss / ln 2, else
  // absent.
  std::optional<double> bits_per_byte;
  // The config's `metrics`, in order: name and value per label.
  std::vector<std::pair<std::string, double>> metrics;
};

// The layers `model` describes for data like `data` trained with `loss` (a
// preset ends in a dense layer of as many units as the loss reads: the
// data's number of classes for the categorical loss; the input shape
// defaults to the data's).
absl::StatusOr<models::ModelDef> ModelDefinition(const ModelConfig& model,
                                                 const LossConfig& loss,
                                                 const InMemoryDataset& data);

// The summary (Keras model.summary()) of the model `config` builds, for
// `train --dry_run`: loads the test split for its shape, builds on cpu:0.
absl::StatusOr<std::string> ModelSummary(const Config& config);

// What a trainer reads of the data: both splits (training), the test split
// (evaluation), or only the examples' shape (sampling: a source that knows
// it from its keys reads no file, SplitRequest::shapes_only).
enum class DataNeeds { kTrainAndTest, kTest, kShapes };

class Trainer {
 public:
  // Builds everything; `run_dir` empty means no logging (evaluation only).
  // Loads what `data` says (the training split only for kTrainAndTest;
  // Train() needs it, Evaluate() needs more than kShapes). A run directory
  // is locked for the trainer's lifetime (RunDirLock: a second trainer on
  // it fails); when Create fails, nothing in it has been written.
  // `processes` (not owned; null: this process alone) must outlive the
  // trainer.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const Config& config, const std::string& run_dir, DataNeeds data,
      distribute::ProcessGroup* processes = nullptr);
  ~Trainer();

  // Trains to train.steps / train.epochs. Returns Cancelled when a stop
  // signal ended the run early (after the current step). Checkpoints go to
  // <run_dir>/checkpoints; without a run directory none are written.
  absl::Status Train();
  // The test split with the raw or the EMA weights (EMA: an error when the
  // config has no EMA).
  absl::StatusOr<EvalResult> Evaluate(bool ema);
  // Runs `fn` on one model holding the training state's raw or EMA weights
  // (swapped back afterwards), with the device it lives on: replica 0's, or
  // the central / gathered parameter-server copy. For tools such as
  // `mirrortrain sample`; not while Train() runs.
  absl::Status WithModel(
      bool ema, const std::function<absl::Status(models::Model&, Device)>& fn);

  int64_t global_step() const;
  // The resolved config it was created with.
  const Config& config() const { return config_; }
  // Whether the data's examples are byte tokens (ids 0..255: text).
  bool trains_on_byte_tokens() const { return test_data_.bytes_as_tokens; }

  // Restores every replica (variables, slots, EMA shadows), the step and the
  // input position from a checkpoint file or a directory's latest. A
  // safetensors file of weights only (IsMirrortrainCheckpoint false: written
  // by numpy, Keras or PyTorch) restores the model variables, and the EMA
  // shadows from its "<name>/ExponentialMovingAverage" entries where this
  // trainer has an EMA; the step is 0 (RestoreWeights). That is for
  // inference (eval, predict, sample): the input position, log window and
  // early-stopping state are left as they are.
  absl::Status RestoreCheckpoint(const std::string& path_or_dir);
  // Writes a checkpoint of TrainingState() to <run_dir>/checkpoints; returns
  // its path (FailedPrecondition without a run directory).
  absl::StatusOr<std::string> SaveCheckpoint();
  // The checkpoint the state came from ("" if trained from scratch).
  const std::string& restored_from() const { return restored_from_; }
  // Where the model drops a mask (models::Model::mask_warnings).
  const std::vector<std::string>& mask_warnings() const;
  // Replica r's replicated state: model variables, optimizer slots and EMA
  // shadows, in a fixed order (only the model's variables when the state
  // is not mirrored).
  std::vector<Variable*> ReplicaState(int replica) const;
  // The state a checkpoint holds, in ReplicaState's order and names:
  // replica 0's (mirrored), the central copy (central_storage), or the
  // parameter servers' gathered into one copy (parameter_server; current
  // when no training runs).
  std::vector<Variable*> TrainingState() const;
  // parameter_server: updates each ps device holds (counting a restored
  // checkpoint's step), and gradients each worker pushed since this
  // trainer was built or restored (tests).
  std::vector<int64_t> ParameterServerUpdates() const;
  std::vector<int64_t> WorkerPushes() const;
  // parameter_server: the batches of each worker's input whose updates were
  // applied, counting where a resume started it (what a checkpoint's
  // `worker_batches` records).
  std::vector<int64_t> WorkerBatches() const;
  // parameter_server: the batches each worker's input has read (tests).
  std::vector<int64_t> WorkerInputPositions();
  // parameter_server: the largest staleness of any update, counted when it
  // is reserved.
  int64_t MaxStaleness() const;
  // Fails (Internal, naming the variable and replicas) unless every
  // replica's state is bitwise identical to replica 0's, and (several
  // processes; a collective) every process's to the chief's.
  absl::Status CheckReplicasIdentical() const;
  // This process's replicas.
  int num_replicas() const { return strategy_->num_replicas(); }
  const distribute::Strategy& strategy() const { return *strategy_; }
  // Called by Train() on its own thread after every step with the new
  // global step, once the step's work is finished (tests and tools, e.g. to
  // read allocator counters between steps); parameter_server: at every step
  // where the coordinator holds the workers (log, eval, checkpoint). No step
  // is enqueued before the observer has seen the previous one, which
  // changes the order of a process's collectives: with several processes,
  // set it in all or none.
  void set_step_observer(std::function<void(int64_t step)> observer) {
    step_observer_ = std::move(observer);
  }
  // At least `steps` steps in flight (tests: the pending-step path on CPUs,
  // where a step is otherwise finished before the next starts).
  void set_min_steps_in_flight_for_testing(size_t steps) {
    min_steps_in_flight_ = steps;
  }

 private:
  // Copies the test examples once to each GPU of `devices` that has room
  // for them (at most kMaxTestBytesOnDevice); CPUs read them where they
  // are. On Evaluate's thread, before the replicas run (Evaluate never
  // runs twice at once).
  void CopyTestImagesTo(const std::vector<Device>& devices);
  // The copy on `device`, or null (read and copy per batch).
  const Tensor* TestImagesOn(Device device) const;
  // train.cuda_graph: what a replica's part of the captured step reads and
  // writes at fixed addresses.
  struct GraphInputs {
    // The replica's shard of each micro-batch, copied in before a replay.
    std::vector<Tensor> images, labels;
    StagedTensor step_seed;  // i64[1]: dropout's seed
    Tensor loss;             // the replica's loss, written by every replay
    Tensor global_norm;      // ... and its global norm (clip_global_norm)
    // The optimizer's and EMA's staged tables the graph reads: a change
    // means a new capture (`stale`, set when staging).
    int64_t optimizer_generation = -1, ema_generation = -1;
    bool stale = true;
  };
  // train.cuda_graph: the step over all replicas, recorded once
  // (Strategy::CaptureRun) and replayed.
  struct StepGraph {
    int eager_steps = 0;    // warm-up steps run so far
    bool replayed = false;  // the last step was a replay
    cuda::CudaGraph graph;
    // Why the capture failed (steps stay eager), once reported.
    std::string failure;
    bool failure_reported = false;
  };
  struct Replica {
    std::unique_ptr<models::Model> model;
    std::unique_ptr<Optimizer> optimizer;
    std::unique_ptr<ExponentialMovingAverage> ema;
    // This replica's share of the last step's loss, read on the host only
    // after the step: reading it mid-step would stall a GPU replica between
    // forward and backward.
    Tensor loss;
    // optimizer.clip_global_norm: the last step's global gradient norm, an
    // f64 scalar read on the host after the step, as the loss is.
    Tensor global_norm;
    std::unique_ptr<GraphInputs> graph;
    // Steps in flight: where the step's Gather and Cast record a bad token
    // id (ops::ScopedIndexChecks), read with the loss.
    ops::IndexCheckRecord index_checks;
  };

  // One replica's rows of a batch, on its device.
  struct ShardInputs {
    distribute::ShardRange shard;
    Tensor images, labels;
  };

  Trainer() = default;
  // Step randomness (dropout) from the seed and the step, never from the
  // replica, so every replica and every replica count agree; asynchronous
  // workers other than worker 0 get their own streams.
  static uint64_t StepSeed(uint64_t seed, int64_t step, int worker = 0);
  // A scalar tensor's value, read on the host (a device copy can fail).
  static absl::StatusOr<double> HostValue(const Tensor& t);
  // A replica on `device`: its model, plus an optimizer and EMA when it
  // holds its own copy of the training state (`with_state`).
  absl::StatusOr<Replica> BuildReplica(const models::ModelDef& def,
                                       Device device, bool with_state) const;
  // Create's stages once the strategy exists: the replicas and the
  // training state as the strategy places it (mirrored copies, one central
  // copy, or parameter-server shards); then, with train_data_ loaded, the
  // input pipeline (batch iterators, the GPU stager).
  absl::Status BuildState(const models::ModelDef& def);
  absl::Status PrepareTrainingInput(const models::ModelDef& def);
  static std::vector<Variable*> StateOf(const Replica& r);
  // The replica whose optimizer and EMA hold the training state (replica 0,
  // the central copy or the parameter-server snapshot).
  const Replica& primary() const { return state_ ? *state_ : replicas_[0]; }
  distribute::VariablePlacement placement() const {
    return strategy_->variable_placement();
  }
  // One optimizer step over its micro-batches (one without accumulation).
  absl::Status Step(absl::Span<const Batch> micro_batches, int64_t step);
  // The step without a graph: EagerReplicaStep on every replica, enqueued.
  absl::Status EagerStep(absl::Span<const Batch> micro_batches, int64_t step);
  absl::Status EagerReplicaStep(distribute::ReplicaContext& ctx,
                                absl::Span<const Batch> micro_batches,
                                int64_t step);
  // The step as a CUDA graph (trainer_graph.cc): warm-up steps, then one
  // capture, then replays of it (eager steps for batches of another size).
  absl::Status GraphedStep(absl::Span<const Batch> micro_batches, int64_t step);
  // A replay's host half on one replica: the values the graph reads
  // (dropout seed, optimizer and EMA parameters, its shard of each
  // micro-batch).
  absl::Status StageGraphInputs(distribute::ReplicaContext& ctx,
                                absl::Span<const Batch> micro_batches,
                                int64_t step);
  absl::Status CaptureStep(absl::Span<const Batch> micro_batches, int64_t step);
  // Prints, once, why the capture failed (main thread).
  void ReportCudaGraphFailure(int64_t step);
  // The rows of `batch` replica ctx computes on, on its device: its shard
  // (ShardOf), or the whole batch for a parameter-server worker, which
  // reads its own input.
  absl::StatusOr<ShardInputs> ReplicaShard(distribute::ReplicaContext& ctx,
                                           const Batch& batch) const;
  // A replica's gradients for its update: one per trainable variable
  // (`sums`), or, where the replicas share them (SumsInUpdate: `shared`),
  // every replica's per variable in replica order (`terms`), which the
  // update adds itself; the replica then calls EndShare after it.
  struct StepGradients {
    bool shared = false;
    std::vector<Tensor> sums;
    std::vector<std::vector<Tensor>> terms;
  };
  // Whether replica ctx's update sums the replicas' gradients itself
  // (distribute.sum_in_update): mirrored logical replicas that share
  // memory, nothing between the reduction and the update that reads the
  // sum (clipping, L2 regularization), and at most three replicas (from
  // four on the all-reduce moves fewer bytes).
  bool SumsInUpdate(const distribute::ReplicaContext& ctx) const;
  // Forward and backward of replica `r` on its rows of each micro-batch
  // (the loss divided by the labels of all of them), the gradients summed
  // and reduced over the replicas once (or shared: SumsInUpdate),
  // L2-regularised and clipped; sets r.loss. With `graph` its fixed inputs
  // and staged seed are read instead of the batch's and `step_seed` (one
  // micro-batch).
  absl::StatusOr<StepGradients> ComputeGradients(
      distribute::ReplicaContext& ctx, Replica& r,
      absl::Span<const Batch> micro_batches, uint64_t step_seed,
      const GraphInputs* graph = nullptr);
  // The loss of a replica's `logits` whose model output carries `mask`
  // (Keras's loss masking): the labels' weighted sum over the count of
  // unmasked ones in the micro-batch's global batch (all-reduced; where
  // the context does not reduce, this replica's count times
  // `count_scale`), and over `micro_batches`.
  absl::StatusOr<Tensor> MaskedLoss(distribute::ReplicaContext& ctx,
                                    const Tensor& logits, const Tensor& labels,
                                    const Tensor& mask, int64_t micro_batches,
                                    double count_scale) const;
  // The next step's batches: train.accumulation_steps of them, or fewer
  // when the epoch ends first (a step never spans two epochs).
  absl::StatusOr<std::vector<Batch>> NextMicroBatches();
  // Optimizer steps per epoch: batches per epoch / accumulation_steps,
  // rounded up.
  int64_t StepsPerEpoch() const;
  // One optimizer update of `target`'s trainable variables, then its EMA;
  // `staged`: their parameters are staged already (a graph capture).
  static absl::Status ApplyUpdate(Replica& target, const StepGradients& grads,
                                  bool staged = false);
  // ApplyUpdate of mirrored replica ctx's own state, then, where the
  // replicas shared their gradients, the end of the share (the peers'
  // updates read this replica's gradients until then).
  static absl::Status ApplyMirroredUpdate(distribute::ReplicaContext& ctx,
                                          Replica& r,
                                          const StepGradients& grads,
                                          bool staged = false);
  // Waits for what this thread enqueued on its own streams of the replicas'
  // GPUs (initial values, restored or loaded weights): the replicas' streams
  // read it, and are not ordered after this thread's.
  absl::Status WaitForLoopThreadWork() const;
  // central_storage: copies the central variables (their EMA shadows with
  // `ema`) into every replica's model.
  absl::Status LoadReplicaModels(bool ema);
  // Readies the weights an evaluation or WithModel reads: central storage
  // loads the chosen ones into the replicas, parameter_server gathers its
  // shards into state_. InvalidArgument when `ema` is asked for without
  // ema.decay.
  absl::Status ReadyWeightsToRead(bool ema);

  // The loop's bookkeeping shared by the synchronous and the asynchronous
  // drivers: window of logged steps, evaluations, checkpoints.
  struct LoopState {
    int64_t total_steps = 0, steps_per_epoch = 0;
    // Since the last logged step (the losses: log_window_).
    int64_t window_samples = 0;
    std::chrono::steady_clock::time_point window_start;
    bool evaluated_at_end = false;
  };
  // `steps` more steps ended at global step `step` with `loss_sum` and
  // `samples`: logs, evaluates and saves as due at `step`.
  absl::Status AfterSteps(LoopState& loop, int64_t step, double loss_sum,
                          int64_t steps, int64_t samples);
  // Logs the train metrics of the steps since the last logged one.
  absl::Status LogTrainWindow(LoopState& loop, int64_t step,
                              double samples_per_sec);
  // Why early stopping ended the run at `step` (early_stopping_ stopped).
  std::string EarlyStopMessage(int64_t step) const;
  // Writes a checkpoint unless the state at this step is saved already.
  absl::Status SaveIfNew();
  // Whether the loop evaluates, saves, or checks the replicas after `step`.
  bool EvaluationDue(const LoopState& loop, int64_t step) const;
  bool SaveDue(int64_t step) const;
  bool ReplicaCheckDue(int64_t step) const;
  // Whether anything reads the training state after `step` (evaluation,
  // checkpoint, the replica check, a step observer, the end): then no
  // later step may be enqueued before it is finished.
  bool ReadsStateAfter(const LoopState& loop, int64_t step) const;

  // A step the synchronous loop has enqueued but not finished (pending_):
  // it keeps its batches (which its copies may still read) and gets host
  // copies of its loss, global norms and index-check records, read when
  // `done` is reached.
  //
  // A replayed step's loss, global norm and token-id check record (the
  // graph's fixed outputs, which only the next replay or eager step
  // overwrites) are read back by the next replay's BatchedCopy, in the kernel
  // that copies its inputs in, instead of by a copy launch of their own after
  // the replay (`deferred`: the device tensors are kept until then; `done` then
  // comes after that kernel). An eager next step reads it back before it runs
  // (ReadBackDeferred), a step whose state is read next is never deferred,
  // and FinishStep reads back what is left (a stop signal came first).
  struct PendingStep {
    int64_t step = 0;  // The global step after it.
    std::vector<Batch> micro_batches;
    // Per replica, on the host; index_checks with steps in flight only.
    std::vector<Tensor> losses, global_norms, index_checks;
    distribute::DeviceFence done;
    bool deferred = false;
    // Per replica, on the device, while `deferred`: what losses,
    // global_norms and index_checks (where defined) get.
    std::vector<Tensor> device_losses, device_global_norms, device_index_checks;
    // Replica `id`'s host tensors (loss, global norm, check record) and the
    // device tensors each gets while `deferred` (undefined: none).
    std::array<std::pair<Tensor*, Tensor*>, 3> Readbacks(int id) {
      return {{{&losses[id], &device_losses[id]},
               {&global_norms[id], &device_global_norms[id]},
               {&index_checks[id], &device_index_checks[id]}}};
    }
    // Once the read-back copies are queued (`done` after them).
    void MarkReadBack() {
      deferred = false;
      for (int id = 0; id < static_cast<int>(losses.size()); ++id) {
        for (const auto& [host, device] : Readbacks(id)) *device = Tensor();
      }
    }
  };
  // Enqueues the copies of the step's scalars and its fence; a replay's
  // loss, norm and check record are left to the next replay's staging
  // (`deferred`) when the step stays `in_flight` (the loop does not finish
  // it at once). A deferred step's fence is replaced once its copies are
  // queued; the first one covers its replay for DiscardPendingSteps.
  absl::Status PendStep(int64_t step, std::vector<Batch> micro_batches,
                        bool in_flight);
  // The fence after a pending step's copies (`copied`: their status); on
  // an error the devices are settled first.
  absl::StatusOr<distribute::DeviceFence> FenceAfterCopies(
      const absl::Status& copied);
  // ReadBackNow for every deferred pending step (before an eager step:
  // otherwise their copies would queue behind it).
  absl::Status ReadBackDeferred();
  // Waits for the oldest pending step, then does what follows a step:
  // checks its token ids (index-check records), global norm and loss,
  // agrees on `stop` with the other processes, checks the replicas, logs,
  // evaluates and saves as due.
  absl::Status FinishStep(LoopState& loop, int& stop);
  // Waits for the pending steps' device work and drops them unread (the
  // loop ended with an error).
  void DiscardPendingSteps();
  // Waits for every replica's queued work, errors ignored (after a failed
  // step, before its inputs are dropped).
  void SettleDevices();
  // A copy of `t` in host memory: pinned on a GPU, complete once the calling
  // thread's current stream gets there.
  static absl::StatusOr<Tensor> HostCopyAsync(const Tensor& t);
  // Pinned host memory for `t`'s bytes, unwritten.
  static absl::StatusOr<Tensor> PinnedHostLike(const Tensor& t);
  // Enqueues a deferred step's read-backs on every replica's stream, with
  // the fence after them.
  absl::Status ReadBackNow(PendingStep& p);
  // Whether replays batch their copies (the internal switch
  // batched_step_copies, trainer_graph.cc).
  static bool BatchedStepCopies();

  // Multi-process: every process takes the chief's training state, step
  // and input position (after the chief restored a checkpoint), and fails
  // unless its config hashes as the chief's.
  absl::Status SyncFromChief();
  // The stop signal any process of the job has received (0: none), the
  // same in every process; `loss` (this process's replicas' sum) becomes the
  // sum over all processes. One collective per step, which also agrees on
  // `failed` (this process's failure of the step): when any process failed,
  // every one returns the first failing one's status, marked agreed. When
  // the collective itself fails, `failed` is returned if set (its cause).
  absl::StatusOr<int> AgreeAfterStep(double& loss,
                                     const absl::Status& failed = {});
  // A stop signal: checkpoint, then Cancelled.
  absl::Status StopBySignal(int64_t step);
  // The final evaluation (unless done) and checkpoint.
  absl::Status FinishTraining(LoopState& loop, int64_t step);

  // parameter_server (trainer_async.cc): the coordinator's loop, and one
  // worker's.
  absl::Status TrainAsync(LoopState& loop);
  absl::Status WorkerLoop(distribute::ReplicaContext& ctx);
  // parameter_server: gathers the shards into state_ (no push under way).
  absl::Status SnapshotShards();
  // parameter_server: worker w's input, and where each resumes: at
  // `batches[w]` of its own order (a checkpoint's worker_batches), or, with
  // one total, at its round-robin share of it.
  BatchIterator& WorkerInput(int worker);
  absl::Status SeekWorkers(const std::vector<int64_t>& batches);
  absl::Status SeekWorkers(int64_t total_batches);
  distribute::UpdateClock& clock() const;
  // grads[i] += l2_regularization * vars[i] for weights of rank >= 2.
  absl::Status AddL2Regularization(const std::vector<Variable*>& vars,
                                   std::vector<Tensor>& grads) const;
  // optimizer.clip_value / clip_norm / clip_global_norm, on the device;
  // `global_norm` gets the global norm's tensor (clip_global_norm only),
  // checked after the step (CheckGlobalNorm).
  absl::Status ClipGradients(std::vector<Tensor>& grads,
                             Tensor* global_norm) const;
  // An error naming `where` when a step's global norm (a scalar on any
  // device; undefined without clip_global_norm) is not finite (TensorFlow
  // would go on with NaN gradients).
  static absl::Status CheckGlobalNorm(const Tensor& global_norm,
                                      absl::string_view where);
  // Evaluates and logs the raw and EMA weights as configured; returns the
  // EMA weights' result where there is an EMA, else the raw weights'.
  absl::StatusOr<EvalResult> EvaluateAndLog(int64_t step);
  // The value of `result` that train.early_stopping_monitor names (checked
  // by the config: the loss, its metric or a `metrics` entry).
  double Watched(const EvalResult& result) const;
  // train.steps, or train.epochs times the batches of an epoch; an error
  // naming the key when that is more than a checkpoint holds (2^53).
  absl::StatusOr<int64_t> TotalSteps() const;

  // A checkpoint file read and checked (CheckTrainingCheckpoint), or a
  // file of weights only (!IsMirrortrainCheckpoint(file): no position; its
  // entries are checked where they are read, RestoreEntries).
  struct CheckedCheckpoint {
    SafetensorsFile file;
    CheckpointPosition position;
  };

  // Before the data is loaded, so that a run that cannot start fails fast:
  // decides from checkpoint.restore what a training run restores, and opens
  // and checks it (pending_restore_). With a run directory, a fresh start
  // only when its checkpoint directory holds no checkpoint; otherwise only a
  // continuation from them; any failure says how to start over. A fresh
  // start opens checkpoint.warm_start_from (pending_warm_start_).
  absl::Status PrepareRestoreForTraining();
  // Once the replicas exist: restores pending_restore_ (or warm starts
  // from pending_warm_start_), then removes what interrupted saves left in
  // the run's checkpoint directory.
  absl::Status RestoreForTraining();
  // Opens and checks a training checkpoint (a directory: its latest); with
  // `weights_only_ok` also a safetensors file written elsewhere, which is
  // not a mirrortrain checkpoint (IsMirrortrainCheckpoint), for its weights.
  absl::StatusOr<CheckedCheckpoint> OpenCheckpoint(
      const std::string& path_or_dir, bool weights_only_ok = false) const;
  absl::Status Restore(const CheckedCheckpoint& checkpoint);
  // The model variables (and EMA shadows) of a file of weights only.
  absl::Status RestoreWeights(const SafetensorsFile& file);
  // Saver::FromNameMap(entries).Restore(file), the entries read first
  // checked for NaN and infinity where `file` is a file of weights only
  // (a training checkpoint was checked whole when opened).
  absl::Status RestoreEntries(
      const SafetensorsFile& file,
      std::vector<std::pair<std::string, Variable*>> entries) const;
  // checkpoint.warm_start_from: the checkpoint's model variables only; the
  // EMA shadows start from them, the optimizer's slots and step from zero.
  absl::Status WarmStart(const CheckedCheckpoint& checkpoint);
  // After the primary state was assigned: copies it to the other replicas
  // (or the parameter servers), the optimizers at `step`.
  absl::Status SpreadRestoredState(int64_t step);
  // Where the input resumes in this config's batches: the checkpoint's
  // position, converted from the batch size it was saved under (an error
  // where this one does not divide the examples read that epoch).
  absl::StatusOr<BatchIterator::Position> InputPositionNow(
      const std::string& path, const CheckpointPosition& position) const;
  // <run_dir>/checkpoints.
  std::string CheckpointDir() const;
  // That a save can write there (a read-only directory, a path too long for
  // the largest step's temporary file): said before the first step, not at
  // the first save, checkpoint.every_steps steps later. Leaves the
  // directory as it found it.
  absl::Status CheckCheckpointsWritable() const;

  // Declared first, so that it is released last, after every writer.
  std::optional<RunDirLock> run_dir_lock_;
  // The job's processes: `processes_`, or this process alone.
  std::unique_ptr<distribute::ProcessGroup> single_process_;
  distribute::ProcessGroup* processes_ = nullptr;
  Config config_;
  const models::LossType* loss_ = nullptr;  // config_.loss.name's.
  // config_.metrics' types, in order.
  std::vector<const models::MetricType*> metrics_;
  std::optional<CheckedCheckpoint> pending_restore_;
  std::optional<CheckedCheckpoint> pending_warm_start_;
  std::string restored_from_;
  // What checkpoint.warm_start_from assigned ("the model weights of
  // <file>"...); empty: no warm start.
  std::string warm_start_summary_;
  // train.early_stopping_patience's state; absent when it is null, and in
  // trainers that do not train (eval, sample, predict).
  std::optional<EarlyStopping> early_stopping_;
  // The step losses since the last logged step: summed, and how many. Kept
  // in checkpoints, so a resumed run logs what an uninterrupted one does.
  struct LogWindow {
    double loss = 0;
    int64_t steps = 0;
  } log_window_;
  // Where Create's time went, for the start-up line Train() prints before
  // its first step (the loads run on threads of their own, meanwhile).
  struct StartupTimes {
    std::chrono::steady_clock::time_point began;
    std::chrono::duration<double> devices{0}, test_split{0}, training_split{0},
        model{0};
    // The product libraries' warm-up on GPUs (its own thread); zero on CPUs.
    std::chrono::duration<double> gpu_libraries{0};
    // How long the process had run when the start-up began.
    std::optional<double> before;
  };
  StartupTimes startup_;
  int64_t last_saved_step_ = -1;
  std::string run_dir_;
  std::unique_ptr<distribute::Strategy> strategy_;
  CudaGraphDecision cuda_graph_;
  StepGraph step_graph_;
  // Oldest first. On GPU replicas with their own copies Train keeps up to
  // steps_in_flight_ = 2 (one runs while the host prepares the next);
  // elsewhere 1: each step is finished before the next starts.
  std::deque<PendingStep> pending_;
  size_t min_steps_in_flight_ = 1;  // set_min_steps_in_flight_for_testing
  size_t steps_in_flight_ = 1;      // Set by Train().
  // Steps in flight (set by the synchronous loop only): token ids are
  // checked on the device (ComputeGradients) and read with the loss
  // (FinishStep).
  bool DefersIndexChecks() const { return steps_in_flight_ > 1; }
  std::vector<Replica> replicas_;
  // The one copy of the training state (central_storage), or the gathered
  // copy of the parameter servers' (parameter_server); null when mirrored.
  std::unique_ptr<Replica> state_;
  std::unique_ptr<ParameterServerShards> ps_;
  // The ps_->version() that state_ holds a gather of (-1: none).
  int64_t snapshot_version_ = -1;
  // parameter_server: what the workers did since the last log line.
  struct AsyncWindow {
    std::mutex mu;
    double loss = 0;
    int64_t updates = 0, samples = 0;
    std::vector<int64_t> pushes;  // Per worker, since the start.
    std::vector<int64_t> start;   // Per worker: batches a resume skipped.
  };
  std::unique_ptr<AsyncWindow> async_window_;
  // Replica copies of every model variable, slot and EMA shadow.
  std::vector<distribute::MirroredVariable> mirrored_;
  DataNeeds data_needs_ = DataNeeds::kTrainAndTest;
  InMemoryDataset train_data_;
  InMemoryDataset test_data_;  // No examples, maybe, under kShapes.
  // test_data_'s examples on each GPU that evaluates, copied at the first
  // evaluation (TestImagesOn); written only by CopyTestImagesTo.
  std::vector<std::pair<Device, Tensor>> test_images_on_;
  // GPU replicas: copies batches to the devices ahead of their step. Used
  // by train_iterator_'s worker thread, so it is destroyed after it.
  std::unique_ptr<DeviceStager> stager_;
  std::unique_ptr<BatchIterator> train_iterator_;
  // parameter_server: workers 1.. read their own shuffles (worker 0 reads
  // train_iterator_).
  std::vector<std::unique_ptr<BatchIterator>> worker_iterators_;
  std::unique_ptr<MetricsLogger> logger_;
  std::unique_ptr<Progress> progress_;
  std::function<void(int64_t)> step_observer_;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_TRAINER_H_
