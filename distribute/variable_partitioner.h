// How parameter-server training splits variables over the ps devices, after
// TensorFlow's MinSizePartitioner and its round-robin variable placement.
#ifndef MIRRORTRAIN_DISTRIBUTE_VARIABLE_PARTITIONER_H_
#define MIRRORTRAIN_DISTRIBUTE_VARIABLE_PARTITIONER_H_

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace mirrortrain::distribute {

// Rows [row_begin, row_end) of a variable (along its first axis), held by
// ps device `ps`.
struct VariablePartition {
  int64_t row_begin, row_end;
  int ps;
};

// For variables of `shapes` (in creation order) and element size
// `element_bytes`: each is cut along axis 0 into
//   k = max(1, min(num_ps, rows, bytes / min_shard_bytes))
// partitions as even as possible (the first rows % k get one row more);
// scalars are never cut. Partitions go to the ps devices round-robin, in
// order, continuing from one variable to the next.
std::vector<std::vector<VariablePartition>> PartitionVariables(
    const std::vector<Shape>& shapes, int64_t element_bytes, int num_ps,
    int64_t min_shard_bytes);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_VARIABLE_PARTITIONER_H_
