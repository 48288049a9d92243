// A device a tensor lives on: the host CPU or one CUDA GPU.
//
// Several logical CPU devices (`cpu:0`, `cpu:1`) share the host's memory; the
// index only tells replicas apart (see distribute/).
#ifndef MIRRORTRAIN_TENSOR_DEVICE_H_
#define MIRRORTRAIN_TENSOR_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device Cpu(int index = 0) { return {DeviceType::kCpu, index}; }
  static Device Cuda(int index) { return {DeviceType::kCuda, index}; }

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  // Whether two devices address the same memory (all CPUs do).
  bool SameMemory(const Device& other) const {
    return type == other.type && (is_cpu() || index == other.index);
  }
  std::string ToString() const;  // "cpu:0", "gpu:1"
  friend bool operator==(const Device&, const Device&) = default;
};

// Parses "cpu:K" or "gpu:K" (also "cpu" meaning cpu:0).
absl::StatusOr<Device> ParseDevice(absl::string_view text);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_DEVICE_H_
