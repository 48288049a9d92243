// Gradient bucketing for all-reduce, as PyTorch DDP and Horovod do:
// gradients are packed into flat buckets (~25 MB, the first one small so
// communication starts early), in reverse variable order (backward produces
// the last layer's gradients first). A bucket's all-reduce starts as soon as
// all its gradients are ready, so it overlaps the rest of backward.
//
// Thread contract: a GradientBuckets object belongs to one replica thread
// and one step.
#ifndef MIRRORTRAIN_DISTRIBUTE_GRADIENT_BUCKETS_H_
#define MIRRORTRAIN_DISTRIBUTE_GRADIENT_BUCKETS_H_

#include <future>
#include <vector>

#include "absl/status/statusor.h"
#include "distribute/strategy.h"

namespace mirrortrain::distribute {

// Which gradients go together, in launch order. Deterministic from the
// sizes, so every replica makes the same plan.
struct BucketPlan {
  std::vector<std::vector<size_t>> buckets;
};
inline constexpr int64_t kFirstBucketBytes = 1 << 20;
BucketPlan PlanBuckets(absl::Span<const int64_t> bytes, int64_t bucket_bytes,
                       int64_t first_bucket_bytes = kFirstBucketBytes);

class GradientBuckets {
 public:
  // `shapes` of the gradients, indexed as in the plan; all of `dtype`.
  GradientBuckets(const BucketPlan* plan, ReplicaContext* ctx,
                  std::vector<Shape> shapes, DType dtype);
  // Gradient `index` is final. Starts every bucket, in plan order, whose
  // gradients are now all present. A bucket whose gradients nothing else
  // references (Tensor::IsExclusive) is reduced in place, without packing:
  // alone, as one flat buffer with any collective (the large layers'
  // kernels, which fill buckets of their own: the MLP's 4096x4096 kernels
  // save 2 x 64 MB of traffic each per replica and step); several, as one
  // list where the replica context reduces lists (logical devices; the
  // CNN's 13 MB bucket then costs its sum's 52 MB of traffic over two
  // replicas, not 104 MB with the packing). A bucket that others still
  // read is packed, so the reduced values never alias their storage.
  absl::Status Ready(size_t index, Tensor grad);
  // Waits for all buckets; the SUM-reduced gradients in index order (views
  // of the bucket buffers, or the gradients reduced in place).
  absl::StatusOr<std::vector<Tensor>> Finish();
  int buckets_started() const { return next_bucket_; }

 private:
  absl::Status LaunchReadyBuckets();

  const BucketPlan* plan_;
  ReplicaContext* ctx_;
  std::vector<Shape> shapes_;
  DType dtype_;
  std::vector<Tensor> grads_;
  std::vector<int> missing_;  // Per bucket: gradients not yet ready.
  std::vector<int> bucket_of_;
  std::vector<Tensor> buffers_;  // Per bucket; none if reduced as a list.
  std::vector<std::shared_future<absl::Status>> pending_;
  int next_bucket_ = 0;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_GRADIENT_BUCKETS_H_
