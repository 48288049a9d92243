// Tensor shapes: a list of non-negative dimensions, row-major.
#ifndef MIRRORTRAIN_TENSOR_SHAPE_H_
#define MIRRORTRAIN_TENSOR_SHAPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace mirrortrain {

using Shape = std::vector<int64_t>;

// The largest dimension a config may give a layer (units, filters, a
// window side): BLAS and cuBLAS take matrix dimensions as int.
inline constexpr int64_t kMaxDimension = 2147483647;

int64_t NumElements(absl::Span<const int64_t> shape);
// The element count, or nullopt when it does not fit int64 (or a
// dimension is negative): for sizes that come from input.
std::optional<int64_t> CheckedNumElements(absl::Span<const int64_t> shape);
std::string ShapeToString(absl::Span<const int64_t> shape);  // "[2,3]"
// Row-major strides in elements.
std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> shape);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_SHAPE_H_
