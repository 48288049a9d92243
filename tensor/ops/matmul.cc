#include "tensor/ops/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

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

using internal::GemmOperand;

// The operands' shared leading (batch) dimensions and the product's
// m, k, n, as tf.linalg.matmul without batch broadcasting.
struct GemmDims {
  int64_t batch = 1;
  int64_t m = 0, k = 0, n = 0;
};

// The product's dimensions from the operands' shapes; the problem (for
// the caller's error) when they do not fit.
absl::StatusOr<GemmDims> ProductDims(const Shape& a, const Shape& b, bool ta,
                                     bool tb) {
  const int r = static_cast<int>(a.size());
  if (r < 2 || a.size() != b.size()) {
    return absl::InvalidArgumentError(
        "operands must have the same rank >= 2 ([..., m, k] @ [..., k, n])");
  }
  GemmDims d;
  for (int i = 0; i < r - 2; ++i) {
    if (a[i] != b[i]) {
      return absl::InvalidArgumentError("batch dimensions differ");
    }
    d.batch *= a[i];
  }
  d.m = ta ? a[r - 1] : a[r - 2];
  d.k = ta ? a[r - 2] : a[r - 1];
  const int64_t kb = tb ? b[r - 1] : b[r - 2];
  d.n = tb ? b[r - 2] : b[r - 1];
  if (d.k != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("inner dimensions differ (", d.k, " vs ", kb,
                     ", transpose_a=", ta, ", transpose_b=", tb, ")"));
  }
  return d;
}

absl::StatusOr<GemmDims> CheckMatMul(const char* op, const Tensor& a,
                                     const Tensor& b, bool ta, bool tb) {
  // Same device (checked here); host tensors use OpenBLAS, GPU ones cuBLAS.
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, {&a, &b}));
  absl::StatusOr<GemmDims> d = ProductDims(a.shape(), b.shape(), ta, tb);
  if (!d.ok()) return internal::OpError(op, d.status().message(), {&a, &b});
  return d;
}

// The product's shape: a's batch dimensions, then [m, n].
Shape ProductShape(const Shape& a, const GemmDims& d) {
  Shape out(a.begin(), a.end() - 2);
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

// CheckMatMul for operands (unrecorded internal products): defined, one
// floating dtype and device, both converted or neither, fitting shapes.
absl::StatusOr<GemmDims> CheckOperands(const GemmOperand& a,
                                       const GemmOperand& b, bool ta, bool tb) {
  auto error = [&](absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul: ", problem, " (operands ", a.DebugString(), ", ",
                     b.DebugString(), ")"));
  };
  if (!a.defined() || !b.defined() || !IsFloating(a.dtype()) ||
      a.dtype() != b.dtype() || a.device() != b.device()) {
    return error("operands must be floating, of one dtype and device");
  }
  if (a.bf16() != b.bf16()) {
    return error("one operand converted to bfloat16 and the other not");
  }
  absl::StatusOr<GemmDims> d = ProductDims(a.shape(), b.shape(), ta, tb);
  if (!d.ok()) return error(d.status().message());
  return d;
}

// The precision a GPU product of these operands runs in: bf16 when they
// were converted, else f32 or tf32 as set.
MatMulPrecision PrecisionFor(const GemmOperand& a) {
  if (a.bf16()) return MatMulPrecision::kBf16;
  return GetMatMulPrecision() == MatMulPrecision::kTf32
             ? MatMulPrecision::kTf32
             : MatMulPrecision::kFp32;
}

}  // namespace

namespace internal {
namespace {

std::atomic<int64_t> fused_gemm_bias_calls{0};

}  // namespace

absl::Status Gemm(const GemmOperand& a, const GemmOperand& b, bool ta, bool tb,
                  double alpha, double beta, Tensor& out, bool parallel) {
  MT_ASSIGN_OR_RETURN(const GemmDims d, CheckOperands(a, b, ta, tb));
  if (out.shape() != ProductShape(a.shape(), d) || out.dtype() != a.dtype() ||
      out.device() != a.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul: output ", out.DebugString(),
                     " has the wrong shape, dtype or device for operands ",
                     a.DebugString(), ", ", b.DebugString()));
  }
  if (d.batch == 0 || d.m == 0 || d.n == 0) return absl::OkStatus();
  int64_t lda = a.leading_dim(), ldb = b.leading_dim();
  // Batched products step from matrix to matrix by their dense sizes.
  if (d.batch > 1 && (lda != a.shape().back() || ldb != b.shape().back())) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul: batched operands must be dense (operands ",
                     a.DebugString(), ", ", b.DebugString(), ")"));
  }
  // cuBLAS documents leading dimensions >= 1 even where an operand has no
  // columns (k = 0: [m, 0] has 0; Debian's OpenBLAS took 0 there, checked
  // with cblas_sgemm); with k = 0 the product is out = beta * out.
  lda = std::max<int64_t>(lda, 1);
  ldb = std::max<int64_t>(ldb, 1);
  if (a.device().is_cuda()) {
    return cuda::Gemm(a.dtype(), ta, tb,
                      cuda::GemmShape{d.batch, d.m, d.n, d.k}, alpha, a.data(),
                      lda, b.data(), ldb, beta, out.raw_data(),
                      a.device().index, PrecisionFor(a));
  }
  MT_DISPATCH_FLOAT(a.dtype(), T, {
    const T* pa = static_cast<const T*>(a.data());
    const T* pb = static_cast<const T*>(b.data());
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

absl::Status Gemm(const Tensor& a, const Tensor& b, bool ta, bool tb,
                  double alpha, double beta, Tensor& out, bool parallel) {
  MT_ASSIGN_OR_RETURN(const GemmOperand ga, GemmOperand::Of(a));
  MT_ASSIGN_OR_RETURN(const GemmOperand gb, GemmOperand::Of(b));
  return Gemm(ga, gb, ta, tb, alpha, beta, out, parallel);
}

absl::StatusOr<bool> FusedGemmBias(const GemmOperand& a, const GemmOperand& b,
                                   bool ta, bool tb, const Tensor& bias,
                                   bool relu, Tensor& out) {
  if (!a.device().is_cuda() || a.dtype() != DType::kF32 || a.rank() != 2) {
    return false;
  }
  MT_ASSIGN_OR_RETURN(const GemmDims d, CheckOperands(a, b, ta, tb));
  if (d.k == 0) return false;
  const absl::Status s =
      cuda::GemmBias(ta, tb, d.m, d.n, d.k, a.data(), a.leading_dim(), b.data(),
                     b.leading_dim(), bias.raw_data(), relu, out.raw_data(),
                     a.device().index, PrecisionFor(a));
  if (absl::IsNotFound(s)) return false;
  MT_RETURN_IF_ERROR(
      KernelError(relu ? "MatMulBiasRelu" : "MatMulBias", s, {&bias, &out}));
  fused_gemm_bias_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t FusedGemmBiasCalls() {
  return fused_gemm_bias_calls.load(std::memory_order_relaxed);
}

absl::StatusOr<SavedProduct> SaveProduct(const Tensor& a, const Tensor& b,
                                         bool transpose_a, bool transpose_b) {
  SavedProduct p;
  MT_ASSIGN_OR_RETURN(p.a, GemmOperand::Of(a));
  MT_ASSIGN_OR_RETURN(p.b, GemmOperand::Of(b));
  p.transpose_a = transpose_a;
  p.transpose_b = transpose_b;
  return p;
}

absl::StatusOr<Tensor> Product(const GemmOperand& a, const GemmOperand& b,
                               bool ta, bool tb) {
  MT_ASSIGN_OR_RETURN(const GemmDims d, CheckOperands(a, b, ta, tb));
  const Shape shape = ProductShape(a.shape(), d);
  MT_ASSIGN_OR_RETURN(Tensor out,
                      d.k == 0 ? Tensor::Zeros(a.dtype(), shape, a.device())
                               : Tensor::Empty(a.dtype(), shape, a.device()));
  MT_RETURN_IF_ERROR(internal::Gemm(a, b, ta, tb, 1.0, 0.0, out));
  return out;
}

// With C = op(A) op(B): dA and dB per transpose combination.
absl::Status MatMulGrads(const SavedProduct& p, const Tensor& gc,
                         absl::Span<const bool> needs, Grads* grads) {
  const bool ta = p.transpose_a, tb = p.transpose_b;
  if (tape::AnyTapeRecording()) {
    // An outer tape differentiates this backward pass: recorded products.
    const Tensor& a = p.a.tensor();
    const Tensor& b = p.b.tensor();
    if (needs[0]) {
      MT_ASSIGN_OR_RETURN((*grads)[0], ta ? MatMul(b, gc, tb, true)
                                          : MatMul(gc, b, false, !tb));
    }
    if (needs[1]) {
      MT_ASSIGN_OR_RETURN((*grads)[1], tb ? MatMul(gc, a, true, ta)
                                          : MatMul(a, gc, !ta, false));
    }
    return absl::OkStatus();
  }
  MT_ASSIGN_OR_RETURN(const GemmOperand g, GemmOperand::Of(gc, p.a.bf16()));
  return ProductGrads(p, g, needs, grads);
}

absl::Status ProductGrads(const SavedProduct& p, const GemmOperand& g,
                          absl::Span<const bool> needs, Grads* grads) {
  const bool ta = p.transpose_a, tb = p.transpose_b;
  if (needs[0]) {
    MT_ASSIGN_OR_RETURN((*grads)[0], ta ? Product(p.b, g, tb, true)
                                        : Product(g, p.b, false, !tb));
  }
  if (needs[1]) {
    MT_ASSIGN_OR_RETURN((*grads)[1], tb ? Product(g, p.a, true, ta)
                                        : Product(p.a, g, !ta, false));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b,
                              bool transpose_a, bool transpose_b) {
  MT_RETURN_IF_ERROR(
      CheckMatMul("MatMul", a, b, transpose_a, transpose_b).status());
  MT_ASSIGN_OR_RETURN(internal::SavedProduct p,
                      internal::SaveProduct(a, b, transpose_a, transpose_b));
  MT_ASSIGN_OR_RETURN(Tensor out,
                      internal::Product(p.a, p.b, transpose_a, transpose_b));
  tape::RecordOperation(kMatMulOp, {a, b}, {out}, std::move(p));
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
  MT_ASSIGN_OR_RETURN(
      Tensor out,
      Tensor::Empty(a.dtype(), ProductShape(a.shape(), d), a.device()));
  MT_ASSIGN_OR_RETURN(internal::SavedProduct p,
                      internal::SaveProduct(a, b, transpose_a, transpose_b));
  MT_ASSIGN_OR_RETURN(
      const bool fused,
      internal::FusedGemmBias(p.a, p.b, transpose_a, transpose_b, bias,
                              /*relu=*/false, out));
  if (!fused) {
    MT_RETURN_IF_ERROR(BroadcastRows(bias, out));
    MT_RETURN_IF_ERROR(
        internal::Gemm(p.a, p.b, transpose_a, transpose_b, 1.0, 1.0, out));
  }
  tape::RecordOperation(kMatMulBiasOp, {a, b, bias}, {out}, std::move(p));
  return out;
}

namespace {

MT_OP_RECORDED_GRADIENT(
    kMatMulOp, "MatMul",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      return internal::MatMulGrads(
          std::any_cast<const internal::SavedProduct&>(op.attrs), g[0], needs,
          grads);
    });

MT_OP_RECORDED_GRADIENT(
    kMatMulBiasOp, "MatMulBias",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      MT_RETURN_IF_ERROR(internal::MatMulGrads(
          std::any_cast<const internal::SavedProduct&>(op.attrs), g[0], needs,
          grads));
      if (needs[2]) {
        MT_ASSIGN_OR_RETURN((*grads)[2],
                            internal::BiasGradient(g[0], op.inputs[2].shape()));
      }
      return absl::OkStatus();
    });

}  // namespace
}  // namespace mirrortrain::ops
