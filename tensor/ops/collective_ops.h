// CrossReplicaSum: the sum of a tensor over every replica of a step, as an
// op with a gradient (tf.distribute's ReplicaContext.all_reduce(SUM) inside
// a tape: the gradient of a sum over replicas is the sum over replicas of
// the gradients). Synchronized batch norm uses it for its statistics.
//
// The op knows nothing of replicas: it calls `all_reduce`, which the
// distribution layer provides (ReplicaContext::AllReduce). Every replica
// must run the op, and so its gradient, in the same order.
#ifndef MIRRORTRAIN_TENSOR_OPS_COLLECTIVE_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_COLLECTIVE_OPS_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// Replaces each tensor's values by their sum over the replicas, in place.
using AllReduceSumFn = std::function<absl::Status(absl::Span<Tensor>)>;

// Fresh tensors holding the cross-replica sums of `xs` (the inputs are not
// modified). `all_reduce` is kept for the gradient, so it must outlive the
// tape's Gradient() call.
absl::StatusOr<std::vector<Tensor>> CrossReplicaSum(
    absl::Span<const Tensor> xs, const AllReduceSumFn& all_reduce);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_COLLECTIVE_OPS_H_
