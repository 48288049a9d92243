#include "distribute/central_storage_strategy.h"

#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

absl::StatusOr<std::unique_ptr<CentralStorageStrategy>>
CentralStorageStrategy::Create(const std::vector<Device>& devices,
                               Device variables_device,
                               const MirroredOptions& options) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<MirroredStrategy> compute,
                      MirroredStrategy::Create(devices, options));
  return std::unique_ptr<CentralStorageStrategy>(
      new CentralStorageStrategy(std::move(compute), variables_device));
}

}  // namespace mirrortrain::distribute
