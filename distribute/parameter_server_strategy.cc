#include "distribute/parameter_server_strategy.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "tensor/cpu_threads.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

// A worker's context: its own, never reducing.
class ParameterServerStrategy::Worker final : public ReplicaContext {
 public:
  Worker(int id, int count, Device device)
      : id_(id), count_(count), device_(device) {}
  int replica_id() const override { return id_; }
  int num_replicas() const override { return count_; }
  Device device() const override { return device_; }
  // A worker reads an input stream of its own: all of a batch is its.
  ShardRange InputShard(int64_t rows) const override { return {0, rows}; }
  bool reduces() const override { return false; }
  absl::Status AllReduce(ReduceOp, absl::Span<Tensor>) override {
    return absl::OkStatus();
  }

 private:
  const int id_, count_;
  const Device device_;
};

ParameterServerStrategy::ParameterServerStrategy(std::vector<Device> workers,
                                                 ParameterServerOptions options)
    : workers_(std::move(workers)),
      options_(std::move(options)),
      clock_(options_.max_staleness) {
  for (size_t w = 0; w < workers_.size(); ++w) {
    contexts_.push_back(std::make_unique<Worker>(
        static_cast<int>(w), static_cast<int>(workers_.size()), workers_[w]));
  }
}

ParameterServerStrategy::~ParameterServerStrategy() = default;

absl::StatusOr<std::unique_ptr<ParameterServerStrategy>>
ParameterServerStrategy::Create(const std::vector<Device>& workers,
                                const ParameterServerOptions& options) {
  if (workers.empty()) return absl::InvalidArgumentError("no devices");
  if (options.ps_devices.empty()) {
    return absl::InvalidArgumentError("distribute.ps_devices: empty");
  }
  for (const Device& d : options.ps_devices) {
    if (!d.is_cpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("distribute.ps_devices: ", d.ToString(),
                       ": parameter servers hold their shards in host memory "
                       "(cpu:K)"));
    }
  }
  if (options.min_shard_bytes < 1) {
    return absl::InvalidArgumentError(
        "distribute.ps_min_shard_bytes: must be >= 1");
  }
  // Workers on logical CPU devices share the cores, as mirrored replicas.
  const int n = static_cast<int>(workers.size());
  if (workers[0].is_cpu()) ShareCpuMathThreads(n);
  return std::unique_ptr<ParameterServerStrategy>(
      new ParameterServerStrategy(workers, options));
}

absl::Status ParameterServerStrategy::Run(const ReplicaFn& fn) {
  const int n = num_replicas();
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      status[w] = CatchExceptions([&] { return fn(*contexts_[w]); });
      if (!status[w].ok()) {
        // Cancelled: the others pass it on, and RootCause reports the
        // failed worker's own error, not theirs.
        clock_.Abort(absl::CancelledError(
            absl::StrCat("worker ", w, " failed: ", status[w].message())));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return RootCause(status, "worker");
}

}  // namespace mirrortrain::distribute
