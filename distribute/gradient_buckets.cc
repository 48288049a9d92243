#include "distribute/gradient_buckets.h"

#include "absl/strings/str_cat.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

BucketPlan PlanBuckets(absl::Span<const int64_t> bytes, int64_t bucket_bytes,
                       int64_t first_bucket_bytes) {
  BucketPlan plan;
  int64_t filled = 0;
  int64_t limit = std::min(first_bucket_bytes, bucket_bytes);
  for (size_t i = bytes.size(); i-- > 0;) {
    if (plan.buckets.empty() || (filled > 0 && filled + bytes[i] > limit)) {
      if (!plan.buckets.empty()) limit = bucket_bytes;
      plan.buckets.emplace_back();
      filled = 0;
    }
    plan.buckets.back().push_back(i);
    filled += bytes[i];
  }
  return plan;
}

GradientBuckets::GradientBuckets(const BucketPlan* plan, ReplicaContext* ctx,
                                 std::vector<Shape> shapes, DType dtype)
    : plan_(plan),
      ctx_(ctx),
      shapes_(std::move(shapes)),
      dtype_(dtype),
      grads_(shapes_.size()),
      missing_(plan->buckets.size()),
      bucket_of_(shapes_.size(), -1),
      buffers_(plan->buckets.size()) {
  for (size_t b = 0; b < plan_->buckets.size(); ++b) {
    missing_[b] = static_cast<int>(plan_->buckets[b].size());
    for (size_t i : plan_->buckets[b]) bucket_of_[i] = static_cast<int>(b);
  }
}

absl::Status GradientBuckets::Ready(size_t index, Tensor grad) {
  if (index >= grads_.size() || bucket_of_[index] < 0 ||
      grads_[index].defined()) {
    return absl::InternalError(
        absl::StrCat("gradient ", index, " reported twice or unplanned"));
  }
  if (grad.shape() != shapes_[index] || grad.dtype() != dtype_) {
    return absl::InternalError(absl::StrCat("gradient ", index, " is ",
                                            grad.DebugString(), ", planned ",
                                            ShapeToString(shapes_[index])));
  }
  grads_[index] = std::move(grad);
  --missing_[bucket_of_[index]];
  return LaunchReadyBuckets();
}

absl::Status GradientBuckets::LaunchReadyBuckets() {
  while (next_bucket_ < static_cast<int>(plan_->buckets.size()) &&
         missing_[next_bucket_] == 0) {
    const std::vector<size_t>& members = plan_->buckets[next_bucket_];
    const Tensor& first = grads_[members[0]];
    // Whether nothing but this bucket holds its gradients, in this
    // replica's memory: then they may be reduced where they are.
    bool own = true;
    for (size_t i : members) {
      own &= grads_[i].IsExclusive() &&
             grads_[i].device().SameMemory(ctx_->device());
    }
    if (ctx_->reduces() && own && members.size() > 1 && ctx_->reduces_lists()) {
      // Reduced where they are, as one list and one collective.
      std::vector<Tensor> members_grads;
      for (size_t i : members) members_grads.push_back(grads_[i]);
      pending_.push_back(
          ctx_->AllReduceListAsync(ReduceOp::kSum, std::move(members_grads)));
    } else if (ctx_->reduces() && own && members.size() == 1) {
      // Nothing else reads or writes it: reduced where it is, as one flat
      // buffer on every replica (whichever way the others go).
      MT_ASSIGN_OR_RETURN(buffers_[next_bucket_],
                          first.Reshaped({first.num_elements()}));
      pending_.push_back(
          ctx_->AllReduceAsync(ReduceOp::kSum, buffers_[next_bucket_]));
    } else if (ctx_->reduces()) {
      // Packed into one flat buffer by the collective: one collective per
      // bucket, and the reduced values never alias another gradient's
      // storage.
      int64_t total = 0;
      std::vector<Tensor> parts;
      for (size_t i : members) {
        total += NumElements(shapes_[i]);
        parts.push_back(grads_[i]);
      }
      MT_ASSIGN_OR_RETURN(Tensor buffer,
                          Tensor::Empty(dtype_, {total}, ctx_->device()));
      buffers_[next_bucket_] = buffer;
      pending_.push_back(ctx_->PackAndAllReduceAsync(ReduceOp::kSum,
                                                     std::move(parts), buffer));
    }
    ++next_bucket_;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> GradientBuckets::Finish() {
  // The started collectives first, also when backward stopped early: the
  // replica must not leave while its communication thread still reduces.
  absl::Status first_error;
  for (auto& f : pending_) {
    absl::Status s = f.get();
    if (first_error.ok() && !s.ok()) first_error = s;
  }
  if (next_bucket_ != static_cast<int>(plan_->buckets.size())) {
    return absl::InternalError(
        absl::StrCat("only ", next_bucket_, " of ", plan_->buckets.size(),
                     " gradient buckets were complete at the end of backward"));
  }
  MT_RETURN_IF_ERROR(first_error);
  if (!ctx_->reduces()) return grads_;  // Nothing to reduce.
  MT_RETURN_IF_ERROR(ctx_->OrderAfterCollectives());
  std::vector<Tensor> out(grads_.size());
  for (size_t b = 0; b < plan_->buckets.size(); ++b) {
    if (!buffers_[b].defined()) {
      // Reduced in place as a list.
      for (size_t i : plan_->buckets[b]) out[i] = grads_[i];
      continue;
    }
    int64_t offset = 0;
    for (size_t i : plan_->buckets[b]) {
      const int64_t n = NumElements(shapes_[i]);
      MT_ASSIGN_OR_RETURN(Tensor flat, buffers_[b].SliceRows(offset, n));
      MT_ASSIGN_OR_RETURN(out[i], flat.Reshaped(shapes_[i]));
      offset += n;
    }
  }
  return out;
}

absl::Status AccumulateGradients(GradientTape& tape, const Tensor& target,
                                 absl::Span<const Tensor> sources,
                                 std::vector<Tensor>& sums) {
  if (!sums.empty() && sums.size() != sources.size()) {
    return absl::InternalError(
        absl::StrCat("AccumulateGradients: ", sums.size(), " sums for ",
                     sources.size(), " sources"));
  }
  GradientOptions options;
  options.unconnected = UnconnectedGradients::kZero;
  MT_ASSIGN_OR_RETURN(std::vector<std::optional<Tensor>> grads,
                      tape.Gradient(target, sources, options));
  if (sums.empty()) {
    for (std::optional<Tensor>& g : grads) sums.push_back(*std::move(g));
    return absl::OkStatus();
  }
  for (size_t i = 0; i < sums.size(); ++i) {
    MT_ASSIGN_OR_RETURN(sums[i], ops::Add(sums[i], *grads[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ReplicaContext::AllReduceGradients(
    GradientTape& tape, const Tensor& target, absl::Span<const Tensor> sources,
    absl::Span<const Tensor> accumulated) {
  if (!accumulated.empty() && accumulated.size() != sources.size()) {
    return absl::InternalError(absl::StrCat(
        "AllReduceGradients: ", accumulated.size(),
        " accumulated gradients for ", sources.size(), " sources"));
  }
  // The plan depends only on the sizes: every replica makes the same one.
  std::vector<int64_t> bytes;
  std::vector<Shape> shapes;
  for (const Tensor& s : sources) {
    bytes.push_back(s.num_elements() * DTypeSize(s.dtype()));
    shapes.push_back(s.shape());
  }
  const BucketPlan plan = PlanBuckets(bytes, bucket_bytes());
  const DType dtype = sources.empty() ? DType::kF32 : sources[0].dtype();
  GradientBuckets buckets(&plan, this, std::move(shapes), dtype);
  GradientOptions options;
  options.unconnected = UnconnectedGradients::kZero;
  absl::Status bucket_status;
  options.on_gradient_ready = [&](size_t k, std::optional<Tensor> g) {
    if (!bucket_status.ok()) return;
    if (accumulated.empty()) {
      bucket_status = buckets.Ready(k, *std::move(g));
      return;
    }
    absl::StatusOr<Tensor> sum = ops::Add(accumulated[k], *g);
    bucket_status = sum.ok() ? buckets.Ready(k, *std::move(sum)) : sum.status();
  };
  absl::Status backward = tape.Gradient(target, sources, options).status();
  // Started buckets are waited for even after an error: their buffers are
  // in use by the communication thread or stream.
  absl::StatusOr<std::vector<Tensor>> reduced = buckets.Finish();
  MT_RETURN_IF_ERROR(backward);
  MT_RETURN_IF_ERROR(bucket_status);
  return reduced;
}

}  // namespace mirrortrain::distribute
