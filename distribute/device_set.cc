#include "distribute/device_set.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

absl::StatusOr<std::vector<Device>> ResolveDevices(
    const std::vector<std::string>& entries) {
  if (entries.empty()) {
    return absl::InvalidArgumentError("the device list is empty");
  }
  std::vector<Device> devices;
  if (entries.size() == 1 && entries[0] == "all_gpus") {
    const int count = cuda::DeviceCount();
    if (count == 0) {
      return absl::InvalidArgumentError(
          "all_gpus requested but no GPU is visible");
    }
    for (int i = 0; i < count; ++i) devices.push_back(Device::Cuda(i));
    return devices;
  }
  for (const std::string& entry : entries) {
    if (entry == "all_gpus") {
      return absl::InvalidArgumentError(
          "all_gpus must be the only entry of the device list");
    }
    MT_ASSIGN_OR_RETURN(Device d, ParseDevice(entry));
    if (d.is_cuda()) MT_RETURN_IF_ERROR(cuda::CheckDevice(d.index));
    // A GPU listed again is one more logical replica on it; CPU entries
    // are logical devices already (cpu:0, cpu:1, ...).
    if (d.is_cpu() &&
        std::find(devices.begin(), devices.end(), d) != devices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", entry, " is listed twice"));
    }
    if (!devices.empty() && devices[0].type != d.type) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", entry, " mixes CPU and GPU devices"));
    }
    devices.push_back(d);
  }
  return devices;
}

bool DistinctGpus(const std::vector<Device>& devices) {
  if (devices.empty() || !devices[0].is_cuda()) return false;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].is_cuda()) return false;
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) return false;
    }
  }
  return true;
}

}  // namespace mirrortrain::distribute
