#include "distribute/one_device_strategy.h"

#include <utility>
#include <vector>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
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
  return CatchExceptions([&] { return fn(ctx); });
}

absl::StatusOr<DeviceFence> OneDeviceStrategy::Fence() {
  if (!devices_[0].is_cuda()) return DeviceFence();
  MT_ASSIGN_OR_RETURN(cuda::Event e, cuda::Event::Create(devices_[0].index));
  MT_RETURN_IF_ERROR(e.Record(cuda::CurrentStream()));
  std::vector<cuda::Event> events;
  events.push_back(std::move(e));
  return DeviceFence(std::move(events));
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
