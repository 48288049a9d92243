// device_slice_sum.h without CUDA.
#include "distribute/device_slice_sum.h"

namespace mirrortrain::distribute {

absl::Status DeviceSliceSum(DType, absl::Span<void* const>, int64_t, int64_t,
                            bool, int) {
  return absl::FailedPreconditionError(
      "device all-reduce: this mirrortrain was built without CUDA");
}

}  // namespace mirrortrain::distribute
