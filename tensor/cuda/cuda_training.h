// CUDA launchers of the training ops (ops/training_ops.h), in the style of
// cuda_backend.h: no CUDA types cross this header; without CUDA every call
// returns FailedPrecondition (cuda_kernel.h). Kernels run on the
// calling thread's current stream and are not synchronised.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_kernel.h"
#include "tensor/dtype.h"
#include "tensor/update_rules.h"

namespace mirrortrain::cuda {

// Device pointers of n elements each; s0/s1 may be null when the rule has
// fewer slots. `params`: an UpdateParams<T> in device memory, read by the
// kernel when it runs (not when it is enqueued).
MT_CUDA_KERNEL(ApplyUpdate,
               absl::Status(UpdateRule rule, DType dtype, const void* params,
                            const void* grad, void* var, void* s0, void* s1,
                            int64_t n, int device));

// `one_minus_decay`: one element of `dtype` in device memory.
MT_CUDA_KERNEL(MovingAverage,
               absl::Status(DType dtype, const void* one_minus_decay,
                            const void* value, void* shadow, int64_t n,
                            int device));

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_
