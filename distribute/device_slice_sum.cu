#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "distribute/device_slice_sum.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

template <typename T>
struct Buffers {
  T* ptr[kMaxReplicasPerGpu];
};

template <typename T>
__global__ void SliceSumKernel(Buffers<T> buffers, int count, int64_t begin,
                               int64_t end, bool mean) {
  for (int64_t i = begin + cuda::GridStart(); i < end; i += cuda::GridStep()) {
    T acc = buffers.ptr[0][i];
    for (int r = 1; r < count; ++r) acc += buffers.ptr[r][i];
    if (mean) acc /= static_cast<T>(count);
    for (int r = 0; r < count; ++r) buffers.ptr[r][i] = acc;
  }
}

}  // namespace

absl::Status DeviceSliceSum(DType dtype, absl::Span<void* const> buffers,
                            int64_t begin, int64_t end, bool mean, int device) {
  const int count = static_cast<int>(buffers.size());
  if (count < 1 || count > kMaxReplicasPerGpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device all-reduce: ", count, " replicas share gpu:", device,
        "; at most ", kMaxReplicasPerGpu, " can"));
  }
  if (end <= begin) return absl::OkStatus();
  cuda::DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  const cudaStream_t stream = cuda::LaunchStream();
  cuda::DispatchAll(dtype, [&](auto zero) {
    using T = decltype(zero);
    Buffers<T> b{};
    for (int r = 0; r < count; ++r) b.ptr[r] = static_cast<T*>(buffers[r]);
    SliceSumKernel<<<cuda::LaunchBlocks(end - begin), cuda::kLaunchThreads, 0,
                     stream>>>(b, count, begin, end, mean);
  });
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("SliceSumKernel");
  return absl::OkStatus();
}

}  // namespace mirrortrain::distribute
