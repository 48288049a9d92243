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
  t.copied_ = std::make_shared<cuda::Event>(std::move(event));
  t.in_unflushed_batch_ = std::make_shared<bool>(false);
  return t;
}

// A copy still in an unflushed batch is the batch's to wait for: it holds
// the host memory until its copy is done.
StagedTensor::~StagedTensor() { WaitForCopy(); }

StagedTensor::StagedTensor(StagedTensor&& other) noexcept
    : host_(std::move(other.host_)),
      device_(std::move(other.device_)),
      copied_(std::move(other.copied_)),
      in_unflushed_batch_(std::move(other.in_unflushed_batch_)),
      copy_pending_(std::exchange(other.copy_pending_, false)) {}

StagedTensor& StagedTensor::operator=(StagedTensor&& other) noexcept {
  if (this != &other) {
    WaitForCopy();
    host_ = std::move(other.host_);
    device_ = std::move(other.device_);
    copied_ = std::move(other.copied_);
    in_unflushed_batch_ = std::move(other.in_unflushed_batch_);
    copy_pending_ = std::exchange(other.copy_pending_, false);
  }
  return *this;
}

void StagedTensor::WaitForCopy() {
  // Nothing to report to: a failed wait means the device is already broken.
  if (copy_pending_ && !*in_unflushed_batch_) {
    copied_->Synchronize().IgnoreError();
  }
}

absl::StatusOr<Tensor> StagedTensor::Host() {
  if (in_unflushed_batch_ != nullptr && *in_unflushed_batch_) {
    return absl::FailedPreconditionError(
        "StagedTensor::Host: the last upload is in a BatchedCopy not flushed "
        "yet");
  }
  if (copy_pending_) {
    MT_RETURN_IF_ERROR(copied_->Synchronize());
    copy_pending_ = false;
  }
  return host_;
}

absl::Status StagedTensor::Upload(BatchedCopy* batch) {
  if (device_.device().is_cpu()) return absl::OkStatus();
  if (batch != nullptr) {
    MT_RETURN_IF_ERROR(
        batch->AddUpload(device_, host_, copied_, in_unflushed_batch_));
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
