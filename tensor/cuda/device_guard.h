// RAII: makes a GPU current for a scope and restores the previous one.
#ifndef MIRRORTRAIN_TENSOR_CUDA_DEVICE_GUARD_H_
#define MIRRORTRAIN_TENSOR_CUDA_DEVICE_GUARD_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_check.h"

namespace mirrortrain::cuda {

class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);  // Best effort; no throw.
  }
  absl::Status Set(int device) {
    int current = 0;
    MT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    if (current != device) {
      MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      previous_ = current;
    }
    return absl::OkStatus();
  }

 private:
  int previous_ = -1;
};

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_DEVICE_GUARD_H_
