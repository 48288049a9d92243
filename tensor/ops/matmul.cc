#include "tensor/ops/matmul.h"

#include <cblas.h>

#include <algorithm>

#include "tensor/cpu_threads.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/op.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kMatMulOp);
}  // namespace
namespace {

struct MatMulAttrs {
  bool transpose_a;
  bool transpose_b;
};

absl::Status CheckMatMul(const char* op, const Tensor& a, const Tensor& b,
                         bool ta, bool tb, int64_t* m, int64_t* k, int64_t* n) {
  // Same device (checked here); host tensors use OpenBLAS, GPU ones cuBLAS.
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, {&a, &b}));
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

// Puts OpenBLAS in single-threaded mode before its first call, so every
// product of a run takes the same code path (bitwise reproducible).
void EnsureSingleThreadedBlas() {
  static const int threads = CpuMathThreads();
  (void)threads;
}

void Blas(const float* a, const float* b, bool ta, bool tb, int64_t m,
          int64_t n, int64_t k, int64_t lda, int64_t ldb, double alpha,
          double beta, float* c, int64_t ldc) {
  EnsureSingleThreadedBlas();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k,
              static_cast<float>(alpha), a, lda, b, ldb,
              static_cast<float>(beta), c, ldc);
}

void Blas(const double* a, const double* b, bool ta, bool tb, int64_t m,
          int64_t n, int64_t k, int64_t lda, int64_t ldb, double alpha,
          double beta, double* c, int64_t ldc) {
  EnsureSingleThreadedBlas();
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

// Splits C into row blocks (or column blocks when it is wide) computed by
// single-threaded BLAS calls on the kernel thread pool. Small products run
// inline: waking a thread costs more than they do.
template <typename T>
void ParallelGemm(const T* a, const T* b, bool ta, bool tb, int64_t m,
                  int64_t n, int64_t k, int64_t lda, int64_t ldb, double alpha,
                  double beta, T* c) {
  constexpr int64_t kMinFlopsPerThread = 1 << 21;
  constexpr int64_t kAlign = 16;  // Keeps blocks whole micro-kernel tiles.
  const int64_t flops = 2 * m * n * std::max<int64_t>(k, 1);
  if (flops < 2 * kMinFlopsPerThread) {
    Blas(a, b, ta, tb, m, n, k, lda, ldb, alpha, beta, c, n);
    return;
  }
  const bool by_rows = m >= n;
  const int64_t units = ((by_rows ? m : n) + kAlign - 1) / kAlign;
  const int64_t flops_per_unit = std::max<int64_t>(flops / units, 1);
  // Each block re-packs the shared operand, so blocks are as large as the
  // threads allow: one per thread (a thread kept off its core still hands
  // its block to the others, parallel.h).
  const int64_t min_units =
      std::max({int64_t{1}, kMinFlopsPerThread / flops_per_unit,
                units / std::max(1, CpuMathThreads())});
  ParallelFor(units, min_units, [&](int64_t begin, int64_t end) {
    const int64_t limit = by_rows ? m : n;
    const int64_t lo = begin * kAlign;
    const int64_t hi = std::min(end * kAlign, limit);
    if (lo >= hi) return;
    if (by_rows) {
      // Rows lo..hi of op(A): row offset, or column offset if A
      // is stored transposed.
      const T* a_part = ta ? a + lo : a + lo * lda;
      Blas(a_part, b, ta, tb, hi - lo, n, k, lda, ldb, alpha, beta, c + lo * n,
           n);
    } else {
      const T* b_part = tb ? b + lo * ldb : b + lo;
      Blas(a, b_part, ta, tb, m, hi - lo, k, lda, ldb, alpha, beta, c + lo, n);
    }
  });
}

}  // namespace

namespace internal {

absl::Status Gemm(const Tensor& a, const Tensor& b, bool ta, bool tb,
                  double alpha, double beta, Tensor& out, bool parallel) {
  int64_t m = 0, k = 0, n = 0;
  MT_RETURN_IF_ERROR(CheckMatMul("MatMul", a, b, ta, tb, &m, &k, &n));
  if (out.shape() != Shape{m, n} || out.dtype() != a.dtype()) {
    return OpError("MatMul", "output has the wrong shape or dtype",
                   {&a, &b, &out});
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (a.device().is_cuda()) {
    return cuda::Gemm(a.dtype(), ta, tb, m, n, k, alpha, a.raw_data(), a.dim(1),
                      b.raw_data(), b.dim(1), beta, out.raw_data(),
                      a.device().index,
                      GetMatMulPrecision() == MatMulPrecision::kTf32);
  }
  if (!parallel) {
    MT_DISPATCH_FLOAT(a.dtype(), T,
                      Blas(a.data<T>(), b.data<T>(), ta, tb, m, n, k, a.dim(1),
                           b.dim(1), alpha, beta, out.data<T>(), n));
    return absl::OkStatus();
  }
  MT_DISPATCH_FLOAT(
      a.dtype(), T,
      ParallelGemm<T>(a.data<T>(), b.data<T>(), ta, tb, m, n, k, a.dim(1),
                      b.dim(1), alpha, beta, out.data<T>()));
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a, bool transpose_b) {
  int64_t m = 0, k = 0, n = 0;
  MT_RETURN_IF_ERROR(
      CheckMatMul("MatMul", a, b, transpose_a, transpose_b, &m, &k, &n));
  // Zeros when k == 0 (an empty sum), uninitialised otherwise.
  MT_ASSIGN_OR_RETURN(Tensor out,
                      k == 0 ? Tensor::Zeros(a.dtype(), {m, n}, a.device())
                             : Tensor::Empty(a.dtype(), {m, n}, a.device()));
  MT_RETURN_IF_ERROR(
      internal::Gemm(a, b, transpose_a, transpose_b, 1.0, 0.0, out));
  tape::RecordOperation(kMatMulOp, {a, b}, {out},
                        MatMulAttrs{transpose_a, transpose_b});
  return out;
}

namespace {

// With C = op(A) op(B): dA and dB per transpose combination, as TensorFlow's
// _MatMulGrad.
MT_OP(kMatMulOp, "MatMul",
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
