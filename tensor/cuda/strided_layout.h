// An index space of up to kMaxRank dimensions with, for each of N operands,
// an element stride per dimension (0 where an operand is broadcast). Passed
// to kernels by value; each thread turns its linear index into the N
// operand offsets. Only for files compiled by nvcc.
#ifndef MIRRORTRAIN_TENSOR_CUDA_STRIDED_LAYOUT_H_
#define MIRRORTRAIN_TENSOR_CUDA_STRIDED_LAYOUT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "tensor/cuda/cuda_kernels.h"

namespace mirrortrain::cuda {

template <int N>
struct StridedLayout {
  int rank = 0;
  int64_t num_elements = 1;
  int64_t shape[kMaxRank] = {};
  int64_t strides[N][kMaxRank] = {};

  // Offsets of linear index i (row-major over `shape`) in each operand.
  __host__ __device__ void Offsets(int64_t i, int64_t (&offsets)[N]) const {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = i % shape[d];
      i /= shape[d];
      for (int k = 0; k < N; ++k) offsets[k] += q * strides[k][d];
    }
  }
};

// Builds the layout of `shape` with one stride list per operand (each as
// long as `shape`). Size-1 dimensions are dropped and neighbours that are
// contiguous in every operand are merged, so only layouts that stay above
// kMaxRank dimensions after that are refused. `what` names the caller in
// errors.
template <int N>
absl::StatusOr<StridedLayout<N>> MakeStridedLayout(
    const char* what, absl::Span<const int64_t> shape,
    const std::array<absl::Span<const int64_t>, N>& strides) {
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> dim_strides;
  int64_t total = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    total *= shape[d];
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = strides[k][d];
    // The outer neighbour folds in when stepping it equals stepping this
    // dimension shape[d] times, for every operand.
    bool merge = !dims.empty();
    for (int k = 0; merge && k < N; ++k) {
      merge = dim_strides.back()[k] == s[k] * shape[d];
    }
    if (merge) {
      dims.back() *= shape[d];
      dim_strides.back() = s;
    } else {
      dims.push_back(shape[d]);
      dim_strides.push_back(s);
    }
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(
        absl::StrCat(what, ": CUDA kernels index at most ", kMaxRank,
                     " dimensions, this layout needs ", dims.size()));
  }
  StridedLayout<N> layout;
  layout.rank = static_cast<int>(dims.size());
  layout.num_elements = total;
  for (int d = 0; d < layout.rank; ++d) {
    layout.shape[d] = dims[d];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = dim_strides[d][k];
  }
  return layout;
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_STRIDED_LAYOUT_H_
