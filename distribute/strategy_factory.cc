#include "distribute/strategy_factory.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "distribute/central_storage_strategy.h"
#include "distribute/mirrored_strategy.h"
#include "distribute/one_device_strategy.h"
#include "distribute/parameter_server_strategy.h"

namespace mirrortrain::distribute {
namespace {

using Maker = std::function<absl::StatusOr<std::unique_ptr<Strategy>>(
    const std::vector<Device>&, const StrategyOptions&)>;

template <typename T>
absl::StatusOr<std::unique_ptr<Strategy>> Upcast(
    absl::StatusOr<std::unique_ptr<T>> s) {
  if (!s.ok()) return s.status();
  return std::unique_ptr<Strategy>(*std::move(s));
}

// The one list of strategies: names (the config schema) and builders.
const std::vector<std::pair<std::string, Maker>>& Strategies() {
  static const auto* table = new std::vector<std::pair<std::string, Maker>>{
      {"one_device",
       [](const std::vector<Device>& devices,
          const StrategyOptions&) -> absl::StatusOr<std::unique_ptr<Strategy>> {
         if (devices.size() != 1) {
           return absl::InvalidArgumentError(
               "one_device takes exactly one device");
         }
         return std::make_unique<OneDeviceStrategy>(devices[0]);
       }},
      {"mirrored",
       [](const std::vector<Device>& devices, const StrategyOptions& o) {
         return Upcast(
             MirroredStrategy::Create(devices, o.mirrored, o.processes));
       }},
      {"central_storage",
       [](const std::vector<Device>& devices, const StrategyOptions& o) {
         return Upcast(CentralStorageStrategy::Create(
             devices, o.variables_device, o.mirrored));
       }},
      {"parameter_server",
       [](const std::vector<Device>& devices, const StrategyOptions& o) {
         return Upcast(
             ParameterServerStrategy::Create(devices, o.parameter_server));
       }},
  };
  return *table;
}

}  // namespace

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& [name, maker] : Strategies()) names.push_back(name);
  return names;
}

std::vector<std::string> CrossDeviceOpsNames() {
  return {"auto", "nccl", "local", "none"};
}

std::vector<std::string> StreamPriorityNames() { return {"high", "normal"}; }

absl::StatusOr<cuda::StreamPriority> ParseStreamPriority(
    const std::string& name) {
  if (name == "high") return cuda::StreamPriority::kHigh;
  if (name == "normal") return cuda::StreamPriority::kNormal;
  return absl::InvalidArgumentError(
      absl::StrCat("distribute.communication_priority: '", name,
                   "' is not one of high, normal"));
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    const std::string& name, const std::vector<Device>& devices,
    const StrategyOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  if (options.processes != nullptr && options.processes->size() > 1 &&
      name != "mirrored") {
    return absl::InvalidArgumentError(absl::StrCat(
        "distribute.strategy: ", name,
        " runs in one process, but this job has ", options.processes->size(),
        " (an MPI launcher started it); use mirrored"));
  }
  for (const auto& [known, maker] : Strategies()) {
    if (known == name) return maker(devices, options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown strategy '", name, "'"));
}

}  // namespace mirrortrain::distribute
