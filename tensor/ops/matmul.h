// Matrix product of rank-2 tensors (tf.linalg.matmul), on OpenBLAS.
#ifndef MIRRORTRAIN_TENSOR_OPS_MATMUL_H_
#define MIRRORTRAIN_TENSOR_OPS_MATMUL_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/op.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// op(a) @ op(b) where op transposes when asked: [m,k] @ [k,n] -> [m,n].
absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a = false,
                              bool transpose_b = false);

// op(a) @ op(b) + bias, bias [n] along the product's last axis. The bias is
// written into the output and the product accumulated onto it (BLAS beta =
// 1, as PyTorch's addmm): one pass over the output fewer than MatMul then
// BiasAdd, and none for BLAS's beta = 0 clearing. On GPUs (f32) one
// cuBLASLt call with the bias in its epilogue (FusedGemmBias).
absl::StatusOr<Tensor> MatMulBias(const Tensor& a, const Tensor& b,
                                  const Tensor& bias, bool transpose_a = false,
                                  bool transpose_b = false);

namespace internal {
// out = alpha * op(a) @ op(b) + beta * out, into an existing tensor
// (unrecorded; for fused layers and gradient kernels), reading the
// operands as converted (gemm_operand.h; both bf16 or neither). `parallel`
// false runs on the calling thread only (for callers that parallelise
// around it).
absl::Status Gemm(const GemmOperand& a, const GemmOperand& b, bool transpose_a,
                  bool transpose_b, double alpha, double beta, Tensor& out,
                  bool parallel = true);
// The same with both tensors converted as the precision says.
absl::Status Gemm(const Tensor& a, const Tensor& b, bool transpose_a,
                  bool transpose_b, double alpha, double beta, Tensor& out,
                  bool parallel = true);

// out = act(op(a) @ op(b) + bias), act relu or the identity, as one
// cuBLASLt call with the bias and relu in the GEMM's epilogue, when it
// applies: GPU f32 tensors of rank 2, k >= 1, an algorithm for the case.
// Returns whether it ran (unrecorded); false leaves `out` untouched for the
// caller's unfused path. The result is f32 (a rounding the caller asks
// for is its own pass): cuBLASLt takes a bias only of its result's type
// outside fp8, and a bf16 bias would round it before the sum.
absl::StatusOr<bool> FusedGemmBias(const GemmOperand& a, const GemmOperand& b,
                                   bool transpose_a, bool transpose_b,
                                   const Tensor& bias, bool relu, Tensor& out);
// How many FusedGemmBias calls ran fused in this process (any thread): the
// fallback computes the same numbers, so tests ask this whether the
// epilogue ran.
int64_t FusedGemmBiasCalls();

// What a product op keeps for its gradient: its operands as its product
// read them, and the transposes.
struct SavedProduct {
  GemmOperand a, b;
  bool transpose_a = false, transpose_b = false;
};
absl::StatusOr<SavedProduct> SaveProduct(const Tensor& a, const Tensor& b,
                                         bool transpose_a, bool transpose_b);

// op(a) @ op(b) into a new tensor, unrecorded; zeros for an empty sum
// (k == 0).
absl::StatusOr<Tensor> Product(const GemmOperand& a, const GemmOperand& b,
                               bool transpose_a, bool transpose_b);

// The gradients of op(a) @ op(b) for the product's gradient `gc`, as
// TensorFlow's _MatMulGrad: (*grads)[0] for a where needs[0], [1] for b.
// The products read the saved operands and `gc` converted once; when an
// outer tape records (higher-order gradients) they are recorded MatMuls of
// the tensors instead.
absl::Status MatMulGrads(const SavedProduct& p, const Tensor& gc,
                         absl::Span<const bool> needs, Grads* grads);
// The same, unrecorded, for a gradient already in the form the products
// read (converted as p's operands are).
absl::Status ProductGrads(const SavedProduct& p, const GemmOperand& gc,
                          absl::Span<const bool> needs, Grads* grads);
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_MATMUL_H_
