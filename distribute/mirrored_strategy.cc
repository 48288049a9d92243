#include "distribute/mirrored_strategy.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "distribute/local_all_reduce.h"
#include "distribute/nccl_all_reduce.h"
#include "tensor/cpu_threads.h"
#include "tensor/status_macros.h"
#include "tensor/thread_pool.h"

namespace mirrortrain::distribute {

// One replica: its context, its worker thread (none for replica 0, which
// runs on the caller) and its communication thread.
class MirroredStrategy::Replica final : public ReplicaContext {
 public:
  Replica(int id, int count, Device device, CrossDeviceOps* ops)
      : id_(id), count_(count), device_(device), ops_(ops) {
    if (id > 0) worker_ = std::make_unique<ThreadPool>(1);
  }
  int replica_id() const override { return id_; }
  int num_replicas() const override { return count_; }
  Device device() const override { return device_; }

  absl::Status AllReduce(ReduceOp op, absl::Span<Tensor> tensors) override {
    for (Tensor& t : tensors) {
      MT_RETURN_IF_ERROR(AllReduceAsync(op, t).get());
    }
    return absl::OkStatus();
  }

  std::shared_future<absl::Status> AllReduceAsync(ReduceOp op,
                                                  Tensor buffer) override {
    auto done = std::make_shared<std::promise<absl::Status>>();
    std::shared_future<absl::Status> future = done->get_future().share();
    if (!ops_->overlaps_compute()) {
      done->set_value(ops_->AllReduce(id_, op, buffer));
      return future;
    }
    comm_.Post([this, op, buffer, done]() mutable {
      done->set_value(ops_->AllReduce(id_, op, buffer));
    });
    return future;
  }

  ThreadPool* worker() { return worker_.get(); }

 private:
  const int id_, count_;
  const Device device_;
  CrossDeviceOps* ops_;
  ThreadPool comm_{1};  // Runs this replica's device collectives in order.
  std::unique_ptr<ThreadPool> worker_;
};

MirroredStrategy::MirroredStrategy(std::vector<Device> devices,
                                   std::unique_ptr<CrossDeviceOps> ops)
    : devices_(std::move(devices)), ops_(std::move(ops)) {
  for (size_t r = 0; r < devices_.size(); ++r) {
    replicas_.push_back(std::make_unique<Replica>(
        static_cast<int>(r), static_cast<int>(devices_.size()), devices_[r],
        ops_.get()));
  }
}

MirroredStrategy::~MirroredStrategy() = default;

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::Create(
    const std::vector<Device>& devices, const MirroredOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  const int n = static_cast<int>(devices.size());
  // NCCL only between distinct physical GPUs (one rank per GPU).
  bool distinct_gpus = devices[0].is_cuda();
  for (int i = 0; i < n && distinct_gpus; ++i) {
    for (int j = 0; j < i; ++j) distinct_gpus &= devices[i] != devices[j];
  }
  std::string kind = options.cross_device_ops;
  if (kind == "auto") kind = distinct_gpus && n > 1 ? "nccl" : "local";
  std::unique_ptr<CrossDeviceOps> ops;
  if (kind == "nccl") {
    if (!distinct_gpus) {
      return absl::InvalidArgumentError(
          "distribute.cross_device_ops: nccl needs distinct GPU devices (NCCL "
          "allows one rank per GPU); use local");
    }
    std::vector<int> ids;
    for (const Device& d : devices) ids.push_back(d.index);
    MT_ASSIGN_OR_RETURN(ops, MakeNcclAllReduce(ids));
  } else {
    ops = std::make_unique<LocalAllReduce>(
        n, std::chrono::milliseconds(
               static_cast<int64_t>(options.watchdog_seconds * 1000)));
  }
  if (devices[0].is_cpu() && n > 1) {
    SetCpuMathThreads(std::max(1, HardwareConcurrency() / n));
  }
  return CreateWithOps(devices, std::move(ops));
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>>
MirroredStrategy::CreateWithOps(const std::vector<Device>& devices,
                                std::unique_ptr<CrossDeviceOps> ops) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  return std::unique_ptr<MirroredStrategy>(
      new MirroredStrategy(devices, std::move(ops)));
}

absl::Status MirroredStrategy::Run(const ReplicaFn& fn) {
  MT_RETURN_IF_ERROR(broken_);
  const int n = num_replicas();
  std::vector<absl::Status> status(n);
  std::vector<std::promise<void>> done(n);
  auto run_one = [&](int r) {
    status[r] = fn(*replicas_[r]);
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
  // Report the root cause, not the aborts it caused in other replicas.
  absl::Status first;
  for (int r = 0; r < n; ++r) {
    if (status[r].ok()) continue;
    if (first.ok() || (absl::IsAborted(first) && !absl::IsAborted(status[r]))) {
      first = absl::Status(status[r].code(), absl::StrCat("replica ", r, ": ",
                                                          status[r].message()));
    }
  }
  if (!first.ok()) broken_ = first;
  return first;
}

}  // namespace mirrortrain::distribute
