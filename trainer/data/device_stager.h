// Copies each training batch's replica shards to their GPUs ahead of the
// step that uses them: called on the input pipeline's worker thread
// (BatchIteratorOptions::stage), it copies each shard asynchronously from
// the batch (gathered into pinned memory, see host_allocator()) on a copy
// stream per GPU, recording
// an event the replica's compute stream waits on. The copies so overlap
// the steps before instead of stalling the step that needs them.
//
// Thread contract: Stage() from one thread at a time (the worker's). The
// stager must outlive the iterator that calls it.
#ifndef MIRRORTRAIN_TRAINER_DATA_DEVICE_STAGER_H_
#define MIRRORTRAIN_TRAINER_DATA_DEVICE_STAGER_H_

#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/allocator.h"
#include "tensor/cuda/stream.h"
#include "tensor/device.h"
#include "trainer/data/batch_iterator.h"

namespace mirrortrain::trainer {

class DeviceStager {
 public:
  // One entry per replica of this process, in replica order; all GPUs.
  // They are global replicas first_replica.. of `replicas_in_sync` (0: as
  // many as replica_devices), whose shards they take.
  static absl::StatusOr<std::unique_ptr<DeviceStager>> Create(
      const std::vector<Device>& replica_devices, int first_replica = 0,
      int replicas_in_sync = 0);

  // Fills batch.device_shards (contiguous shards as distribute::ShardOf).
  // The copies read batch.images/labels until `ready`: they must stay alive
  // and unchanged until then, and should be pinned (host_allocator()) for
  // the copies to be asynchronous.
  absl::Status Stage(Batch& batch);

  // Pinned host memory to gather batches into.
  Allocator* host_allocator() const { return pinned_; }

 private:
  DeviceStager() = default;
  absl::StatusOr<Tensor> CopyRows(const Tensor& source, int64_t begin,
                                  int64_t count, Device device);

  std::vector<Device> devices_;
  int first_replica_ = 0, replicas_in_sync_ = 0;
  std::map<int, cuda::Stream> streams_;  // Copy stream per GPU index.
  Allocator* pinned_ = nullptr;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_DEVICE_STAGER_H_
