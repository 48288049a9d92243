// CUDA launchers of the training ops (ops/training_ops.h), in the style of
// cuda_backend.h: no CUDA types cross this header; without CUDA every call
// returns FailedPrecondition (cuda_kernel.h). Kernels run on the
// calling thread's current stream and are not synchronised.
//
// Each launcher takes a list of tensors and updates them all in one kernel
// launch per few dozen tensors (multi-tensor apply, as PyTorch's fused
// optimizers do): a model's many small variables would otherwise cost a
// launch each, every step. The tensors must not share buffers.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/cuda/cuda_kernel.h"
#include "tensor/dtype.h"
#include "tensor/update_rules.h"

namespace mirrortrain::cuda {

// One variable's update, device pointers of n elements each; s0/s1 null
// when the rule has fewer slots. `params`: an UpdateParams<T> in device
// memory, read by the kernel when it runs (not when it is enqueued).
// `bf16` (f32 only; null: none): n 2-byte bfloat16 values that get the
// updated variable rounded to nearest even, as ToBFloat16 writes them
// (the variable's bfloat16 copy, Buffer::bf16_copy).
struct UpdateOperands {
  const void* params = nullptr;
  const void* grad = nullptr;
  // Further terms of the gradient, added to grad in order; null past the
  // last (ops::UpdateTarget::more_grads).
  const void* more_grads[kMaxGradientTerms - 1] = {};
  void* var = nullptr;
  void* s0 = nullptr;
  void* s1 = nullptr;
  void* bf16 = nullptr;
  int64_t n = 0;
};

// shadow -= (shadow - value) * one_minus_decay, n elements each;
// `one_minus_decay`: one element of the dtype in device memory.
struct MovingAverageOperands {
  const void* one_minus_decay = nullptr;
  const void* value = nullptr;
  void* shadow = nullptr;
  int64_t n = 0;
};

// All tensors of one dtype on `device`. The kernel parameters carry the
// pointers, so a captured CUDA graph replays with the same ones.
MT_CUDA_KERNEL(ApplyUpdates,
               absl::Status(UpdateRule rule, DType dtype,
                            absl::Span<const UpdateOperands> tensors,
                            int device));
MT_CUDA_KERNEL(MovingAverages,
               absl::Status(DType dtype,
                            absl::Span<const MovingAverageOperands> tensors,
                            int device));

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_
