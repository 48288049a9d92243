// StagedTensor: a small tensor the host rewrites before every step and
// kernels read from the tensor's device: the per-step scalars of the update
// kernels (the optimizer's learning-rate-dependent parameters, a moving
// average's decay), passed as tensors the way TensorFlow's training ops take
// `lr` and `beta1_power`. A captured CUDA graph freezes kernel arguments, so
// values that change every step have to live in memory the graph reads.
//
// On a CPU device Host() and device() are one tensor and Upload() does
// nothing. On a GPU Host() is pinned memory; Upload() enqueues its copy to
// device() on the calling thread's current stream and records an event, and
// the next Host() waits for that event, so the host never rewrites values the
// GPU has not copied yet. Kernels that read device() must be enqueued after
// Upload() on the same stream (or a stream ordered after it); with a
// BatchedCopy, after the batch's Flush(), which then records the event.
//
// Thread contract: used by one thread at a time (its replica's). Movable.
#ifndef MIRRORTRAIN_TENSOR_STAGED_TENSOR_H_
#define MIRRORTRAIN_TENSOR_STAGED_TENSOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "tensor/batched_copy.h"
#include "tensor/cuda/stream.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"

namespace mirrortrain {

class StagedTensor {
 public:
  static absl::StatusOr<StagedTensor> Create(DType dtype, Shape shape,
                                             Device device);
  StagedTensor() = default;  // Undefined: device() is undefined.
  // Waits for a pending copy first: its pinned source goes back to a cache
  // that hands it out again.
  ~StagedTensor();
  StagedTensor(StagedTensor&& other) noexcept;
  StagedTensor& operator=(StagedTensor&& other) noexcept;

  // The host tensor to write the next values into (shares its buffer with
  // every earlier Host() result). Waits until the GPU has copied the values
  // of the previous Upload(); FailedPrecondition while that upload is in a
  // BatchedCopy not flushed yet (its values are still to be read).
  absl::StatusOr<Tensor> Host();
  // Makes device() hold what was written into Host(), in stream order;
  // with `batch`, at its Flush(), as one of its copies.
  absl::Status Upload(BatchedCopy* batch = nullptr);
  // What kernels read; its buffer never changes.
  const Tensor& device() const { return device_; }

 private:
  // Waits for the last upload's copy unless a batch still holds it.
  void WaitForCopy();

  Tensor host_;
  Tensor device_;
  // GPU only: recorded after the last Upload()'s copy (by the batch that
  // holds it, when there is one), and whether a batch still holds it.
  std::shared_ptr<cuda::Event> copied_;
  std::shared_ptr<bool> in_unflushed_batch_;
  bool copy_pending_ = false;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_STAGED_TENSOR_H_
