// The devices a job runs on, from `distribute.devices`.
#ifndef MIRRORTRAIN_DISTRIBUTE_DEVICE_SET_H_
#define MIRRORTRAIN_DISTRIBUTE_DEVICE_SET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/device.h"

namespace mirrortrain::distribute {

// Parses entries such as "cpu:0", "gpu:1" or the single entry "all_gpus"
// (every visible GPU). A GPU may be listed more than once: each entry is a
// logical replica on it ([gpu:0, gpu:0] runs two replicas on GPU 0). A
// repeated CPU entry, GPUs that are not visible, and mixing CPU with GPU
// devices are errors that say which entry is wrong.
absl::StatusOr<std::vector<Device>> ResolveDevices(
    const std::vector<std::string>& entries);

// Whether `devices` are GPUs, none listed twice: what NCCL takes (one rank
// per GPU).
bool DistinctGpus(const std::vector<Device>& devices);

// The error for cross_device_ops nccl on other devices.
inline constexpr char kNcclNeedsDistinctGpus[] =
    "nccl needs distinct GPU devices (NCCL allows one rank per GPU); use "
    "local";

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_DEVICE_SET_H_
