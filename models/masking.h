// Keras masking (Layer::SupportsMasking): the masks themselves, and the
// `masking` layer. A mask is f32 of 1 (a step that holds data) and 0 (a
// padded step), one per element of its tensor's axes but the last, on the
// tensor's device. Masks are read, never differentiated: they come from
// unrecorded comparisons, so no gradient flows into them.
#ifndef MIRRORTRAIN_MODELS_MASKING_H_
#define MIRRORTRAIN_MODELS_MASKING_H_

#include <string>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::models {

// 1 where x != value (NaN included, as tf.not_equal), 0 elsewhere; x's
// shape (an embedding's mask_zero: ids != 0); f32 whatever x's dtype.
absl::StatusOr<Tensor> NotEqualMask(const Tensor& x, double value);
// 1 where any element along x's last axis differs from `value`: x's axes
// but the last (Keras Masking's compute_mask).
absl::StatusOr<Tensor> AnyNotEqualMask(const Tensor& x, double value);
// Keras's merges of masked branches: 1 where either mask is.
absl::StatusOr<Tensor> MaskOr(const Tensor& a, const Tensor& b);
// Keras's where(mask, a, b) over the features: a where `mask` (x's axes
// but the last, or a's shape) is 1, b where it is 0, as a m + b (1 - m),
// exact for finite values (one term is 0); differentiable in a and b.
absl::StatusOr<Tensor> MaskSelect(const Tensor& mask, const Tensor& a,
                                  const Tensor& b);
// 1 - mask: 1 where the mask is 0 (what a masked step keeps or fills).
absl::StatusOr<Tensor> MaskComplement(const Tensor& mask);
// `mask` as `dtype` (a f64 layer's), itself where it is already.
absl::StatusOr<Tensor> MaskAs(const Tensor& mask, DType dtype);
// `mask` with an axis of 1 appended, as x's dtype, to scale x [...,
// features].
absl::StatusOr<Tensor> MaskOverFeatures(const Tensor& mask, const Tensor& x);
// OK when `mask` has x's axes but the last; else InvalidArgument naming
// `layer` and both shapes.
absl::Status CheckMask(const Tensor& x, const Tensor& mask,
                       const std::string& layer);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_MASKING_H_
