// Everything on one device, on the calling thread; all-reduce is the
// identity (tf.distribute.OneDeviceStrategy).
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

 private:
  std::vector<Device> devices_;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_ONE_DEVICE_STRATEGY_H_
