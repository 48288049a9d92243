// Helpers shared by op implementations: argument checks whose errors name
// the op and the shapes, and dtype dispatch.
#ifndef MIRRORTRAIN_TENSOR_OPS_OP_UTIL_H_
#define MIRRORTRAIN_TENSOR_OPS_OP_UTIL_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops::internal {

// "Op: reason (inputs f32[2,3]@cpu:0, f32[4]@cpu:0)".
absl::Status OpError(absl::string_view op, absl::string_view reason,
                     std::initializer_list<const Tensor*> inputs);

// A failed kernel's status with the op and its inputs prefixed, keeping
// the status code (a CUDA error stays Internal, a missing kernel
// Unimplemented).
absl::Status KernelError(absl::string_view op, const absl::Status& status,
                         std::initializer_list<const Tensor*> inputs);

absl::Status CheckDefined(absl::string_view op,
                          std::initializer_list<const Tensor*> inputs);
// All inputs defined, floating and of one dtype, on one device.
absl::Status CheckFloatingSame(absl::string_view op,
                               std::initializer_list<const Tensor*> inputs);
absl::Status CheckSameDevice(absl::string_view op,
                             std::initializer_list<const Tensor*> inputs);
absl::Status CheckRank(absl::string_view op, const Tensor& t, int rank,
                       absl::string_view what);
absl::Status CheckInteger(absl::string_view op, const Tensor& t,
                          absl::string_view what);
// Ops without a CUDA kernel yet say so instead of touching device memory.
absl::Status CheckHost(absl::string_view op,
                       std::initializer_list<const Tensor*> inputs);
// Normalises a possibly negative axis against `rank`.
absl::StatusOr<int> NormalizeAxis(absl::string_view op, int axis, int rank);

// Reads integer indices (i32 or i64) as int64.
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kI32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

}  // namespace mirrortrain::ops::internal

// Runs the statement block with `T` bound to float or double per `dtype`.
#define MT_DISPATCH_FLOAT(dtype, T, ...)         \
  do {                                           \
    if ((dtype) == ::mirrortrain::DType::kF32) { \
      using T = float;                           \
      __VA_ARGS__;                               \
    } else {                                     \
      using T = double;                          \
      __VA_ARGS__;                               \
    }                                            \
  } while (0)

// Any of the four dtypes.
#define MT_DISPATCH_ALL(dtype, T, ...)   \
  do {                                   \
    switch (dtype) {                     \
      case ::mirrortrain::DType::kF32: { \
        using T = float;                 \
        __VA_ARGS__;                     \
        break;                           \
      }                                  \
      case ::mirrortrain::DType::kF64: { \
        using T = double;                \
        __VA_ARGS__;                     \
        break;                           \
      }                                  \
      case ::mirrortrain::DType::kI32: { \
        using T = int32_t;               \
        __VA_ARGS__;                     \
        break;                           \
      }                                  \
      case ::mirrortrain::DType::kI64: { \
        using T = int64_t;               \
        __VA_ARGS__;                     \
        break;                           \
      }                                  \
    }                                    \
  } while (0)

#endif  // MIRRORTRAIN_TENSOR_OPS_OP_UTIL_H_
