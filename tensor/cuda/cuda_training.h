// CUDA launchers of the training ops (ops/training_ops.h), in the style of
// cuda_backend.h: no CUDA types cross this header; without CUDA every call
// returns FailedPrecondition (cuda_training_stub.cc). Kernels run on the
// calling thread's current stream and are not synchronised.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tensor/dtype.h"
#include "tensor/update_rules.h"

namespace mirrortrain::cuda {

// Device pointers of n elements each; s0/s1 may be null when the rule has
// fewer slots.
absl::Status ApplyUpdate(UpdateRule rule, DType dtype,
                         const UpdateHyperparams& hyper, const void* grad,
                         void* var, void* s0, void* s1, int64_t n, int device);

absl::Status MovingAverage(DType dtype, double one_minus_decay,
                           const void* value, void* shadow, int64_t n,
                           int device);

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_TRAINING_H_
