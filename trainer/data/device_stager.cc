#include "trainer/data/device_stager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "distribute/strategy.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {

absl::StatusOr<std::unique_ptr<DeviceStager>> DeviceStager::Create(
    const std::vector<Device>& replica_devices, int first_replica,
    int replicas_in_sync) {
  std::unique_ptr<DeviceStager> stager(new DeviceStager());
  stager->devices_ = replica_devices;
  stager->first_replica_ = first_replica;
  stager->replicas_in_sync_ = replicas_in_sync > 0
                                  ? replicas_in_sync
                                  : static_cast<int>(replica_devices.size());
  MT_ASSIGN_OR_RETURN(stager->pinned_, cuda::PinnedHostAllocator());
  for (const Device& d : replica_devices) {
    if (!d.is_cuda()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DeviceStager: replica device ", d.ToString(), " is not a GPU"));
    }
    if (stager->streams_.contains(d.index)) continue;
    MT_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(d.index));
    stager->streams_.emplace(d.index, std::move(stream));
  }
  return stager;
}

absl::StatusOr<Tensor> DeviceStager::CopyRows(const Tensor& source,
                                              int64_t begin, int64_t count,
                                              Device device) {
  MT_ASSIGN_OR_RETURN(Tensor rows, source.SliceRows(begin, count));
  // Allocated under the copy stream, so the block is ordered after it.
  MT_ASSIGN_OR_RETURN(Tensor on_device,
                      Tensor::Empty(rows.dtype(), rows.shape(), device));
  MT_RETURN_IF_ERROR(cuda::CopyAsync(on_device.raw_data(), device,
                                     rows.raw_data(), Device::Cpu(),
                                     rows.bytes()));
  return on_device;
}

absl::Status DeviceStager::Stage(Batch& batch) {
  const int n = static_cast<int>(devices_.size());
  const int64_t rows = batch.labels.dim(0);
  batch.device_shards.clear();
  for (int r = 0; r < n; ++r) {
    const Device device = devices_[r];
    const distribute::ShardRange shard =
        distribute::ShardOf(rows, first_replica_ + r, replicas_in_sync_);
    const cuda::Stream& stream = streams_.at(device.index);
    cuda::ScopedCurrentStream current(stream.handle());
    DeviceShard out;
    const int64_t count = shard.end - shard.begin;
    MT_ASSIGN_OR_RETURN(out.images,
                        CopyRows(batch.images, shard.begin, count, device));
    MT_ASSIGN_OR_RETURN(out.labels,
                        CopyRows(batch.labels, shard.begin, count, device));
    MT_ASSIGN_OR_RETURN(cuda::Event ready, cuda::Event::Create(device.index));
    MT_RETURN_IF_ERROR(ready.Record(stream.handle()));
    out.ready = std::make_shared<cuda::Event>(std::move(ready));
    batch.device_shards.push_back(std::move(out));
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
