// The host sum of a collective, and of an update's gradient terms
// (ops::UpdateTarget::more_grads): element i of every part, added in part
// order, so every process, replica and update that sums the same parts
// gets the same bits.
#ifndef MIRRORTRAIN_TENSOR_ORDERED_SUM_H_
#define MIRRORTRAIN_TENSOR_ORDERED_SUM_H_

#include <algorithm>
#include <cstdint>

#include "absl/types/span.h"

namespace mirrortrain {

// Writes parts[0][i] + parts[1][i] + ... (divided by the number of parts
// with `mean`) to outs[k][i] for every k and i < n. The outputs may be the
// parts themselves. Blocks of elements are summed in a local buffer that
// no part or output can alias, so the loops vectorise; each element's
// additions are the same as one by one.
template <typename T>
void OrderedSum(absl::Span<const T* const> parts, int64_t n, bool mean,
                absl::Span<T* const> outs) {
  if (parts.empty()) return;
  constexpr int64_t kBlock = 2048;
  T acc[kBlock];
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    std::copy_n(parts[0] + begin, len, acc);
    for (size_t p = 1; p < parts.size(); ++p) {
      const T* part = parts[p] + begin;
      for (int64_t i = 0; i < len; ++i) acc[i] += part[i];
    }
    if (mean) {
      const T count = static_cast<T>(parts.size());
      for (int64_t i = 0; i < len; ++i) acc[i] /= count;
    }
    for (T* out : outs) std::copy_n(acc, len, out + begin);
  }
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_ORDERED_SUM_H_
