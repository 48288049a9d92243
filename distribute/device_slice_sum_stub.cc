// device_slice_sum.h without CUDA.
#include "distribute/device_slice_sum.h"
#include "tensor/cuda/not_built.h"

namespace mirrortrain::distribute {

absl::Status DeviceSliceSum(DType, absl::Span<const SliceSegment>, bool, int) {
  return cuda::NotBuiltError();
}

}  // namespace mirrortrain::distribute
