// Owned CUDA streams and events, for ordering a replica's compute and
// communication work (distribute/mirrored_strategy.cc). As cuda_backend.h:
// no CUDA types cross this header; without CUDA, Create() fails with
// FailedPrecondition and ScopedCurrentStream is a no-op.
//
// Thread contract: a Stream or Event may be used from any thread, but one
// owner destroys it, after the work using it is done.
#ifndef MIRRORTRAIN_TENSOR_CUDA_STREAM_H_
#define MIRRORTRAIN_TENSOR_CUDA_STREAM_H_

#include "absl/status/statusor.h"
#include "tensor/cuda/cuda_backend.h"

namespace mirrortrain::cuda {

// How the block scheduler ranks a stream's kernels against other streams'
// pending ones (it never preempts blocks already running): kHigh is the
// device's greatest priority. A kernel captured into a graph keeps its
// stream's priority (CudaGraph instantiates with node priorities).
enum class StreamPriority { kNormal, kHigh };

// A non-blocking stream on one device (does not serialise with the legacy
// default stream).
class Stream {
 public:
  static absl::StatusOr<Stream> Create(
      int device, StreamPriority priority = StreamPriority::kNormal);
  Stream() = default;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  StreamHandle handle() const { return handle_; }
  int device() const { return device_; }
  // Blocks the calling thread until the stream's work is done.
  absl::Status Synchronize() const;
  // The priority as CUDA numbers it: 0 normal, lower runs first.
  absl::StatusOr<int> Priority() const;

 private:
  StreamHandle handle_ = nullptr;
  int device_ = -1;
};

// A marker in a stream's work (timing disabled: ordering only).
class Event {
 public:
  static absl::StatusOr<Event> Create(int device);
  Event() = default;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  // Marks the point after everything enqueued so far on `stream` (nullptr:
  // the calling thread's per-thread default stream).
  absl::Status Record(StreamHandle stream);
  // Makes `stream`'s later work wait for the recorded point (no host wait;
  // nullptr: the calling thread's per-thread default stream of the event's
  // device).
  absl::Status MakeStreamWait(StreamHandle stream) const;
  // Blocks the calling thread until the recorded point is reached.
  absl::Status Synchronize() const;
  // Whether the recorded point was reached, without waiting (any thread).
  absl::StatusOr<bool> Query() const;

 private:
  void* handle_ = nullptr;
  int device_ = -1;
};

// Makes `stream` the calling thread's current stream (see cuda_backend.h)
// for the scope, then restores the previous one.
class ScopedCurrentStream {
 public:
  explicit ScopedCurrentStream(StreamHandle stream)
      : previous_(CurrentStream()) {
    SetCurrentStream(stream);
  }
  ScopedCurrentStream(const ScopedCurrentStream&) = delete;
  ScopedCurrentStream& operator=(const ScopedCurrentStream&) = delete;
  ~ScopedCurrentStream() { SetCurrentStream(previous_); }

 private:
  StreamHandle previous_;
};

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_STREAM_H_
