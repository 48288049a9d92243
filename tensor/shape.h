// Tensor shapes: a list of non-negative dimensions, row-major.
#ifndef MIRRORTRAIN_TENSOR_SHAPE_H_
#define MIRRORTRAIN_TENSOR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace mirrortrain {

using Shape = std::vector<int64_t>;

int64_t NumElements(absl::Span<const int64_t> shape);
std::string ShapeToString(absl::Span<const int64_t> shape);  // "[2,3]"
// Row-major strides in elements.
std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> shape);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_SHAPE_H_
