// Element types a Tensor can hold.
#ifndef MIRRORTRAIN_TENSOR_DTYPE_H_
#define MIRRORTRAIN_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain {

enum class DType : uint8_t { kF32, kF64, kI32, kI64 };

size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);  // "f32", "f64", "i32", "i64"
absl::StatusOr<DType> ParseDType(absl::string_view name);
bool IsFloating(DType dtype);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_DTYPE_H_
