#include "distribute/strategy_factory.h"

#include "absl/strings/str_cat.h"
#include "distribute/one_device_strategy.h"

namespace mirrortrain::distribute {

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    const std::string& name, const std::vector<Device>& devices,
    const MirroredOptions&) {
  if (devices.empty()) return absl::InvalidArgumentError("no devices");
  if (name == "one_device" || (name == "mirrored" && devices.size() == 1)) {
    return std::make_unique<OneDeviceStrategy>(devices[0]);
  }
  return absl::UnimplementedError(
      absl::StrCat("strategy '", name, "' over ", devices.size(),
                   " devices is not implemented yet"));
}

}  // namespace mirrortrain::distribute
