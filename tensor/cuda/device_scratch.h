// RAII temporary device memory from gpu:N's caching allocator, for kernels
// that need a scratch buffer (partial sums, error flags). The allocator is
// stream-ordered: freeing right after enqueueing the kernels that use the
// buffer is safe on the current stream.
#ifndef MIRRORTRAIN_TENSOR_CUDA_DEVICE_SCRATCH_H_
#define MIRRORTRAIN_TENSOR_CUDA_DEVICE_SCRATCH_H_

#include <cstddef>

#include "absl/status/status.h"
#include "tensor/allocator.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    if (ptr_ != nullptr) allocator_->Deallocate(ptr_, bytes_);
  }

  absl::Status Allocate(int device, size_t bytes) {
    MT_ASSIGN_OR_RETURN(allocator_, DeviceAllocator(device));
    MT_ASSIGN_OR_RETURN(ptr_, allocator_->Allocate(bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_DEVICE_SCRATCH_H_
