// NCCL all-reduce between GPUs: one communicator per device, each replica
// thread driving its own rank on its current CUDA stream. In one process
// the communicators come from ncclCommInitAll; across P processes of L GPUs
// each, process p's device i is rank p*L+i of P*L, created with
// ncclCommInitRank from an ncclUniqueId that process 0 makes and broadcasts
// over the ProcessGroup (MPI). Only in builds with CUDA
// (MIRRORTRAIN_HAVE_CUDA).
//
// NCCL allows one rank per physical GPU; replicas sharing a GPU use the
// local (device) all-reduce instead.
#ifndef MIRRORTRAIN_DISTRIBUTE_NCCL_ALL_REDUCE_H_
#define MIRRORTRAIN_DISTRIBUTE_NCCL_ALL_REDUCE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/cross_device_ops.h"
#include "distribute/process_group.h"

namespace mirrortrain::distribute {

// Whether this build has NCCL.
bool NcclBuilt();

// `devices` must be distinct GPUs. `processes` (may be null: this process
// alone) must list the same number of devices in every process. Fails with
// the NCCL error string when NCCL cannot initialise.
absl::StatusOr<std::unique_ptr<CrossDeviceOps>> MakeNcclAllReduce(
    const std::vector<int>& devices, ProcessGroup* processes = nullptr);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_NCCL_ALL_REDUCE_H_
