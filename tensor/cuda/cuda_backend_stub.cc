// Stand-in for the CUDA runtime functions (devices, memory, copies) in
// builds without CUDA. Kernels need none: see cuda_kernel.h.
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/not_built.h"

namespace mirrortrain::cuda {
namespace {

absl::Status NotBuilt() { return NotBuiltError(); }

}  // namespace

bool Built() { return false; }
int DeviceCount() { return 0; }
absl::Status CheckDevice(int device) {
  return absl::FailedPreconditionError(
      absl::StrCat("gpu:", device,
                   " requested but this mirrortrain was built without CUDA"));
}
absl::Status StartDevices(const std::vector<int>&) { return NotBuilt(); }
absl::Status CheckKernelImages(const std::vector<int>&) { return NotBuilt(); }
absl::StatusOr<Allocator*> DeviceAllocator(int) { return NotBuilt(); }
absl::StatusOr<DeviceMemoryStats> GetDeviceMemoryStats(int) {
  return NotBuilt();
}
void SetCurrentStream(StreamHandle) {}
StreamHandle CurrentStream() { return nullptr; }
absl::Status Memset(void*, int, size_t, int) { return NotBuilt(); }
absl::Status Copy(void*, Device, const void*, Device, size_t) {
  return NotBuilt();
}
absl::Status Synchronize(int) { return NotBuilt(); }
absl::StatusOr<Allocator*> PinnedHostAllocator() { return NotBuilt(); }
absl::Status CopyAsync(void*, Device, const void*, Device, size_t) {
  return NotBuilt();
}

}  // namespace mirrortrain::cuda
