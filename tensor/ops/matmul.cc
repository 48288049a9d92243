#include "tensor/ops/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/bfloat16.h"
#include "tensor/cpu_threads.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/op.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kMatMulOp);
MT_DECLARE_OP(kMatMulBiasOp);
}  // namespace
namespace {

struct MatMulAttrs {
  bool transpose_a;
  bool transpose_b;
};

// The operands' shared leading (batch) dimensions and the product's
// m, k, n, as tf.linalg.matmul without batch broadcasting.
struct GemmDims {
  int64_t batch = 1;
  int64_t m = 0, k = 0, n = 0;
};

absl::StatusOr<GemmDims> CheckMatMul(const char* op, const Tensor& a,
                                     const Tensor& b, bool ta, bool tb) {
  // Same device (checked here); host tensors use OpenBLAS, GPU ones cuBLAS.
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, {&a, &b}));
  if (a.rank() < 2 || a.rank() != b.rank()) {
    return internal::OpError(
        op, "operands must have the same rank >= 2 ([..., m, k] @ [..., k, n])",
        {&a, &b});
  }
  const int r = a.rank();
  GemmDims d;
  for (int i = 0; i < r - 2; ++i) {
    if (a.dim(i) != b.dim(i)) {
      return internal::OpError(op, "batch dimensions differ", {&a, &b});
    }
    d.batch *= a.dim(i);
  }
  d.m = ta ? a.dim(r - 1) : a.dim(r - 2);
  d.k = ta ? a.dim(r - 2) : a.dim(r - 1);
  const int64_t kb = tb ? b.dim(r - 1) : b.dim(r - 2);
  d.n = tb ? b.dim(r - 2) : b.dim(r - 1);
  if (d.k != kb) {
    return internal::OpError(
        op,
        absl::StrCat("inner dimensions differ (", d.k, " vs ", kb,
                     ", transpose_a=", ta, ", transpose_b=", tb, ")"),
        {&a, &b});
  }
  return d;
}

// The product's shape: a's batch dimensions, then [m, n].
Shape ProductShape(const Tensor& a, const GemmDims& d) {
  Shape out(a.shape().begin(), a.shape().end() - 2);
  out.push_back(d.m);
  out.push_back(d.n);
  return out;
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

// Batched products: one single-threaded BLAS call per matrix, the matrices
// spread over the kernel threads (attention's many small products), so each
// result is the same whatever the split.
template <typename T>
void BatchedGemm(const T* a, const T* b, bool ta, bool tb, const GemmDims& d,
                 int64_t lda, int64_t ldb, double alpha, double beta, T* c) {
  constexpr int64_t kMinFlopsPerThread = 1 << 21;
  const int64_t flops = std::max<int64_t>(2 * d.m * d.n * d.k, 1);
  const int64_t stride_a = d.m * d.k, stride_b = d.k * d.n,
                stride_c = d.m * d.n;
  ParallelFor(d.batch, std::max<int64_t>(1, kMinFlopsPerThread / flops),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  Blas(a + i * stride_a, b + i * stride_b, ta, tb, d.m, d.n,
                       d.k, lda, ldb, alpha, beta, c + i * stride_c, d.n);
                }
              });
}

// `t`'s elements rounded to bfloat16, in this thread's scratch buffer
// `slot` (0 or 1: a product has two operands); valid until this thread
// rounds into the same slot again. Same layout as `t`.
const float* Bf16Operand(const Tensor& t, int slot) {
  thread_local std::vector<float> scratch[2];
  std::vector<float>& buffer = scratch[slot];
  buffer.resize(static_cast<size_t>(t.num_elements()));
  RoundToBFloat16(t.data<float>(), buffer.data(), t.num_elements());
  return buffer.data();
}

// What the product reads of `t`: with `bf16`, the operands a bf16
// tensor-core product reads (f32 only); the exact products of two bfloat16
// values then sum in f32, as on the GPU.
template <typename T>
const T* GemmOperand(const Tensor& t, int slot, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) return Bf16Operand(t, slot);
  }
  return t.data<T>();
}

}  // namespace

namespace internal {

absl::Status Gemm(const Tensor& a, const Tensor& b, bool ta, bool tb,
                  double alpha, double beta, Tensor& out, bool parallel) {
  MT_ASSIGN_OR_RETURN(const GemmDims d, CheckMatMul("MatMul", a, b, ta, tb));
  if (out.shape() != ProductShape(a, d) || out.dtype() != a.dtype()) {
    return OpError("MatMul", "output has the wrong shape or dtype",
                   {&a, &b, &out});
  }
  if (d.batch == 0 || d.m == 0 || d.n == 0) return absl::OkStatus();
  const int64_t lda = a.dim(a.rank() - 1), ldb = b.dim(b.rank() - 1);
  if (a.device().is_cuda()) {
    return cuda::Gemm(a.dtype(), ta, tb,
                      cuda::GemmShape{d.batch, d.m, d.n, d.k}, alpha,
                      a.raw_data(), lda, b.raw_data(), ldb, beta,
                      out.raw_data(), a.device().index, GetMatMulPrecision());
  }
  const bool bf16 = GetMatMulPrecision() == MatMulPrecision::kBf16;
  MT_DISPATCH_FLOAT(a.dtype(), T, {
    const T* pa = GemmOperand<T>(a, 0, bf16);
    const T* pb = GemmOperand<T>(b, 1, bf16);
    T* pc = out.data<T>();
    if (d.batch > 1) {
      BatchedGemm<T>(pa, pb, ta, tb, d, lda, ldb, alpha, beta, pc);
    } else if (!parallel) {
      Blas(pa, pb, ta, tb, d.m, d.n, d.k, lda, ldb, alpha, beta, pc, d.n);
    } else {
      ParallelGemm<T>(pa, pb, ta, tb, d.m, d.n, d.k, lda, ldb, alpha, beta, pc);
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<bool> FusedGemmBias(const Tensor& a, const Tensor& b, bool ta,
                                   bool tb, const Tensor& bias, bool relu,
                                   Tensor& out) {
  if (!a.device().is_cuda() || a.dtype() != DType::kF32 || a.rank() != 2) {
    return false;
  }
  MT_ASSIGN_OR_RETURN(const GemmDims d, CheckMatMul("MatMul", a, b, ta, tb));
  if (d.k == 0) return false;
  const absl::Status s =
      cuda::GemmBias(ta, tb, d.m, d.n, d.k, a.raw_data(), a.dim(1),
                     b.raw_data(), b.dim(1), bias.raw_data(), relu,
                     out.raw_data(), a.device().index, GetMatMulPrecision());
  if (absl::IsNotFound(s)) return false;
  MT_RETURN_IF_ERROR(
      KernelError(relu ? "MatMulBiasRelu" : "MatMulBias", s, {&a, &b, &bias}));
  return true;
}

// With C = op(A) op(B): dA and dB per transpose combination.
absl::Status MatMulGrads(const Tensor& a, const Tensor& b, bool ta, bool tb,
                         const Tensor& gc, absl::Span<const bool> needs,
                         Grads* grads) {
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
}

}  // namespace internal

absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a, bool transpose_b) {
  MT_ASSIGN_OR_RETURN(const GemmDims d,
                      CheckMatMul("MatMul", a, b, transpose_a, transpose_b));
  const Shape shape = ProductShape(a, d);
  // Zeros when k == 0 (an empty sum), uninitialised otherwise.
  MT_ASSIGN_OR_RETURN(Tensor out,
                      d.k == 0 ? Tensor::Zeros(a.dtype(), shape, a.device())
                               : Tensor::Empty(a.dtype(), shape, a.device()));
  MT_RETURN_IF_ERROR(
      internal::Gemm(a, b, transpose_a, transpose_b, 1.0, 0.0, out));
  tape::RecordOperation(kMatMulOp, {a, b}, {out},
                        MatMulAttrs{transpose_a, transpose_b});
  return out;
}

namespace {

// Fills each row of out [..., n] with bias [n].
absl::Status BroadcastRows(const Tensor& bias, Tensor& out) {
  const int64_t n = bias.num_elements();
  const int64_t rows = n == 0 ? 0 : out.num_elements() / n;
  if (rows == 0) return absl::OkStatus();
  if (out.device().is_cuda()) {
    const int64_t shape[] = {rows, n}, src_strides[] = {0, 1},
                  dst_strides[] = {n, 1};
    return internal::KernelError(
        "MatMulBias",
        cuda::StridedCopy(DTypeSize(out.dtype()), shape, bias.raw_data(), 0,
                          src_strides, out.raw_data(), 0, dst_strides,
                          out.device().index),
        {&bias});
  }
  const size_t row_bytes = n * DTypeSize(out.dtype());
  const char* src = static_cast<const char*>(bias.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  ParallelFor(rows, RowsPerChunk(n, 1 << 15), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(dst + r * row_bytes, src, row_bytes);
    }
  });
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> MatMulBias(const Tensor& a, const Tensor& b,
                                  const Tensor& bias, bool transpose_a,
                                  bool transpose_b) {
  constexpr const char* kOp = "MatMulBias";
  MT_ASSIGN_OR_RETURN(const GemmDims d,
                      CheckMatMul(kOp, a, b, transpose_a, transpose_b));
  MT_RETURN_IF_ERROR(internal::CheckSameDevice(kOp, {&a, &bias}));
  if (bias.dtype() != a.dtype() || bias.rank() != 1 || bias.dim(0) != d.n) {
    return internal::OpError(
        kOp, "bias must be 1-D, of the product's dtype and n", {&a, &b, &bias});
  }
  MT_ASSIGN_OR_RETURN(Tensor out,
                      Tensor::Empty(a.dtype(), ProductShape(a, d), a.device()));
  MT_ASSIGN_OR_RETURN(const bool fused,
                      internal::FusedGemmBias(a, b, transpose_a, transpose_b,
                                              bias, /*relu=*/false, out));
  if (!fused) {
    MT_RETURN_IF_ERROR(BroadcastRows(bias, out));
    MT_RETURN_IF_ERROR(
        internal::Gemm(a, b, transpose_a, transpose_b, 1.0, 1.0, out));
  }
  tape::RecordOperation(kMatMulBiasOp, {a, b, bias}, {out},
                        MatMulAttrs{transpose_a, transpose_b});
  return out;
}

namespace {

MT_OP(kMatMulOp, "MatMul",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        const auto& at = std::any_cast<const MatMulAttrs&>(op.attrs);
        return internal::MatMulGrads(op.inputs[0], op.inputs[1], at.transpose_a,
                                     at.transpose_b, g[0], needs, grads);
      });

MT_OP(kMatMulBiasOp, "MatMulBias",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        const auto& at = std::any_cast<const MatMulAttrs&>(op.attrs);
        MT_RETURN_IF_ERROR(internal::MatMulGrads(op.inputs[0], op.inputs[1],
                                                 at.transpose_a, at.transpose_b,
                                                 g[0], needs, grads));
        if (needs[2]) {
          MT_ASSIGN_OR_RETURN(
              (*grads)[2], internal::BiasGradient(g[0], op.inputs[2].shape()));
        }
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
