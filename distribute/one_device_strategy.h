// Everything on one device, on the calling thread and its current stream;
// all-reduce is the identity (tf.distribute.OneDeviceStrategy). Run never
// waits for the GPU: its work is ordered before the caller's later work on
// that stream (a host read of a result waits for it).
#ifndef MIRRORTRAIN_DISTRIBUTE_ONE_DEVICE_STRATEGY_H_
#define MIRRORTRAIN_DISTRIBUTE_ONE_DEVICE_STRATEGY_H_

#include "distribute/strategy.h"

namespace mirrortrain::distribute {

class OneDeviceStrategy final : public Strategy {
 public:
  explicit OneDeviceStrategy(Device device) : devices_{device} {}
  int num_replicas() const override { return 1; }
  const std::vector<Device>& devices() const override { return devices_; }
  absl::Status Run(const ReplicaFn& fn) override;
  // GPU: the point on the calling thread's current stream.
  absl::StatusOr<DeviceFence> Fence() override;
  // GPU only: the calling thread's current stream is recorded and replayed
  // (no synchronisation: the caller's later work is ordered after it).
  absl::Status CanCaptureRuns() const override;
  absl::StatusOr<cuda::CudaGraph> CaptureRun(const ReplicaFn& fn) override;
  absl::Status Replay(const cuda::CudaGraph& graph) override;

 private:
  std::vector<Device> devices_;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_ONE_DEVICE_STRATEGY_H_
