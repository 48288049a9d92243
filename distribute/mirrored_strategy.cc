#include "distribute/mirrored_strategy.h"

#include <atomic>
#include <functional>
#include <latch>
#include <optional>

#include "absl/strings/str_cat.h"
#include "distribute/device_set.h"
#include "distribute/local_all_reduce.h"
#include "distribute/multi_process_all_reduce.h"
#include "distribute/nccl_all_reduce.h"
#include "tensor/cpu_threads.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/stream.h"
#include "tensor/status_macros.h"
#include "tensor/thread_pool.h"

namespace mirrortrain::distribute {
namespace {

// distribute.cross_device_ops: none. Leaves every buffer as it is, so the
// replicas drift apart: only for measuring how much of a step the
// communication costs (scripts/bench_gpu.sh), never for training.
class NoCommunication final : public CrossDeviceOps {
 public:
  absl::Status AllReduce(int, ReduceOp, Tensor&) override {
    return absl::OkStatus();
  }
  void Abort(const absl::Status&) override {}
  absl::Status Recover() override { return absl::OkStatus(); }
  std::string name() const override { return "none"; }
  bool records_into_graphs() const override { return true; }
  bool reduces() const override { return false; }
};

}  // namespace

// One replica: its context, its worker thread (none for replica 0, which
// runs on the caller) and its communication thread.
class MirroredStrategy::Replica final : public ReplicaContext {
 public:
  Replica(int id, int count, int first, int in_sync, Device device,
          CrossDeviceOps* ops, CollectiveWatchdog* watchdog)
      : id_(id),
        count_(count),
        first_(first),
        in_sync_(in_sync),
        device_(device),
        ops_(ops),
        watchdog_(watchdog) {
    if (id > 0) worker_ = std::make_unique<ThreadPool>(1);
  }
  int replica_id() const override { return id_; }
  int num_replicas() const override { return count_; }
  int global_replica_id() const override { return first_ + id_; }
  int num_replicas_in_sync() const override { return in_sync_; }
  Device device() const override { return device_; }
  bool reduces() const override { return in_sync_ > 1 && ops_->reduces(); }
  int64_t bucket_bytes() const override { return bucket_bytes_; }
  void set_bucket_bytes(int64_t bytes) { bucket_bytes_ = bytes; }

  absl::Status AllReduce(ReduceOp op, absl::Span<Tensor> tensors) override {
    // One collective for the whole list where the ops take lists of one
    // dtype and device (synchronized batch norm's statistics), and no two
    // tensors share memory (those are reduced in turn, as before).
    bool one_list = reduces_lists() && !tensors.empty();
    for (size_t i = 0; i < tensors.size(); ++i) {
      one_list &= tensors[i].dtype() == tensors[0].dtype() &&
                  tensors[i].device() == tensors[0].device();
      for (size_t j = 0; j < i; ++j) {
        one_list &= !tensors[i].SharesBufferWith(tensors[j]);
      }
    }
    if (one_list) {
      // Every replica's tensors must have the same sizes, as one by one.
      MT_RETURN_IF_ERROR(
          Start(
              {op, {tensors.begin(), tensors.end()}, Tensor(), ListCuts::kSame})
              .get());
    } else {
      for (Tensor& t : tensors) {
        MT_RETURN_IF_ERROR(AllReduceAsync(op, t).get());
      }
    }
    return OrderAfterCollectives();
  }

  absl::Status OrderAfterCollectives() override {
    // Eagerly a collective is complete when its future is; recorded ones
    // end at the communication stream's last recorded point.
    if (!capturing_ || !tail_recorded_) return absl::OkStatus();
    return captured_tail_.MakeStreamWait(compute_.handle());
  }

  // CaptureRun's recording of `fn` on this replica, on its thread with its
  // compute stream current and already part of the capture. Its
  // allocations come from the graph's pool `pool`; its collectives are
  // recorded on the communication stream, which has rejoined the compute
  // stream when this returns.
  absl::Status Record(const ReplicaFn& fn, uint64_t pool) {
    capturing_ = true;
    capture_pool_ = pool;
    tail_recorded_ = false;
    absl::Status s;
    {
      cuda::ScopedGraphMemoryPool scope(pool);
      s = CatchExceptions([&] { return fn(*this); });
    }
    // Collectives still queued after an error are recorded (or fail) first.
    DrainCommunication();
    capture_pool_ = 0;
    absl::Status joined = OrderAfterCollectives();
    // Their blocks go back to the graph's pool, which nothing else uses.
    kept_.clear();
    capturing_ = false;
    return s.ok() ? joined : s;
  }

  // Whether a stream of this replica is still being recorded.
  absl::StatusOr<bool> Recording() const {
    if (!device_.is_cuda()) return false;
    MT_ASSIGN_OR_RETURN(bool compute,
                        cuda::StreamIsCapturing(compute_.handle()));
    MT_ASSIGN_OR_RETURN(bool comm,
                        cuda::StreamIsCapturing(communication_.handle()));
    return compute || comm;
  }

  std::shared_future<absl::Status> AllReduceAsync(ReduceOp op,
                                                  Tensor buffer) override {
    return Start({op, {}, std::move(buffer), std::nullopt});
  }
  std::shared_future<absl::Status> PackAndAllReduceAsync(
      ReduceOp op, std::vector<Tensor> parts, Tensor buffer) override {
    return Start({op, std::move(parts), std::move(buffer), std::nullopt});
  }
  bool reduces_lists() const override { return ops_->reduces_lists(); }
  // Shared on the replica thread and its compute stream (nothing to
  // overlap), after the communication thread ran every collective posted
  // before: the ops pair each replica's collectives in the order they are
  // called.
  bool shares_memory() const override {
    return in_sync_ > 1 && ops_->shares_memory();
  }
  absl::StatusOr<std::vector<std::vector<Tensor>>> Share(
      absl::Span<Tensor> tensors) override {
    DrainCommunication();
    started_.fetch_add(1, std::memory_order_relaxed);
    return ops_->Share(id_, tensors);
  }
  absl::Status EndShare() override {
    DrainCommunication();
    started_.fetch_add(1, std::memory_order_relaxed);
    return ops_->EndShare(id_);
  }
  std::shared_future<absl::Status> AllReduceListAsync(
      ReduceOp op, std::vector<Tensor> tensors) override {
    if (!reduces_lists()) {
      return ReplicaContext::AllReduceListAsync(op, std::move(tensors));
    }
    return Start({op, std::move(tensors), Tensor(), ListCuts::kAny});
  }

  // One collective of this replica: `parts` packed into `buffer` and
  // reduced, or with `list` the parts reduced in place as one list
  // (`buffer` unused).
  struct Collective {
    ReduceOp op;
    std::vector<Tensor> parts;
    Tensor buffer;
    std::optional<ListCuts> list;
  };

  std::shared_future<absl::Status> Start(Collective c) {
    const int64_t index = started_.fetch_add(1, std::memory_order_relaxed);
    auto done = std::make_shared<std::promise<absl::Status>>();
    std::shared_future<absl::Status> future = done->get_future().share();
    if (device_.is_cuda()) {
      absl::Status posted = PostDeviceAllReduce(std::move(c), index, done);
      if (!posted.ok()) done->set_value(posted);
      return future;
    }
    // Host collectives run on the cores that compute: inline, on the
    // replica thread (a thread of their own would only take turns).
    done->set_value(Reduce(c));
    return future;
  }

  // GPU replicas: a compute stream for the replica's kernels and a
  // communication stream for its collectives.
  absl::Status CreateStreams(cuda::StreamPriority communication_priority) {
    if (!device_.is_cuda()) return absl::OkStatus();
    comm_ = std::make_unique<ThreadPool>(1);
    MT_ASSIGN_OR_RETURN(compute_, cuda::Stream::Create(device_.index));
    MT_ASSIGN_OR_RETURN(
        communication_,
        cuda::Stream::Create(device_.index, communication_priority));
    MT_ASSIGN_OR_RETURN(reduced_, cuda::Event::Create(device_.index));
    MT_ASSIGN_OR_RETURN(captured_tail_, cuda::Event::Create(device_.index));
    MT_ASSIGN_OR_RETURN(order_, cuda::Event::Create(device_.index));
    return absl::OkStatus();
  }
  // Orders a replay with the other replicas' streams (Replay only).
  cuda::Event& order() { return order_; }
  // nullptr (the thread's default stream) for CPU replicas.
  cuda::StreamHandle compute_stream() const { return compute_.handle(); }
  absl::Status SynchronizeCompute() const {
    return device_.is_cuda() ? compute_.Synchronize() : absl::OkStatus();
  }

  ThreadPool* worker() { return worker_.get(); }
  int64_t collectives_started() const {
    return started_.load(std::memory_order_relaxed);
  }

 private:
  int64_t bucket_bytes_ = 25 << 20;
  // The collective waits (on the GPU, not the host) for the compute stream
  // to have produced the parts and the buffer, packs and reduces on the
  // communication stream while the compute stream goes on with backward,
  // and is finished (stream synchronised, under the watchdog) before the
  // future is set: the caller may then use the result on any stream, and
  // the tensors may be freed (the allocator's cross-stream contract).
  // Returns only errors met before posting; OkStatus means the posted task
  // will set `done` itself. Local (device kernel) and NCCL reductions both
  // take this path.
  absl::Status PostDeviceAllReduce(
      Collective c, int64_t index,
      std::shared_ptr<std::promise<absl::Status>> done) {
    MT_ASSIGN_OR_RETURN(cuda::Event ready, cuda::Event::Create(device_.index));
    MT_RETURN_IF_ERROR(ready.Record(compute_.handle()));
    auto event = std::make_shared<cuda::Event>(std::move(ready));
    comm_->Post([this, c = std::move(c), index, done, event]() mutable {
      cuda::ScopedCurrentStream scope(communication_.handle());
      // While recording, what a collective allocates belongs to the graph
      // too (pool 0, none, otherwise): eager work must never be given it.
      cuda::ScopedGraphMemoryPool memory(capture_pool_);
      absl::Status s = event->MakeStreamWait(communication_.handle());
      if (s.ok()) s = Reduce(c);
      if (capturing_) {
        // Recorded, not run: nothing to wait for. The compute stream waits
        // for the tail on the device (OrderAfterCollectives), and the
        // tensors stay referenced until the recording ends, so no later
        // recorded work on any stream is given their memory.
        if (s.ok()) s = captured_tail_.Record(communication_.handle());
        if (s.ok()) tail_recorded_ = true;
        for (Tensor& t : c.parts) kept_.push_back(std::move(t));
        if (c.buffer.defined()) kept_.push_back(std::move(c.buffer));
      } else if (s.ok()) {
        s = WaitWatched(
            absl::StrCat("all-reduce #", index, " (",
                         c.list ? absl::StrCat(c.parts.size(), " tensors")
                                : c.buffer.DebugString(),
                         ")"));
      }
      // Drop this task's references before the waiter goes on, so the
      // tensors return to their pools at a fixed point of the step.
      c.parts.clear();
      c.buffer = Tensor();
      event.reset();
      done->set_value(s);
    });
    return absl::OkStatus();
  }

  absl::Status Reduce(Collective& c) {
    if (c.list) {
      return ops_->AllReduceList(id_, c.op, absl::MakeSpan(c.parts), *c.list);
    }
    MT_RETURN_IF_ERROR(PackInto(c.parts, c.buffer));
    return ops_->AllReduce(id_, c.op, c.buffer);
  }

  // Waits for the communication stream with the watchdog watching: a
  // collective that a peer never joins is aborted and reported (its
  // ncclCommAbort ends the wait), never waited for forever.
  absl::Status WaitWatched(std::string what) {
    MT_RETURN_IF_ERROR(reduced_.Record(communication_.handle()));
    const uint64_t ticket = watchdog_->Watch(
        id_, std::move(what), [this]() -> absl::StatusOr<bool> {
          MT_RETURN_IF_ERROR(ops_->AsyncError(id_));
          return reduced_.Query();
        });
    absl::Status synced = communication_.Synchronize();
    absl::Status report = watchdog_->Finish(ticket);
    return report.ok() ? synced : report;
  }

  // Returns once the communication thread has run every task posted so far.
  void DrainCommunication() {
    if (comm_ == nullptr) return;  // CPU replicas reduce inline.
    std::promise<void> drained;
    std::future<void> done = drained.get_future();
    comm_->Post([&drained] { drained.set_value(); });
    done.wait();
  }

  const int id_, count_, first_, in_sync_;
  const Device device_;
  CrossDeviceOps* ops_;
  CollectiveWatchdog* watchdog_;  // Null for CPU replicas.
  cuda::Stream compute_, communication_;
  cuda::Event reduced_;  // After the last collective (comm thread only).
  cuda::Event order_;
  // While recording (Record): set and cleared by the replica thread around
  // `fn`; the rest written by the communication thread, read by the replica
  // thread once every collective's future is ready.
  bool capturing_ = false;
  uint64_t capture_pool_ = 0;  // The graph's memory pool while recording.
  cuda::Event captured_tail_;  // After the last recorded collective.
  bool tail_recorded_ = false;
  std::vector<Tensor> kept_;  // The recorded collectives' tensors.
  // GPU replicas: runs this replica's device collectives in order (each
  // waits for its stream under the watchdog). Null for CPU replicas.
  std::unique_ptr<ThreadPool> comm_;
  std::atomic<int64_t> started_{0};  // Collectives started (any thread).
  std::unique_ptr<ThreadPool> worker_;
};

MirroredStrategy::MirroredStrategy(std::vector<Device> devices,
                                   std::unique_ptr<CrossDeviceOps> ops,
                                   int first_replica, int replicas_in_sync,
                                   std::chrono::milliseconds watchdog)
    : devices_(std::move(devices)),
      first_replica_(first_replica),
      replicas_in_sync_(replicas_in_sync),
      ops_(std::move(ops)) {
  if (devices_[0].is_cuda()) {
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        watchdog,
        [ops = ops_.get()](const absl::Status& report) { ops->Abort(report); });
  }
  for (size_t r = 0; r < devices_.size(); ++r) {
    replicas_.push_back(std::make_unique<Replica>(
        static_cast<int>(r), static_cast<int>(devices_.size()), first_replica,
        replicas_in_sync, devices_[r], ops_.get(), watchdog_.get()));
  }
}

namespace {

// Every process must drive the same number of replicas (global replica
// indices are rank * L + local index).
absl::Status CheckSameReplicaCount(ProcessGroup& processes, int local) {
  int64_t chiefs = local;
  MT_RETURN_IF_ERROR(processes.Broadcast(&chiefs, sizeof(chiefs), 0,
                                         "the replica count check"));
  absl::Status same;
  if (chiefs != local) {
    same = absl::InvalidArgumentError(absl::StrCat(
        "distribute.devices: ", local, " device(s) here but process 0 has ",
        chiefs, "; every process must drive the same number of replicas"));
  }
  // Agreed (Agree names the process), so every process stops here alike.
  return processes.AgreedStatus(same);
}

}  // namespace

MirroredStrategy::~MirroredStrategy() = default;

int64_t MirroredStrategy::collectives_started() const {
  return replicas_[0]->collectives_started();
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::Create(
    const std::vector<Device>& devices, const MirroredOptions& options,
    ProcessGroup* processes) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  const int n = static_cast<int>(devices.size());
  const int process_count = processes != nullptr ? processes->size() : 1;
  if (process_count > 1)
    MT_RETURN_IF_ERROR(CheckSameReplicaCount(*processes, n));
  const int rank = process_count > 1 ? processes->rank() : 0;
  const std::chrono::milliseconds watchdog(
      static_cast<int64_t>(options.watchdog_seconds * 1000));
  // NCCL only between distinct physical GPUs (one rank per GPU).
  const bool distinct_gpus = DistinctGpus(devices);
  std::string kind = options.cross_device_ops;
  if (kind == "auto") {
    kind = distinct_gpus && n * process_count > 1 ? "nccl" : "local";
  }
  std::unique_ptr<CrossDeviceOps> ops;
  if (kind == "nccl") {
    if (!distinct_gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "distribute.cross_device_ops: ", kNcclNeedsDistinctGpus));
    }
    std::vector<int> ids;
    for (const Device& d : devices) ids.push_back(d.index);
    MT_ASSIGN_OR_RETURN(ops, MakeNcclAllReduce(ids, processes));
  } else if (kind == "none") {
    ops = std::make_unique<NoCommunication>();
  } else {
    for (const Device& d : devices) {
      if (d.is_cuda() && d != devices[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "distribute.devices: the local all-reduce needs all GPU replicas "
            "on one GPU (logical replicas), got ",
            devices[0].ToString(), " and ", d.ToString(),
            "; distinct GPUs use nccl"));
      }
    }
    ops = std::make_unique<LocalAllReduce>(n, watchdog);
    if (process_count > 1) {
      ops = std::make_unique<MultiProcessAllReduce>(std::move(ops), n,
                                                    processes, watchdog);
    }
  }
  // The host's cores over every replica on it, of this process and of the
  // job's other processes here: kernels then split their work as one
  // process of all those replicas does (the same bits: P processes of one
  // replica equal one process of P replicas), and the processes do not
  // oversubscribe the cores.
  const int host_replicas =
      n * (processes != nullptr ? std::max(1, processes->local_size()) : 1);
  if (devices[0].is_cpu()) ShareCpuMathThreads(host_replicas);
  MT_ASSIGN_OR_RETURN(
      std::unique_ptr<MirroredStrategy> strategy,
      CreateWithOps(devices, std::move(ops), rank * n, process_count * n,
                    watchdog, options.communication_priority));
  for (auto& replica : strategy->replicas_) {
    replica->set_bucket_bytes(options.bucket_bytes);
  }
  return strategy;
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>>
MirroredStrategy::CreateWithOps(const std::vector<Device>& devices,
                                std::unique_ptr<CrossDeviceOps> ops,
                                int first_replica, int replicas_in_sync,
                                std::chrono::milliseconds watchdog,
                                cuda::StreamPriority communication_priority) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  if (replicas_in_sync == 0) {
    replicas_in_sync = static_cast<int>(devices.size());
  }
  std::unique_ptr<MirroredStrategy> strategy(new MirroredStrategy(
      devices, std::move(ops), first_replica, replicas_in_sync, watchdog));
  for (auto& replica : strategy->replicas_) {
    MT_RETURN_IF_ERROR(replica->CreateStreams(communication_priority));
  }
  return strategy;
}

std::vector<absl::Status> MirroredStrategy::OnEveryReplica(
    const std::function<absl::Status(Replica&)>& body) {
  const int n = num_replicas();
  std::vector<absl::Status> status(n);
  std::vector<std::promise<void>> done(n);
  auto run_one = [&](int r) {
    {
      cuda::ScopedCurrentStream stream(replicas_[r]->compute_stream());
      status[r] = body(*replicas_[r]);
    }
    // A failed replica would leave the others waiting in a collective.
    if (!status[r].ok()) {
      ops_->Abort(absl::AbortedError(
          absl::StrCat("replica ", r, " failed: ", status[r].message())));
    }
    done[r].set_value();
  };
  for (int r = 1; r < n; ++r) {
    replicas_[r]->worker()->Post([&run_one, r] { run_one(r); });
  }
  run_one(0);
  for (int r = 1; r < n; ++r) done[r].get_future().wait();
  return status;
}

absl::Status MirroredStrategy::Run(const ReplicaFn& fn) {
  return RunReplicas(fn, /*wait=*/true);
}

absl::Status MirroredStrategy::Enqueue(const ReplicaFn& fn) {
  return RunReplicas(fn, /*wait=*/false);
}

absl::Status MirroredStrategy::RunReplicas(const ReplicaFn& fn, bool wait) {
  MT_RETURN_IF_ERROR(broken_);
  const std::vector<absl::Status> status = OnEveryReplica([&](Replica& r) {
    // The replica's kernels go to its compute stream; Run's are finished
    // when it returns (the caller reads results on its own stream).
    absl::Status s = CatchExceptions([&] { return fn(r); });
    absl::Status synced = wait ? r.SynchronizeCompute() : absl::OkStatus();
    return s.ok() ? synced : s;
  });
  absl::Status first = RootCause(status, "replica");
  if (!first.ok()) broken_ = first;
  return first;
}

absl::StatusOr<DeviceFence> MirroredStrategy::Fence() {
  if (!devices_[0].is_cuda()) return DeviceFence();
  std::vector<cuda::Event> events;
  for (const auto& r : replicas_) {
    MT_ASSIGN_OR_RETURN(cuda::Event e, cuda::Event::Create(r->device().index));
    MT_RETURN_IF_ERROR(e.Record(r->compute_stream()));
    events.push_back(std::move(e));
  }
  return DeviceFence(std::move(events));
}

absl::Status MirroredStrategy::CanCaptureRuns() const {
  if (!devices_[0].is_cuda()) {
    return absl::FailedPreconditionError("the replicas are not on GPUs");
  }
  if (replicas_in_sync_ > num_replicas()) {
    return absl::FailedPreconditionError(
        "steps of several processes are not recorded (a peer process that "
        "never joins a collective inside a graph could not be detected)");
  }
  for (const Device& d : devices_) {
    // One graph holds one GPU's work (its events and streams).
    if (d != devices_[0]) {
      return absl::FailedPreconditionError(
          absl::StrCat("replicas on distinct GPUs (the ", ops_->name(),
                       " collectives) are not recorded"));
    }
  }
  if (replicas_in_sync_ > 1 && !ops_->records_into_graphs()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", ops_->name(), " collectives are not recorded"));
  }
  return absl::OkStatus();
}

absl::StatusOr<cuda::CudaGraph> MirroredStrategy::CaptureRun(
    const ReplicaFn& fn) {
  MT_RETURN_IF_ERROR(broken_);
  MT_RETURN_IF_ERROR(CanCaptureRuns());
  const int n = num_replicas();
  const int device = devices_[0].index;
  // Replica r > 0 joins the capture by waiting on `fork` before its first
  // work and rejoins it by recording joins[r - 1] after its last.
  MT_ASSIGN_OR_RETURN(cuda::Event fork, cuda::Event::Create(device));
  std::vector<cuda::Event> joins;
  for (int r = 1; r < n; ++r) {
    MT_ASSIGN_OR_RETURN(cuda::Event join, cuda::Event::Create(device));
    joins.push_back(std::move(join));
  }
  const uint64_t pool = cuda::NewGraphMemoryPoolId();
  std::latch forked(1), joined(n - 1);
  bool began = false;  // Written by replica 0 before `forked` opens.
  absl::StatusOr<cuda::CudaGraph> graph =
      absl::InternalError("the capture did not end");
  const auto fail = [this](int r, const absl::Status& s) {
    // Before waiting at a latch: peers blocked in a collective with this
    // replica would never get there.
    ops_->Abort(absl::AbortedError(
        absl::StrCat("replica ", r, " failed: ", s.message())));
  };
  const std::vector<absl::Status> status = OnEveryReplica([&](Replica& r) {
    const int id = r.replica_id();
    if (id > 0) {
      forked.wait();
      absl::Status s = began ? fork.MakeStreamWait(r.compute_stream())
                             : absl::AbortedError("the capture did not begin");
      if (s.ok()) s = r.Record(fn, pool);
      if (s.ok()) s = joins[id - 1].Record(r.compute_stream());
      if (!s.ok()) fail(id, s);
      joined.count_down();
      return s;
    }
    // The graph owns the pool; a failed capture frees it when this scope
    // ends, after every replica has dropped its blocks (`joined`).
    cuda::ScopedCapture capture(device, pool);
    absl::Status s = capture.Begin();
    if (s.ok()) s = fork.Record(r.compute_stream());
    began = s.ok();
    forked.count_down();
    if (s.ok()) s = r.Record(fn, pool);
    if (!s.ok()) fail(id, s);
    joined.wait();
    for (cuda::Event& join : joins) {
      if (s.ok()) s = join.MakeStreamWait(r.compute_stream());
    }
    if (began) graph = capture.End();
    return s.ok() ? graph.status() : s;
  });
  absl::Status first = RootCause(status, "replica");
  if (first.ok()) return graph;
  RecoverFromCapture();
  return first;
}

void MirroredStrategy::RecoverFromCapture() {
  // One replica in sync starts no collectives: its aborted ops stay unused.
  absl::Status s = replicas_in_sync_ > 1 ? ops_->Recover() : absl::OkStatus();
  for (const auto& r : replicas_) {
    if (!s.ok()) break;
    absl::StatusOr<bool> recording = r->Recording();
    if (!recording.ok()) {
      s = recording.status();
    } else if (*recording) {
      s = absl::InternalError(absl::StrCat(
          "replica ", r->replica_id(),
          "'s streams are still recording after a failed capture"));
    }
  }
  if (!s.ok()) broken_ = s;
}

absl::Status MirroredStrategy::Replay(const cuda::CudaGraph& graph) {
  MT_RETURN_IF_ERROR(broken_);
  // A defined graph came from CaptureRun, which checked CanCaptureRuns.
  if (!graph.defined()) {
    return absl::FailedPreconditionError("Replay: nothing was recorded");
  }
  // The graph holds every replica's part and runs on replica 0's stream
  // (the capture's origin): it waits for the other replicas' earlier work
  // (their staged inputs), and their later work waits for it. No host wait.
  Replica& first = *replicas_[0];
  absl::Status s = absl::OkStatus();
  for (size_t r = 1; r < replicas_.size() && s.ok(); ++r) {
    s = replicas_[r]->order().Record(replicas_[r]->compute_stream());
    if (s.ok())
      s = replicas_[r]->order().MakeStreamWait(first.compute_stream());
  }
  if (s.ok()) {
    cuda::ScopedCurrentStream stream(first.compute_stream());
    s = graph.Launch();
  }
  // Only the other replicas wait for it: one replica records nothing
  // after its graph (one_device's replay is the launch alone).
  if (s.ok() && replicas_.size() > 1) {
    s = first.order().Record(first.compute_stream());
  }
  for (size_t r = 1; r < replicas_.size() && s.ok(); ++r) {
    s = first.order().MakeStreamWait(replicas_[r]->compute_stream());
  }
  if (!s.ok()) broken_ = s;
  return s;
}

}  // namespace mirrortrain::distribute
