#include "distribute/one_device_strategy.h"

#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

class SingleReplicaContext final : public ReplicaContext {
 public:
  explicit SingleReplicaContext(Device device) : device_(device) {}
  int replica_id() const override { return 0; }
  int num_replicas() const override { return 1; }
  Device device() const override { return device_; }
  // Sum and mean over one replica are the identity.
  absl::Status AllReduce(ReduceOp, absl::Span<Tensor>) override {
    return absl::OkStatus();
  }

 private:
  Device device_;
};

}  // namespace

absl::Status OneDeviceStrategy::Run(const ReplicaFn& fn) {
  SingleReplicaContext ctx(devices_[0]);
  return CatchAllocationFailure([&] { return fn(ctx); });
}

absl::Status OneDeviceStrategy::CanCaptureRuns() const {
  if (devices_[0].is_cuda()) return absl::OkStatus();
  return absl::FailedPreconditionError("the replicas are not on GPUs");
}

absl::StatusOr<cuda::CudaGraph> OneDeviceStrategy::CaptureRun(
    const ReplicaFn& fn) {
  MT_RETURN_IF_ERROR(CanCaptureRuns());
  const uint64_t pool = cuda::NewGraphMemoryPoolId();
  cuda::ScopedCapture capture(devices_[0].index, pool);
  cuda::ScopedGraphMemoryPool scope(pool);
  MT_RETURN_IF_ERROR(capture.Begin());
  MT_RETURN_IF_ERROR(Run(fn));
  return capture.End();
}

absl::Status OneDeviceStrategy::Replay(const cuda::CudaGraph& graph) {
  return graph.Launch();
}

}  // namespace mirrortrain::distribute
