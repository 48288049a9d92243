#include "models/normalization_params.h"

#include "absl/strings/str_cat.h"
#include "tensor/ops/array_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<int64_t> NormalizedAxis(const Shape& input,
                                       absl::string_view axis_name) {
  if (input.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("expects input [batch, ..., ", axis_name, "], got ",
                     ShapeToString(input)));
  }
  return input.back();
}

absl::StatusOr<Shape> NormalizedOutputShape(absl::string_view layer,
                                            const Shape& input,
                                            int64_t channels) {
  if (input.size() < 2 || input.back() != channels) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": expects input [batch, ..., ", channels,
                     "], got ", ShapeToString(input)));
  }
  return input;
}

absl::StatusOr<Variable> ChannelVariable(absl::string_view layer,
                                         absl::string_view var,
                                         int64_t channels, double value,
                                         bool trainable, Device device) {
  MT_ASSIGN_OR_RETURN(Tensor t,
                      ops::Fill(DType::kF32, {channels}, value, device));
  return Variable::Create(absl::StrCat(layer, "/", var), t, trainable);
}

absl::StatusOr<NormalizationParams> NormalizationParams::Create(
    absl::string_view layer, int64_t channels, bool scale, bool center,
    Device device) {
  NormalizationParams p;
  if (scale) {
    MT_ASSIGN_OR_RETURN(p.gamma_, ChannelVariable(layer, "gamma", channels, 1,
                                                  /*trainable=*/true, device));
  } else {
    MT_ASSIGN_OR_RETURN(p.ones_, ops::Fill(DType::kF32, {channels}, 1, device));
  }
  if (center) {
    MT_ASSIGN_OR_RETURN(p.beta_, ChannelVariable(layer, "beta", channels, 0,
                                                 /*trainable=*/true, device));
  } else {
    MT_ASSIGN_OR_RETURN(p.zeros_,
                        ops::Fill(DType::kF32, {channels}, 0, device));
  }
  return p;
}

void NormalizationParams::AppendVariables(std::vector<Variable*>& out) {
  if (gamma_) out.push_back(&*gamma_);
  if (beta_) out.push_back(&*beta_);
}

}  // namespace mirrortrain::models
