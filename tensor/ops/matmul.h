// Matrix product of rank-2 tensors (tf.linalg.matmul), on OpenBLAS.
#ifndef MIRRORTRAIN_TENSOR_OPS_MATMUL_H_
#define MIRRORTRAIN_TENSOR_OPS_MATMUL_H_

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// op(a) @ op(b) where op transposes when asked: [m,k] @ [k,n] -> [m,n].
absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a = false,
                              bool transpose_b = false);

// op(a) @ op(b) + bias, bias [n] along the product's last axis. The bias is
// written into the output and the product accumulated onto it (BLAS beta =
// 1, as PyTorch's addmm): one pass over the output fewer than MatMul then
// BiasAdd, and none for BLAS's beta = 0 clearing.
absl::StatusOr<Tensor> MatMulBias(const Tensor& a, const Tensor& b,
                                  const Tensor& bias, bool transpose_a = false,
                                  bool transpose_b = false);

namespace internal {
// out = alpha * op(a) @ op(b) + beta * out, into an existing tensor
// (unrecorded; for fused layers and gradient kernels). `parallel` false
// runs on the calling thread only (for callers that parallelise around it).
absl::Status Gemm(const Tensor& a, const Tensor& b, bool transpose_a,
                  bool transpose_b, double alpha, double beta, Tensor& out,
                  bool parallel = true);
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_MATMUL_H_
