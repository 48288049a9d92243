#include "distribute/variable_partitioner.h"

#include <algorithm>

#include "distribute/strategy.h"

namespace mirrortrain::distribute {

std::vector<std::vector<VariablePartition>> PartitionVariables(
    const std::vector<Shape>& shapes, int64_t element_bytes, int num_ps,
    int64_t min_shard_bytes) {
  std::vector<std::vector<VariablePartition>> out;
  int next_ps = 0;
  for (const Shape& shape : shapes) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t by_size = elements * element_bytes / min_shard_bytes;
    const int k =
        shape.empty()
            ? 1
            : static_cast<int>(std::max<int64_t>(
                  1, std::min({static_cast<int64_t>(num_ps), rows, by_size})));
    std::vector<VariablePartition> parts;
    for (int p = 0; p < k; ++p) {
      const ShardRange range = ShardOf(rows, p, k);
      parts.push_back({range.begin, range.end, next_ps});
      next_ps = (next_ps + 1) % num_ps;
    }
    out.push_back(std::move(parts));
  }
  return out;
}

}  // namespace mirrortrain::distribute
