// Builds without CUDA have no NCCL.
#include "distribute/nccl_all_reduce.h"

namespace mirrortrain::distribute {

bool NcclBuilt() { return false; }

absl::StatusOr<std::unique_ptr<CrossDeviceOps>> MakeNcclAllReduce(
    const std::vector<int>&, ProcessGroup*) {
  return absl::FailedPreconditionError(
      "NCCL all-reduce requested but this mirrortrain was built without CUDA");
}

}  // namespace mirrortrain::distribute
