#include <cuda_runtime.h>

#include <utility>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/stream.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

cudaStream_t AsStream(StreamHandle handle) {
  return handle != nullptr ? static_cast<cudaStream_t>(handle)
                           : cudaStreamPerThread;
}

}  // namespace

absl::StatusOr<Stream> Stream::Create(int device, StreamPriority priority) {
  MT_RETURN_IF_ERROR(CheckDevice(device));
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  int least = 0, greatest = 0;
  if (priority == StreamPriority::kHigh) {
    MT_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetStreamPriorityRange(&least, &greatest));
  }
  cudaStream_t stream = nullptr;
  MT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(
      &stream, cudaStreamNonBlocking,
      priority == StreamPriority::kHigh ? greatest : least));
  Stream s;
  s.handle_ = stream;
  s.device_ = device;
  return s;
}

Stream::Stream(Stream&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      device_(std::exchange(other.device_, -1)) {}

// The old handle leaves with `other` and is released there.
Stream& Stream::operator=(Stream&& other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(device_, other.device_);
  return *this;
}

Stream::~Stream() {
  if (handle_ == nullptr) return;
  // Destruction must not fail: the driver finishes pending work first.
  DeviceGuard guard;
  (void)guard.Set(device_);
  cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

absl::Status Stream::Synchronize() const {
  MT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(AsStream(handle_)));
  return absl::OkStatus();
}

absl::StatusOr<int> Stream::Priority() const {
  int priority = 0;
  MT_CUDA_RETURN_IF_ERROR(cudaStreamGetPriority(AsStream(handle_), &priority));
  return priority;
}

absl::StatusOr<Event> Event::Create(int device) {
  // No CheckDevice (a driver query): events are made per step, and a bad
  // device fails in cudaSetDevice anyway.
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaEvent_t event = nullptr;
  MT_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  Event e;
  e.handle_ = event;
  e.device_ = device;
  return e;
}

Event::Event(Event&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      device_(std::exchange(other.device_, -1)) {}

// The old handle leaves with `other` and is released there.
Event& Event::operator=(Event&& other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(device_, other.device_);
  return *this;
}

Event::~Event() {
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

absl::Status Event::Record(StreamHandle stream) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device_));
  MT_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(static_cast<cudaEvent_t>(handle_), AsStream(stream)));
  return absl::OkStatus();
}

absl::Status Event::MakeStreamWait(StreamHandle stream) const {
  // The per-thread default stream (nullptr) is the event's device's, as
  // for the kernels of that device's tensors (which set their device).
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device_));
  MT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(
      AsStream(stream), static_cast<cudaEvent_t>(handle_), 0));
  return absl::OkStatus();
}

absl::Status Event::Synchronize() const {
  MT_CUDA_RETURN_IF_ERROR(
      cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
  return absl::OkStatus();
}

absl::StatusOr<bool> Event::Query() const {
  const cudaError_t result = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (result == cudaErrorNotReady) return false;
  MT_CUDA_RETURN_IF_ERROR(result);
  return true;
}

}  // namespace mirrortrain::cuda
