// Gradient clipping, as tf.clip_by_norm / clip_by_global_norm /
// clip_by_value.
#ifndef MIRRORTRAIN_TENSOR_OPS_CLIP_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_CLIP_OPS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// t * clip / max(||t||_2, clip). The norm is treated as a constant (no
// gradient through it); these ops are meant for gradients. On a GPU (f32,
// f64) the norm and the scale stay on the device: no host synchronisation,
// so the op can be recorded into a CUDA graph.
absl::StatusOr<Tensor> ClipByNorm(const Tensor& t, double clip_norm);

struct GlobalNormClipped {
  std::vector<Tensor> tensors;
  // sqrt(sum of squared L2 norms), before clipping: an f64 scalar on the
  // tensors' GPU when they share one (computed there; read it after the
  // step), else on the host.
  Tensor global_norm;
};
// Each t * clip / max(global_norm, clip). A non-finite global norm makes
// every entry NaN, as TensorFlow does, so the caller can detect it. Tensors
// on one GPU (f32, f64, one dtype) are clipped without a host
// synchronisation, as ClipByNorm.
absl::StatusOr<GlobalNormClipped> ClipByGlobalNorm(
    absl::Span<const Tensor> tensors, double clip_norm);

// min(max(t, lo), hi); the gradient passes where lo <= t <= hi.
absl::StatusOr<Tensor> ClipByValue(const Tensor& t, double lo, double hi);

// sqrt(sum t^2), accumulated in double.
absl::StatusOr<double> GlobalNorm(absl::Span<const Tensor> tensors);

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_CLIP_OPS_H_
