// Matrix products with the bias (and relu) fused into the GEMM's epilogue,
// on cuBLASLt: one pass over C instead of a GEMM then a bias pass. Row-major
// C = A B is the column-major C^T = B^T A^T, so operands are passed swapped
// and the bias, per column of row-major C, is per row of cuBLASLt's D.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tensor/cuda/cublas_util.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/device_scratch.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Workspace cuBLASLt may use (split-K and stream-K algorithms want it).
constexpr uint64_t kMaxWorkspaceBytes = 32ull << 20;

// One handle per (thread, device), as for cuBLAS.
absl::StatusOr<cublasLtHandle_t> LtHandleFor(const CublasLibrary& l,
                                             int device) {
  return ThreadHandle<cublasLtHandle_t>(device, l.LtCreate, l.LtDestroy);
}

// RAII owners of the descriptors one call creates, destroyed by the loaded
// library's functions.
template <typename Opaque>
using LtOwned = std::unique_ptr<Opaque, cublasStatus_t (*)(Opaque*)>;
using MatmulDesc = LtOwned<cublasLtMatmulDescOpaque_t>;
using Layout = LtOwned<cublasLtMatrixLayoutOpaque_t>;
using Preference = LtOwned<cublasLtMatmulPreferenceOpaque_t>;

absl::StatusOr<Layout> MakeLayout(const CublasLibrary& lib, cudaDataType_t type,
                                  int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  MT_CUBLAS_RETURN_IF_ERROR(
      lib.LtMatrixLayoutCreate(&l, type, rows, cols, std::max<int64_t>(ld, 1)));
  return Layout(l, lib.LtMatrixLayoutDestroy);
}

template <typename T>
absl::Status SetDesc(const CublasLibrary& lib, cublasLtMatmulDesc_t desc,
                     cublasLtMatmulDescAttributes_t attr, const T& value) {
  MT_CUBLAS_RETURN_IF_ERROR(
      lib.LtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
  return absl::OkStatus();
}

// The largest power of two (up to 256) dividing the address: the heuristic
// assumes 256-byte alignment unless told, and a replica's shard of a batch
// starts wherever its rows do.
uint32_t Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// One cuBLASLt product, row-major C[m,n] = op(A) @ op(B) (A [m,k] with
// leading dimension lda, B [k,n] with ldb, as stored row-major)...
struct LtOperands {
  bool ta, tb;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int device;
  MatMulPrecision precision;
};
// ...and then its epilogue: relu or not, after the f32 bias [n].
struct LtEpilogue {
  cublasLtEpilogue_t kind;
  const void* bias;
};

// What the heuristic said about one problem: everything its answer depends
// on (shapes, types, transposes, the epilogue, the pointers' alignments).
using PickKey =
    std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
               int, int, uint32_t, uint32_t, uint32_t, uint32_t>;
struct Pick {
  cublasLtMatmulAlgo_t algo = {};
  size_t workspace_bytes = 0;
  std::string refusal;  // Not empty: no algorithm, and why.
};

// The heuristic takes tens of microseconds of host time per query
// (cuBLASLt's guide recommends keeping its answers); eager steps and
// evaluations ask the same few problems again and again, and after a
// refusal the unfused path follows at once. Per thread, as the
// handles are; cleared if it ever holds more than kMaxPicks problems.
constexpr size_t kMaxPicks = 4096;
thread_local std::map<PickKey, Pick> picks;

Pick* CachedPick(const PickKey& key) {
  auto it = picks.find(key);
  return it == picks.end() ? nullptr : &it->second;
}

Pick* RememberPick(const PickKey& key, Pick pick) {
  if (picks.size() >= kMaxPicks) picks.clear();
  return &picks.emplace(key, std::move(pick)).first->second;
}

absl::Status LtProduct(const LtOperands& call, const LtEpilogue& epilogue) {
  const bool ta = call.ta, tb = call.tb;
  const int64_t m = call.m, n = call.n, k = call.k;
  const int64_t lda = call.lda, ldb = call.ldb;
  const int device = call.device;
  const MatMulPrecision precision = call.precision;
  void* const c = call.c;
  constexpr absl::string_view name = "GemmBias";  // For errors.
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": k must be >= 1 (an empty product is the bias alone)"));
  }
  // Very tall products (a large conv chunk's rows) have failed at run time
  // with epilogues in some cuBLAS releases (pytorch/pytorch#73455); PyTorch
  // keeps cuBLASLt below this bound, and so does this: the unfused path.
  constexpr int64_t kMaxLtDimension = int64_t{65535} * 32;
  if (std::max({m, n, k}) >= kMaxLtDimension) {
    return absl::NotFoundError(absl::StrCat(name, ": m=", m, " n=", n, " k=", k,
                                            " beyond the epilogue bound"));
  }
  for (int64_t v : {m, n, k, lda, ldb}) {
    if (v > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": dimension ", v, " exceeds the 32-bit API (m=", m, " n=", n,
          " k=", k, ")"));
    }
  }
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  MT_ASSIGN_OR_RETURN(const CublasLibrary* lib, LoadCublas());
  MT_ASSIGN_OR_RETURN(cublasLtHandle_t h, LtHandleFor(*lib, device));
  const cudaStream_t stream = LaunchStream();

  // cuBLASLt's A is our B and its B our A.
  const void* lt_a = call.b;
  const void* lt_b = call.a;
  const bool bf16 = precision == MatMulPrecision::kBf16;
  const cudaDataType_t operand_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = precision == MatMulPrecision::kTf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;

  cublasLtMatmulDesc_t raw_desc = nullptr;
  MT_CUBLAS_RETURN_IF_ERROR(
      lib->LtMatmulDescCreate(&raw_desc, compute, CUDA_R_32F));
  const MatmulDesc desc(raw_desc, lib->LtMatmulDescDestroy);
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  MT_RETURN_IF_ERROR(
      SetDesc(*lib, raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a));
  MT_RETURN_IF_ERROR(
      SetDesc(*lib, raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b));
  MT_RETURN_IF_ERROR(
      SetDesc(*lib, raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue.kind));
  MT_RETURN_IF_ERROR(SetDesc(*lib, raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                             epilogue.bias));

  // Column-major views: our row-major B [k, n] (or [n, k] transposed) is
  // n x k (k x n) with leading dimension ldb; likewise A; D is n x m.
  MT_ASSIGN_OR_RETURN(Layout layout_a, MakeLayout(*lib, operand_type,
                                                  tb ? k : n, tb ? n : k, ldb));
  MT_ASSIGN_OR_RETURN(Layout layout_b, MakeLayout(*lib, operand_type,
                                                  ta ? m : k, ta ? k : m, lda));
  MT_ASSIGN_OR_RETURN(Layout layout_d, MakeLayout(*lib, CUDA_R_32F, n, m, n));

  // NotFound (not Internal): the caller then takes the unfused path. Any
  // other failure (a bad descriptor) is an error, not a silent fallback.
  const auto not_found = [&](absl::string_view why) {
    return absl::NotFoundError(
        absl::StrCat(name, ": cuBLASLt ", why, " for m=", m, " n=", n, " k=", k,
                     " transpose_a=", ta, " transpose_b=", tb, " bf16=", bf16));
  };
  const PickKey key{device,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    lda,
                    ldb,
                    static_cast<int>(precision),
                    static_cast<int>(epilogue.kind),
                    Alignment(lt_a),
                    Alignment(lt_b),
                    Alignment(c),
                    Alignment(epilogue.bias)};
  // The preference has no alignment hint for the bias, and epilogues are
  // reported to need an aligned one: a bias view at an odd offset takes the
  // unfused path rather than risk a failure that is not NOT_SUPPORTED.
  if (epilogue.bias != nullptr && Alignment(epilogue.bias) < 16) {
    return not_found("is not given a bias aligned to 16 bytes");
  }
  Pick* pick = CachedPick(key);
  if (pick == nullptr) {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    MT_CUBLAS_RETURN_IF_ERROR(lib->LtMatmulPreferenceCreate(&raw_pref));
    const Preference pref(raw_pref, lib->LtMatmulPreferenceDestroy);
    MT_CUBLAS_RETURN_IF_ERROR(lib->LtMatmulPreferenceSetAttribute(
        raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kMaxWorkspaceBytes,
        sizeof(kMaxWorkspaceBytes)));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*>
        alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, lt_a},
                        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, lt_b},
                        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c},
                        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c}};
    for (const auto& [attr, ptr] : alignments) {
      const uint32_t align = Alignment(ptr);
      MT_CUBLAS_RETURN_IF_ERROR(lib->LtMatmulPreferenceSetAttribute(
          raw_pref, attr, &align, sizeof(align)));
    }
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t heuristic = lib->LtMatmulAlgoGetHeuristic(
        h, raw_desc, layout_a.get(), layout_b.get(), layout_d.get(),
        layout_d.get(), raw_pref, 1, &result, &found);
    Pick answer;
    if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED) {
      answer.refusal = "refused";
    } else {
      MT_CUBLAS_RETURN_IF_ERROR(heuristic);  // Not remembered.
      if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
        answer.refusal = "has no algorithm";
      } else {
        answer.algo = result.algo;
        answer.workspace_bytes = result.workspaceSize;
      }
    }
    pick = RememberPick(key, std::move(answer));
  }
  if (!pick->refusal.empty()) return not_found(pick->refusal);
  DeviceScratch workspace;
  if (pick->workspace_bytes > 0) {
    MT_RETURN_IF_ERROR(workspace.Allocate(device, pick->workspace_bytes));
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t run = lib->LtMatmul(
      h, raw_desc, &alpha, lt_a, layout_a.get(), lt_b, layout_b.get(), &beta, c,
      layout_d.get(), c, layout_d.get(), &pick->algo, workspace.get<void>(),
      pick->workspace_bytes, stream);
  // A heuristic's pick may still be refused before it launches (the
  // header's caveat): nothing was written, so the unfused path can run,
  // now and for this problem from now on.
  if (run == CUBLAS_STATUS_NOT_SUPPORTED) {
    pick->refusal = "refused to run";
    return not_found(pick->refusal);
  }
  MT_CUBLAS_RETURN_IF_ERROR(run);
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmBiasOnGpu(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           const void* a, int64_t lda, const void* b,
                           int64_t ldb, const void* bias, bool relu, void* c,
                           int device, MatMulPrecision precision) {
  return LtProduct(
      {ta, tb, m, n, k, a, lda, b, ldb, c, device, precision},
      {relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS, bias});
}

MT_DEFINE_CUDA_KERNEL(GemmBias, GemmBiasOnGpu);

}  // namespace mirrortrain::cuda
