#include "tensor/staged_tensor.h"

#include <utility>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/status_macros.h"

namespace mirrortrain {

absl::StatusOr<StagedTensor> StagedTensor::Create(DType dtype, Shape shape,
                                                  Device device) {
  StagedTensor t;
  if (device.is_cpu()) {
    t.host_ = Tensor::HostZeros(dtype, std::move(shape));
    t.device_ = t.host_;
    return t;
  }
  MT_ASSIGN_OR_RETURN(Allocator * pinned, cuda::PinnedHostAllocator());
  MT_ASSIGN_OR_RETURN(t.host_, Tensor::EmptyWith(pinned, dtype, shape));
  MT_ASSIGN_OR_RETURN(t.device_,
                      Tensor::Zeros(dtype, std::move(shape), device));
  MT_ASSIGN_OR_RETURN(cuda::Event event, cuda::Event::Create(device.index));
  t.copied_ = std::make_unique<cuda::Event>(std::move(event));
  return t;
}

StagedTensor::~StagedTensor() {
  // Nothing to report to: a failed wait means the device is already broken.
  if (copy_pending_) copied_->Synchronize().IgnoreError();
}

StagedTensor::StagedTensor(StagedTensor&& other) noexcept
    : host_(std::move(other.host_)),
      device_(std::move(other.device_)),
      copied_(std::move(other.copied_)),
      copy_pending_(std::exchange(other.copy_pending_, false)) {}

StagedTensor& StagedTensor::operator=(StagedTensor&& other) noexcept {
  if (this != &other) {
    if (copy_pending_) copied_->Synchronize().IgnoreError();
    host_ = std::move(other.host_);
    device_ = std::move(other.device_);
    copied_ = std::move(other.copied_);
    copy_pending_ = std::exchange(other.copy_pending_, false);
  }
  return *this;
}

absl::StatusOr<Tensor> StagedTensor::Host() {
  if (copy_pending_) {
    MT_RETURN_IF_ERROR(copied_->Synchronize());
    copy_pending_ = false;
  }
  return host_;
}

absl::Status StagedTensor::Upload(BatchedCopy* batch) {
  if (device_.device().is_cpu()) return absl::OkStatus();
  if (batch != nullptr) {
    MT_RETURN_IF_ERROR(batch->AddUpload(device_.raw_data(), host_.raw_data(),
                                        static_cast<int64_t>(host_.bytes()),
                                        device_.device().index, copied_.get()));
    copy_pending_ = true;
    return absl::OkStatus();
  }
  MT_RETURN_IF_ERROR(cuda::CopyAsync(device_.raw_data(), device_.device(),
                                     host_.raw_data(), host_.device(),
                                     host_.bytes()));
  MT_RETURN_IF_ERROR(copied_->Record(cuda::CurrentStream()));
  copy_pending_ = true;
  return absl::OkStatus();
}

}  // namespace mirrortrain
