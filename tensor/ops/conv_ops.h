// 2-D convolution, NHWC input and HWIO filter (tf.nn.conv2d).
#ifndef MIRRORTRAIN_TENSOR_OPS_CONV_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_CONV_OPS_H_

#include "absl/status/statusor.h"
#include "tensor/ops/window.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

struct Conv2DOptions {
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  Padding padding = Padding::kSame;
};

// x [N,H,W,C] * filter [KH,KW,C,O] -> [N,OH,OW,O]. CPU: im2col over chunks
// of the batch, then one GEMM per chunk.
absl::StatusOr<Tensor> Conv2D(const Tensor& x, const Tensor& filter,
                              const Conv2DOptions& options = {});

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_CONV_OPS_H_
