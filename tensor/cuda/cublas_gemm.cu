// Matrix products on cuBLAS. cuBLAS is column-major: a row-major C = A B is
// the column-major C^T = B^T A^T, so operands are passed swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <utility>

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
absl::StatusOr<cublasHandle_t> HandleFor(const CublasLibrary& l, int device) {
  return ThreadHandle<cublasHandle_t>(device, l.Create, l.Destroy);
}

// cuBLAS's workspace, ours (as PyTorch sets one per handle and stream):
// without one, cuBLAS takes its workspace stream-ordered inside a CUDA graph
// capture, which puts allocation nodes of its own in the graph (one per
// recorded product's stream; with logical replicas, several branches). One
// buffer per (thread, device, stream), made outside any graph pool and kept
// until the thread ends, so every graph that recorded its address can be
// replayed. 32 MiB: cuBLAS's own default on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::StatusOr<void*> WorkspaceFor(int device, cudaStream_t stream) {
  struct Free {
    void operator()(void* p) const { cudaFree(p); }  // Best effort at exit.
  };
  thread_local std::map<std::pair<int, cudaStream_t>,
                        std::unique_ptr<void, Free>>
      workspaces;
  auto& slot = workspaces[{device, stream}];
  if (slot == nullptr) {
    void* p = nullptr;
    MT_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, kWorkspaceBytes));
    slot.reset(p);
  }
  return slot.get();
}

// cuBLAS's per-dtype entry points.
template <typename T>
struct CublasFor;
template <>
struct CublasFor<float> {
  static auto gemm(const CublasLibrary& l) { return l.Sgemm; }
  static auto batched(const CublasLibrary& l) { return l.SgemmStridedBatched; }
};
template <>
struct CublasFor<double> {
  static auto gemm(const CublasLibrary& l) { return l.Dgemm; }
  static auto batched(const CublasLibrary& l) { return l.DgemmStridedBatched; }
};

// One cuBLAS call: row-major C_i = alpha op(A_i) op(B_i) + beta C_i for the
// `batch` matrices stored one after another, as the column-major
// C^T = B^T A^T (operands and their strides swapped); C's leading dimension
// is n.
struct GemmCall {
  cublasOperation_t op_a, op_b;
  int64_t batch, m, n, k;
  double alpha;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  double beta;
  void* c;
};

template <typename T>
absl::Status TypedGemm(const CublasLibrary& l, cublasHandle_t h,
                       const GemmCall& g) {
  const T al = static_cast<T>(g.alpha), be = static_cast<T>(g.beta);
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n),
            k = static_cast<int>(g.k);
  const auto* ta = static_cast<const T*>(g.a);
  const auto* tb = static_cast<const T*>(g.b);
  auto* tc = static_cast<T*>(g.c);
  if (g.batch == 1) {
    MT_CUBLAS_RETURN_IF_ERROR(CublasFor<T>::gemm(l)(
        h, g.op_b, g.op_a, n, m, k, &al, tb, static_cast<int>(g.ldb), ta,
        static_cast<int>(g.lda), &be, tc, n));
  } else {
    MT_CUBLAS_RETURN_IF_ERROR(CublasFor<T>::batched(l)(
        h, g.op_b, g.op_a, n, m, k, &al, tb, static_cast<int>(g.ldb), g.k * g.n,
        ta, static_cast<int>(g.lda), g.m * g.k, &be, tc, n, g.m * g.n,
        static_cast<int>(g.batch)));
  }
  return absl::OkStatus();
}

// The f32 product of bfloat16 operands (converted by the caller) on tensor
// cores: the products and sums are f32, and so is C.
absl::Status Bf16Gemm(const CublasLibrary& l, cublasHandle_t h,
                      const GemmCall& g) {
  const float al = static_cast<float>(g.alpha), be = static_cast<float>(g.beta);
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n),
            k = static_cast<int>(g.k);
  MT_CUBLAS_RETURN_IF_ERROR(l.SetMathMode(h, CUBLAS_DEFAULT_MATH));
  if (g.batch == 1) {
    MT_CUBLAS_RETURN_IF_ERROR(l.GemmEx(
        h, g.op_b, g.op_a, n, m, k, &al, g.b, CUDA_R_16BF,
        static_cast<int>(g.ldb), g.a, CUDA_R_16BF, static_cast<int>(g.lda), &be,
        g.c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    MT_CUBLAS_RETURN_IF_ERROR(l.GemmStridedBatchedEx(
        h, g.op_b, g.op_a, n, m, k, &al, g.b, CUDA_R_16BF,
        static_cast<int>(g.ldb), g.k * g.n, g.a, CUDA_R_16BF,
        static_cast<int>(g.lda), g.m * g.k, &be, g.c, CUDA_R_32F, n, g.m * g.n,
        static_cast<int>(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return absl::OkStatus();
}

// Dispatches one call by dtype and precision (the math mode set first).
absl::Status RunGemm(const CublasLibrary& l, cublasHandle_t h, DType dtype,
                     MatMulPrecision precision, const GemmCall& g) {
  if (dtype == DType::kF32 && precision == MatMulPrecision::kBf16) {
    return Bf16Gemm(l, h, g);
  }
  if (dtype == DType::kF32) {
    MT_CUBLAS_RETURN_IF_ERROR(l.SetMathMode(
        h, precision == MatMulPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_DEFAULT_MATH));
    return TypedGemm<float>(l, h, g);
  }
  return TypedGemm<double>(l, h, g);
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
  MT_ASSIGN_OR_RETURN(const CublasLibrary* l, LoadCublas());
  MT_ASSIGN_OR_RETURN(cublasHandle_t h, HandleFor(*l, device));
  const cudaStream_t stream = LaunchStream();
  MT_CUBLAS_RETURN_IF_ERROR(l->SetStream(h, stream));
  // After SetStream, which resets the handle to cuBLAS's own workspace.
  MT_ASSIGN_OR_RETURN(void* workspace, WorkspaceFor(device, stream));
  MT_CUBLAS_RETURN_IF_ERROR(l->SetWorkspace(h, workspace, kWorkspaceBytes));
  const GemmCall call{.op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      .op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                      .batch = batch,
                      .m = m,
                      .n = n,
                      .k = k,
                      .alpha = alpha,
                      .a = a,
                      .lda = lda,
                      .b = b,
                      .ldb = ldb,
                      .beta = beta,
                      .c = c};
  return RunGemm(*l, h, dtype, precision, call);
}

MT_DEFINE_CUDA_KERNEL(Gemm, GemmOnGpu);

}  // namespace mirrortrain::cuda
