// Matrix products on cuBLAS. cuBLAS is column-major: a row-major C = A B is
// the column-major C^T = B^T A^T, so operands are passed swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cublas_util.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// cuBLAS handles are not thread-safe to share: one per (thread, device).
absl::StatusOr<cublasHandle_t> HandleFor(int device) {
  return ThreadHandle<cublasHandle_t, cublasCreate, cublasDestroy>(device);
}

// cuBLAS's per-dtype entry points.
template <typename T>
struct CublasFor;
template <>
struct CublasFor<float> {
  static constexpr auto gemm = cublasSgemm;
  static constexpr auto batched = cublasSgemmStridedBatched;
};
template <>
struct CublasFor<double> {
  static constexpr auto gemm = cublasDgemm;
  static constexpr auto batched = cublasDgemmStridedBatched;
};

// Row-major C = op(A) op(B) per matrix as the column-major C^T = B^T A^T:
// operands (and their strides) swapped.
template <typename T>
absl::Status TypedGemm(cublasHandle_t h, cublasOperation_t op_a,
                       cublasOperation_t op_b, const GemmShape& s, double alpha,
                       const void* a, int64_t lda, const void* b, int64_t ldb,
                       double beta, void* c) {
  const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n),
            k = static_cast<int>(s.k);
  const auto* ta = static_cast<const T*>(a);
  const auto* tb = static_cast<const T*>(b);
  auto* tc = static_cast<T*>(c);
  if (s.batch == 1) {
    MT_CUBLAS_RETURN_IF_ERROR(CublasFor<T>::gemm(
        h, op_b, op_a, n, m, k, &al, tb, static_cast<int>(ldb), ta,
        static_cast<int>(lda), &be, tc, n));
  } else {
    MT_CUBLAS_RETURN_IF_ERROR(CublasFor<T>::batched(
        h, op_b, op_a, n, m, k, &al, tb, static_cast<int>(ldb), s.k * s.n, ta,
        static_cast<int>(lda), s.m * s.k, &be, tc, n, s.m * s.n,
        static_cast<int>(s.batch)));
  }
  return absl::OkStatus();
}

// The f32 product of bfloat16 operands (converted by the caller) on tensor
// cores: the products and sums are f32, and so is C. Operands swapped as in
// TypedGemm.
absl::Status Bf16Gemm(cublasHandle_t h, cublasOperation_t op_a,
                      cublasOperation_t op_b, const GemmShape& s, double alpha,
                      const void* a16, int64_t lda, const void* b16,
                      int64_t ldb, double beta, void* c) {
  const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n),
            k = static_cast<int>(s.k);
  MT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  if (s.batch == 1) {
    MT_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
        h, op_b, op_a, n, m, k, &al, b16, CUDA_R_16BF, static_cast<int>(ldb),
        a16, CUDA_R_16BF, static_cast<int>(lda), &be, c, CUDA_R_32F, n,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    MT_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
        h, op_b, op_a, n, m, k, &al, b16, CUDA_R_16BF, static_cast<int>(ldb),
        s.k * s.n, a16, CUDA_R_16BF, static_cast<int>(lda), s.m * s.k, &be, c,
        CUDA_R_32F, n, s.m * s.n, static_cast<int>(s.batch), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmOnGpu(DType dtype, bool ta, bool tb, GemmShape shape,
                       double alpha, const void* a, int64_t lda, const void* b,
                       int64_t ldb, double beta, void* c, int device,
                       MatMulPrecision precision) {
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuBLAS GEMM takes f32 or f64, got ", DTypeName(dtype)));
  }
  const int64_t m = shape.m, n = shape.n, k = shape.k, batch = shape.batch;
  if (batch == 0 || m == 0 || n == 0) return absl::OkStatus();
  for (int64_t v : {m, n, k, lda, ldb, batch}) {
    if (v > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuBLAS GEMM: dimension ", v, " exceeds the 32-bit API (batch=",
          batch, " m=", m, " n=", n, " k=", k, ")"));
    }
  }
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  if (k == 0 && (beta == 0 || beta == 1)) {
    // An empty sum: C = beta * C without cuBLAS, which rejects the zero
    // leading dimension an empty operand has.
    if (beta == 1) return absl::OkStatus();
    MT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        c, 0, static_cast<size_t>(batch * m * n) * DTypeSize(dtype),
        LaunchStream()));
    return absl::OkStatus();
  }
  // BLAS wants leading dimensions >= 1 even for empty operands.
  lda = std::max<int64_t>(lda, 1);
  ldb = std::max<int64_t>(ldb, 1);
  MT_ASSIGN_OR_RETURN(cublasHandle_t h, HandleFor(device));
  MT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(h, LaunchStream()));
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dtype == DType::kF32 && precision == MatMulPrecision::kBf16) {
    return Bf16Gemm(h, op_a, op_b, shape, alpha, a, lda, b, ldb, beta, c);
  }
  if (dtype == DType::kF32) {
    MT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
        h, precision == MatMulPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_DEFAULT_MATH));
    return TypedGemm<float>(h, op_a, op_b, shape, alpha, a, lda, b, ldb, beta,
                            c);
  }
  return TypedGemm<double>(h, op_a, op_b, shape, alpha, a, lda, b, ldb, beta,
                           c);
}

MT_DEFINE_CUDA_KERNEL(Gemm, GemmOnGpu);

}  // namespace mirrortrain::cuda
