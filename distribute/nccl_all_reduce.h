// NCCL all-reduce between GPUs of one process: one communicator per device
// (ncclCommInitAll), each replica thread driving its own rank on its
// current CUDA stream. Only in builds with CUDA (MIRRORTRAIN_HAVE_CUDA).
//
// NCCL allows one rank per physical GPU; replicas sharing a GPU use the
// local (device) all-reduce instead.
#ifndef MIRRORTRAIN_DISTRIBUTE_NCCL_ALL_REDUCE_H_
#define MIRRORTRAIN_DISTRIBUTE_NCCL_ALL_REDUCE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/cross_device_ops.h"

namespace mirrortrain::distribute {

// Whether this build has NCCL.
bool NcclBuilt();

// `devices` must be distinct GPUs. Fails with the NCCL error string when
// NCCL cannot initialise.
absl::StatusOr<std::unique_ptr<CrossDeviceOps>> MakeNcclAllReduce(
    const std::vector<int>& devices);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_NCCL_ALL_REDUCE_H_
