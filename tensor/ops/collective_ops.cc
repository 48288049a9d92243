#include "tensor/ops/collective_ops.h"

#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kCrossReplicaSumOp);

struct CrossReplicaSumAttrs {
  AllReduceSumFn all_reduce;
};

// Copies of `xs`, summed over the replicas.
absl::StatusOr<std::vector<Tensor>> SumCopies(absl::Span<const Tensor> xs,
                                              const AllReduceSumFn& fn) {
  std::vector<Tensor> out;
  out.reserve(xs.size());
  for (const Tensor& x : xs) {
    MT_ASSIGN_OR_RETURN(Tensor copy, x.Clone());
    out.push_back(std::move(copy));
  }
  MT_RETURN_IF_ERROR(fn(absl::MakeSpan(out)));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> CrossReplicaSum(
    absl::Span<const Tensor> xs, const AllReduceSumFn& all_reduce) {
  for (const Tensor& x : xs) {
    MT_RETURN_IF_ERROR(internal::CheckFloatingSame("CrossReplicaSum", {&x}));
  }
  if (!all_reduce) {
    return absl::InvalidArgumentError("CrossReplicaSum: no all-reduce given");
  }
  MT_ASSIGN_OR_RETURN(std::vector<Tensor> out, SumCopies(xs, all_reduce));
  tape::RecordOperation(kCrossReplicaSumOp, xs, out,
                        CrossReplicaSumAttrs{all_reduce});
  return out;
}

namespace {

// Every replica runs this gradient too (the same op order backwards), so
// the all-reduce of the output gradients lines up across replicas. Every
// input's gradient is produced, needed or not, for the same reason.
MT_OP(kCrossReplicaSumOp, "CrossReplicaSum",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const auto& attrs =
            std::any_cast<const CrossReplicaSumAttrs&>(op.attrs);
        MT_ASSIGN_OR_RETURN(std::vector<Tensor> sums,
                            SumCopies(g, attrs.all_reduce));
        for (size_t i = 0; i < sums.size(); ++i) (*grads)[i] = sums[i];
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
