#include "models/layer.h"

#include "absl/strings/str_cat.h"
#include "tensor/dropout_mask.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<Tensor> ForwardContext::Dropout(const Tensor& x, double rate,
                                               uint64_t stream, uint64_t salt,
                                               int64_t element_offset) const {
  if (dropout_salt != 0) salt ^= DropoutMix(dropout_salt);
  if (step_seed_tensor.defined()) {
    return ops::Dropout(x, rate, step_seed_tensor, stream, salt,
                        element_offset);
  }
  return ops::Dropout(x, rate, DropoutStepSeed(step_seed, stream, salt),
                      element_offset);
}

absl::StatusOr<Tensor> ForwardContext::Normal(const Tensor& like,
                                              uint64_t stream, uint64_t salt,
                                              int64_t element_offset) const {
  if (dropout_salt != 0) salt ^= DropoutMix(dropout_salt);
  if (step_seed_tensor.defined()) {
    return ops::StandardNormal(like, step_seed_tensor, stream, salt,
                               element_offset);
  }
  return ops::StandardNormal(like, DropoutStepSeed(step_seed, stream, salt),
                             element_offset);
}

absl::StatusOr<Tensor> Layer::CallMasked(const Tensor& x,
                                         const ForwardContext& ctx,
                                         Tensor& mask) {
  MT_ASSIGN_OR_RETURN(Tensor y, Call(x, ctx));
  MT_ASSIGN_OR_RETURN(mask, OutputMask(x, ctx));
  return y;
}

absl::Status CheckImageShape(const Shape& input, const std::string& layer) {
  if (input.size() == 4) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(layer.empty() ? "" : layer + ": ",
                   "expects NHWC input, got ", ShapeToString(input)));
}

}  // namespace mirrortrain::models
