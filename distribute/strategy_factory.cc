#include "distribute/strategy_factory.h"

#include "absl/strings/str_cat.h"
#include "distribute/mirrored_strategy.h"
#include "distribute/one_device_strategy.h"

namespace mirrortrain::distribute {

std::vector<std::string> StrategyNames() { return {"one_device", "mirrored"}; }

std::vector<std::string> CrossDeviceOpsNames() {
  return {"auto", "nccl", "local", "none"};
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    const std::string& name, const std::vector<Device>& devices,
    const MirroredOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  if (name == "one_device") {
    if (devices.size() != 1) {
      return absl::InvalidArgumentError("one_device takes exactly one device");
    }
    return std::make_unique<OneDeviceStrategy>(devices[0]);
  }
  if (name == "mirrored") {
    auto s = MirroredStrategy::Create(devices, options);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Strategy>(std::move(*s));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown strategy '", name, "'"));
}

}  // namespace mirrortrain::distribute
