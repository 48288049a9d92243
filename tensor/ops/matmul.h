// Matrix product of rank-2 tensors (tf.linalg.matmul), on OpenBLAS.
#ifndef MIRRORTRAIN_TENSOR_OPS_MATMUL_H_
#define MIRRORTRAIN_TENSOR_OPS_MATMUL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/matmul_precision.h"
#include "tensor/op.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// op(a) @ op(b) where op transposes when asked: [m,k] @ [k,n] -> [m,n].
absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a = false,
                              bool transpose_b = false);

// op(a) @ op(b) + bias, bias [n] along the product's last axis. The bias is
// written into the output and the product accumulated onto it (BLAS beta =
// 1, as PyTorch's addmm): one pass over the output fewer than MatMul then
// BiasAdd, and none for BLAS's beta = 0 clearing. The result is stored as
// `rounding` asks (precision_ops.h); on GPUs under precision bf16 the
// product's epilogue then writes it as bfloat16 (FusedGemmBias).
absl::StatusOr<Tensor> MatMulBias(
    const Tensor& a, const Tensor& b, const Tensor& bias,
    bool transpose_a = false, bool transpose_b = false,
    OutputRounding rounding = OutputRounding::kNone);

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
// caller's unfused path. With a `rounding` and bf16 operands the epilogue
// writes the result as bfloat16 and one pass widens it into `out`, rounded
// (and its halves kept) as RoundOutput would leave it; without an
// algorithm for that, `out` is left as computed, for the caller to round.
// With `relu_mask` (relu only) the epilogue also keeps which outputs are
// > 0 in a new buffer there (cuda::ReluMaskBytes), for GemmReluGrad; left
// null when cuBLASLt has no algorithm that keeps it.
absl::StatusOr<bool> FusedGemmBias(
    const GemmOperand& a, const GemmOperand& b, bool transpose_a,
    bool transpose_b, const Tensor& bias, bool relu, Tensor& out,
    OutputRounding rounding = OutputRounding::kNone,
    std::shared_ptr<Buffer>* relu_mask = nullptr);
// How many FusedGemmBias calls ran fused in this process (any thread): the
// fallback computes the same numbers, so tests ask this whether the
// epilogue ran; and how many of them wrote a bfloat16 result.
int64_t FusedGemmBiasCalls();
int64_t Bf16EpilogueCalls();

// The precision a GPU product of these operands runs in: bf16 when they
// were converted, else f32 or tf32 as set.
MatMulPrecision PrecisionFor(const GemmOperand& a);

// What a product op keeps for its gradient: its operands as its product
// read them, the transposes, and for a relu product on a GPU the mask its
// epilogue kept (FusedGemmBias; null when none).
struct SavedProduct {
  GemmOperand a, b;
  bool transpose_a = false, transpose_b = false;
  std::shared_ptr<Buffer> relu_mask;
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
// the tensors instead. `links` (the record's, may be null): when a's
// producer offers its first gradient step (a relu product's masked pass,
// fused_ops.h), a's gradient is handed to it instead (links->handed[0]).
absl::Status MatMulGrads(const SavedProduct& p, const Tensor& gc,
                         absl::Span<const bool> needs, Grads* grads,
                         GradientLinks* links);
// The same, unrecorded, for a gradient already in the form the products
// read (converted as p's operands are).
absl::Status ProductGrads(const SavedProduct& p, const GemmOperand& gc,
                          absl::Span<const bool> needs, Grads* grads,
                          GradientLinks* links);
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_MATMUL_H_
