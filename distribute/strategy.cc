#include "distribute/strategy.h"

#include <algorithm>

namespace mirrortrain::distribute {

std::shared_future<absl::Status> ReplicaContext::AllReduceAsync(ReduceOp op,
                                                                Tensor buffer) {
  std::promise<absl::Status> done;
  done.set_value(AllReduce(op, absl::MakeSpan(&buffer, 1)));
  return done.get_future().share();
}

double Strategy::Reduce(ReduceOp op, absl::Span<const double> per_replica) {
  double sum = 0;
  for (double v : per_replica) sum += v;
  if (op == ReduceOp::kMean && !per_replica.empty()) {
    sum /= static_cast<double>(per_replica.size());
  }
  return sum;
}

ShardRange ShardOf(int64_t batch, int replica, int replicas) {
  const int64_t base = batch / replicas, extra = batch % replicas;
  const int64_t begin = replica * base + std::min<int64_t>(replica, extra);
  return {begin, begin + base + (replica < extra ? 1 : 0)};
}

}  // namespace mirrortrain::distribute
