// Strategy: how a training step is spread over devices, after
// tf.distribute.Strategy. The training loop is written against this
// interface only; OneDeviceStrategy, MirroredStrategy,
// CentralStorageStrategy and ParameterServerStrategy implement it.
//
// Thread contract: Run() is called from one thread (the loop's). It calls
// the replica function once per replica, possibly on replica threads, and
// returns when all are done. A ReplicaContext is valid only inside the call
// it was passed to.
//
// Device work: each replica's work is ordered after everything it did in
// earlier calls (Run, Enqueue, Replay). When Run returns its work is done,
// or (OneDeviceStrategy) enqueued on the calling thread's current stream
// before anything the caller enqueues there later (code that reads results
// on another stream waits for Fence() first). Enqueue and Replay may
// return while it is still queued; a DeviceFence says when it is done.
#ifndef MIRRORTRAIN_DISTRIBUTE_STRATEGY_H_
#define MIRRORTRAIN_DISTRIBUTE_STRATEGY_H_

#include <functional>
#include <future>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/stream.h"
#include "tensor/device.h"
#include "tensor/gradient_tape.h"
#include "tensor/tensor.h"

namespace mirrortrain::distribute {

enum class ReduceOp { kSum, kMean };

// Rows [begin, end) of a batch of `batch` rows that replica `replica` of
// `replicas` gets: contiguous, as even as possible (the first batch %
// replicas replicas get one more row); may be empty.
struct ShardRange {
  int64_t begin, end;
};
ShardRange ShardOf(int64_t batch, int replica, int replicas);

class ReplicaContext {
 public:
  virtual ~ReplicaContext() = default;
  // This replica among the replicas of this process, and their number.
  virtual int replica_id() const = 0;
  virtual int num_replicas() const = 0;
  // This replica among the replicas of every process of the job (process p
  // of L replicas each holds p*L .. p*L+L-1; TF's replica_id_in_sync_group),
  // and their number: replica_id() and num_replicas() in one process.
  virtual int global_replica_id() const { return replica_id(); }
  virtual int num_replicas_in_sync() const { return num_replicas(); }
  virtual Device device() const = 0;
  // The rows of a global batch of `rows` this replica computes on: its
  // contiguous shard by global replica index (ShardOf), so the shards do
  // not depend on how the replicas are spread over processes.
  virtual ShardRange InputShard(int64_t rows) const;
  // Whether an all-reduce combines anything: false with one replica, and
  // with distribute.cross_device_ops=none (measuring a step without its
  // communication). Gradient buckets skip packing when it is false.
  virtual bool reduces() const { return num_replicas_in_sync() > 1; }
  // Replaces each tensor's values by their sum over all replicas. Every
  // replica must call it with the same number of tensors of the same shapes,
  // in the same order.
  virtual absl::Status AllReduce(ReduceOp op, absl::Span<Tensor> tensors) = 0;
  // Starts an all-reduce of `buffer` in place and returns at once; the
  // future says when it is done. All-reduces of a replica run in the order
  // they were started (on its communication thread for mirrored replicas),
  // so every replica must start them in the same order. The default runs
  // it synchronously.
  virtual std::shared_future<absl::Status> AllReduceAsync(ReduceOp op,
                                                          Tensor buffer);
  // AllReduceAsync after packing `parts` into `buffer`, one after the other
  // (their element counts must add up to buffer's): a gradient bucket. The
  // copies belong to the collective, so on a GPU they run on the
  // communication stream, off the compute stream. The parts must stay
  // unchanged until the future is ready. The default packs on the calling
  // thread's stream, then calls AllReduceAsync.
  virtual std::shared_future<absl::Status> PackAndAllReduceAsync(
      ReduceOp op, std::vector<Tensor> parts, Tensor buffer);
  // Whether AllReduceListAsync reduces its tensors where they are as one
  // collective (logical devices: LocalAllReduce), so a gradient bucket
  // need not be packed.
  virtual bool reduces_lists() const { return false; }
  // Starts an all-reduce of `tensors` in place, as AllReduceAsync does for
  // one buffer; they must stay unchanged by others until the future is
  // ready. The default reduces them one by one, synchronously.
  virtual std::shared_future<absl::Status> AllReduceListAsync(
      ReduceOp op, std::vector<Tensor> tensors);

  // Makes the calling thread's current stream wait for every collective
  // this replica started; their futures must all be ready. A ready future
  // means the result is complete, except while the step is being recorded
  // into a CUDA graph (Strategy::CaptureRun): then it is only enqueued, on
  // another stream, and a consumer calls this before using the results.
  virtual absl::Status OrderAfterCollectives() { return absl::OkStatus(); }

  // Size of the gradient buckets of AllReduceGradients
  // (distribute.bucket_bytes).
  virtual int64_t bucket_bytes() const { return 25 << 20; }
  // The gradients of `target` with respect to `sources` recorded on `tape`
  // (zeros where unconnected), SUM-all-reduced over the replicas: packed
  // into buckets whose all-reduce starts during backward, as soon as their
  // gradients are final (gradient_buckets.h). The one call a training loop
  // makes per replica and step, so communication never appears in it.
  // `accumulated` (gradient accumulation): empty, or one tensor per source,
  // the local sum of the step's earlier micro-batches (AccumulateGradients),
  // added to each gradient before it is packed, so a step of any number of
  // micro-batches all-reduces once. Consumes the tape's Gradient() call.
  absl::StatusOr<std::vector<Tensor>> AllReduceGradients(
      GradientTape& tape, const Tensor& target,
      absl::Span<const Tensor> sources,
      absl::Span<const Tensor> accumulated = {});

  // Whether this replica's peers share its memory (logical devices with
  // the local all-reduce, in one process), so ShareGradients may stand in
  // for AllReduceGradients where the consumer sums the replicas' gradients
  // itself. Share and EndShare as CrossDeviceOps's, for this replica; the
  // defaults are Unimplemented.
  virtual bool shares_memory() const { return false; }
  virtual absl::StatusOr<std::vector<std::vector<Tensor>>> Share(
      absl::Span<Tensor> tensors);
  virtual absl::Status EndShare();
  // AllReduceGradients without the reduction: the gradients (accumulated
  // added, zeros where unconnected) of every replica, per source in
  // replica order (result[source][replica]), for an update that adds them
  // where it reads them (ops::UpdateTarget::more_grads): the sum an
  // all-reduce would make, bit for bit, without its pass over every copy.
  // The caller calls EndShare() after enqueueing its reads, before the
  // result goes. Consumes the tape's Gradient() call.
  absl::StatusOr<std::vector<std::vector<Tensor>>> ShareGradients(
      GradientTape& tape, const Tensor& target,
      absl::Span<const Tensor> sources,
      absl::Span<const Tensor> accumulated = {});
};

// Gradient accumulation without communication: adds the gradients of
// `target` with respect to `sources` (zeros where unconnected) to `sums`
// (empty: sets them). Consumes the tape's Gradient() call.
absl::Status AccumulateGradients(GradientTape& tape, const Tensor& target,
                                 absl::Span<const Tensor> sources,
                                 std::vector<Tensor>& sums);

using ReplicaFn = std::function<absl::Status(ReplicaContext&)>;

// A point in the device work of every replica (Strategy::Fence): what was
// enqueued before it. Inputs that work reads from memory of other streams
// (staged batches, pinned host buffers) stay alive until it is reached;
// host buffers it writes are read after. Empty: nothing was pending.
class DeviceFence {
 public:
  DeviceFence() = default;
  explicit DeviceFence(std::vector<cuda::Event> events)
      : events_(std::move(events)) {}
  // Blocks the calling thread until every replica has reached the point.
  absl::Status Wait() const;

 private:
  std::vector<cuda::Event> events_;
};

// Where the training state (variables, optimizer slots, EMA shadows) lives,
// which decides how a training loop applies an update.
enum class VariablePlacement {
  // A copy per replica; every replica applies the same reduced update
  // (MirroredStrategy, OneDeviceStrategy).
  kMirrored,
  // One copy on variables_device(); replicas read it each step and the
  // reduced update is applied there once (CentralStorageStrategy).
  kCentral,
  // Partitioned over parameter-server devices; replicas are asynchronous
  // workers that read, compute and push on their own
  // (ParameterServerStrategy).
  kParameterServers,
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The replicas of this process (one per entry of devices()).
  virtual int num_replicas() const = 0;
  virtual const std::vector<Device>& devices() const = 0;
  // The replicas of every process of the job, and the global index of this
  // process's first (ReplicaContext::global_replica_id).
  virtual int num_replicas_in_sync() const { return num_replicas(); }
  virtual int first_replica() const { return 0; }
  // Runs `fn` once per replica; returns the first replica error.
  virtual absl::Status Run(const ReplicaFn& fn) = 0;
  // As Run, but returns once `fn` has returned on every replica, its device
  // work possibly still queued (see the header comment): a training loop
  // prepares the next step while the devices run this one. The default
  // is Run, for strategies whose device work is done when `fn` returns.
  virtual absl::Status Enqueue(const ReplicaFn& fn) { return Run(fn); }
  // The point after every replica's work enqueued so far. The default is
  // empty, for strategies that leave nothing pending.
  virtual absl::StatusOr<DeviceFence> Fence() { return DeviceFence(); }
  virtual VariablePlacement variable_placement() const {
    return VariablePlacement::kMirrored;
  }
  // The device holding the one copy of the state (kCentral); the first
  // replica's device otherwise.
  virtual Device variables_device() const { return devices()[0]; }
  // Reduces one host value per replica (metrics): sum or mean.
  static double Reduce(ReduceOp op, absl::Span<const double> per_replica);
  // Collectives (all-reduces, one per gradient bucket; a share and its end
  // count two) replica 0 has started
  // since creation, eagerly or into a graph (replays are not counted);
  // every replica starts the same ones. 0 where nothing is communicated
  // (one device). For tests and tools; read between Run/Enqueue calls.
  virtual int64_t collectives_started() const { return 0; }

  // CUDA graphs of whole steps (train.cuda_graph). OK when CaptureRun can
  // record this strategy's steps, else FailedPrecondition saying why not.
  virtual absl::Status CanCaptureRuns() const;
  // Records one call of `fn` per replica, as Run would make it, into one
  // graph over every replica's streams, collectives included, running
  // nothing: `fn` may only enqueue device work (no host reads or
  // synchronisation). The device memory it allocates comes from a pool of
  // the graph's own. A failed recording leaves the strategy usable.
  virtual absl::StatusOr<cuda::CudaGraph> CaptureRun(const ReplicaFn& fn);
  // Enqueues a graph CaptureRun recorded: each replica's part is ordered
  // after that replica's earlier work and before its later work, as an
  // Enqueue of `fn` would be. Returns without waiting (Fence).
  virtual absl::Status Replay(const cuda::CudaGraph& graph);
};

// The first error of `per_replica` that is neither Cancelled (another
// replica's failure passed on) nor Aborted (an abort it caused in the
// others): the root cause; else the first Aborted one, else the first
// error; prefixed with "<what> <index>: "; OK when all are.
absl::Status RootCause(absl::Span<const absl::Status> per_replica,
                       absl::string_view what);

// Copies `parts` into consecutive elements of `buffer` on the current
// stream (see PackAndAllReduceAsync); no parts: leaves buffer as it is.
absl::Status PackInto(absl::Span<const Tensor> parts, const Tensor& buffer);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_STRATEGY_H_
