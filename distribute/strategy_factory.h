// Builds the strategy a config names.
#ifndef MIRRORTRAIN_DISTRIBUTE_STRATEGY_FACTORY_H_
#define MIRRORTRAIN_DISTRIBUTE_STRATEGY_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/parameter_server_strategy.h"
#include "distribute/process_group.h"
#include "distribute/strategy.h"
#include "tensor/cuda/stream.h"

namespace mirrortrain::distribute {

struct MirroredOptions {
  std::string cross_device_ops = "auto";  // auto | nccl | local | none
  int64_t bucket_bytes = 25 << 20;
  double watchdog_seconds = 300;
  // GPU replicas' communication streams (distribute.communication_priority).
  cuda::StreamPriority communication_priority = cuda::StreamPriority::kHigh;
};

// distribute.communication_priority: one of StreamPriorityNames().
std::vector<std::string> StreamPriorityNames();
absl::StatusOr<cuda::StreamPriority> ParseStreamPriority(
    const std::string& name);

// What every strategy may take from `distribute.*`; each reads its part.
struct StrategyOptions {
  MirroredOptions mirrored;                 // mirrored, central_storage
  Device variables_device = Device::Cpu();  // central_storage
  ParameterServerOptions parameter_server;  // parameter_server
  // The job's processes (not owned; null: this process alone). Only
  // mirrored spans more than one.
  ProcessGroup* processes = nullptr;
};

// The strategies MakeStrategy builds, and MirroredOptions' cross-device
// ops, for the config schema.
std::vector<std::string> StrategyNames();
std::vector<std::string> CrossDeviceOpsNames();

// `name`: one of StrategyNames().
absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    const std::string& name, const std::vector<Device>& devices,
    const StrategyOptions& options);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_STRATEGY_FACTORY_H_
