#include "tensor/ops/matmul.h"

#include <cblas.h>

#include "tensor/gradient_tape.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

struct MatMulAttrs {
  bool transpose_a;
  bool transpose_b;
};

absl::Status CheckMatMul(const char* op, const Tensor& a, const Tensor& b,
                         bool ta, bool tb, int64_t* m, int64_t* k, int64_t* n) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, {&a, &b}));
  MT_RETURN_IF_ERROR(internal::CheckHost(op, {&a, &b}));
  if (a.rank() != 2 || b.rank() != 2) {
    return internal::OpError(op, "operands must have rank 2", {&a, &b});
  }
  *m = ta ? a.dim(1) : a.dim(0);
  *k = ta ? a.dim(0) : a.dim(1);
  int64_t kb = tb ? b.dim(1) : b.dim(0);
  *n = tb ? b.dim(0) : b.dim(1);
  if (*k != kb) {
    return internal::OpError(
        op,
        absl::StrCat("inner dimensions differ (", *k, " vs ", kb,
                     ", transpose_a=", ta, ", transpose_b=", tb, ")"),
        {&a, &b});
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

absl::Status Gemm(const Tensor& a, const Tensor& b, bool ta, bool tb,
                  double alpha, double beta, Tensor& out) {
  int64_t m, k, n;
  MT_RETURN_IF_ERROR(CheckMatMul("MatMul", a, b, ta, tb, &m, &k, &n));
  if (out.shape() != Shape{m, n} || out.dtype() != a.dtype()) {
    return OpError("MatMul", "output has the wrong shape or dtype",
                   {&a, &b, &out});
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE opb = tb ? CblasTrans : CblasNoTrans;
  const int lda = static_cast<int>(a.dim(1)), ldb = static_cast<int>(b.dim(1));
  if (a.dtype() == DType::kF32) {
    cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, static_cast<float>(alpha),
                a.data<float>(), lda, b.data<float>(), ldb,
                static_cast<float>(beta), out.data<float>(), n);
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, alpha, a.data<double>(), lda,
                b.data<double>(), ldb, beta, out.data<double>(), n);
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a, bool transpose_b) {
  int64_t m, k, n;
  MT_RETURN_IF_ERROR(
      CheckMatMul("MatMul", a, b, transpose_a, transpose_b, &m, &k, &n));
  Tensor out = Tensor::HostEmpty(a.dtype(), {m, n});
  if (k == 0) std::memset(out.raw_data(), 0, out.bytes());
  MT_RETURN_IF_ERROR(
      internal::Gemm(a, b, transpose_a, transpose_b, 1.0, 0.0, out));
  tape::RecordOperation("MatMul", {a, b}, {out},
                        MatMulAttrs{transpose_a, transpose_b});
  return out;
}

namespace {

using Grads = std::vector<std::optional<Tensor>>;

// With C = op(A) op(B): dA and dB per transpose combination, as TensorFlow's
// _MatMulGrad.
MT_REGISTER_GRADIENT(
    "MatMul",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      const auto& at = std::any_cast<const MatMulAttrs&>(op.attrs);
      const Tensor& a = op.inputs[0];
      const Tensor& b = op.inputs[1];
      const Tensor& gc = g[0];
      const bool ta = at.transpose_a, tb = at.transpose_b;
      if (needs[0]) {
        if (!ta) {
          MT_ASSIGN_OR_RETURN((*grads)[0], MatMul(gc, b, false, !tb));
        } else {
          MT_ASSIGN_OR_RETURN((*grads)[0], MatMul(b, gc, tb, true));
        }
      }
      if (needs[1]) {
        if (!tb) {
          MT_ASSIGN_OR_RETURN((*grads)[1], MatMul(a, gc, !ta, false));
        } else {
          MT_ASSIGN_OR_RETURN((*grads)[1], MatMul(gc, a, true, ta));
        }
      }
      return absl::OkStatus();
    });

}  // namespace
}  // namespace mirrortrain::ops
