// Max and average pooling over NHWC images (tf.nn.max_pool2d,
// tf.nn.avg_pool2d).
#ifndef MIRRORTRAIN_TENSOR_OPS_POOLING_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_POOLING_OPS_H_

#include "absl/status/statusor.h"
#include "tensor/image_window.h"
#include "tensor/ops/window.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

struct Pool2DOptions {
  int64_t ksize_h = 2, ksize_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  Padding padding = Padding::kValid;
};

// Padded cells never win. The gradient goes to the first maximum of each
// window in row-major order (TensorFlow's CPU rule), summed over windows.
absl::StatusOr<Tensor> MaxPool2D(const Tensor& x,
                                 const Pool2DOptions& options = {});
// The mean of each window's cells inside the image: padded cells are not
// counted (TensorFlow's rule for SAME padding).
absl::StatusOr<Tensor> AvgPool2D(const Tensor& x,
                                 const Pool2DOptions& options = {});

namespace internal {
// MaxPool2D's gradient (unrecorded): dx of `x_shape`, on dy's device, with
// each output's gradient dy added at its winner `argmax` (int32, shaped as
// dy: offsets within an image of x) and zeros elsewhere; `window` is the
// pool's geometry over x. For fused ops that pool in a kernel of their own.
absl::StatusOr<Tensor> MaxPool2DGrad(const ImageWindow& window,
                                     const Tensor& argmax, const Tensor& dy,
                                     const Shape& x_shape);
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_POOLING_OPS_H_
