// How much a per-shape algorithm search could win over the algorithms
// cuBLAS picks by itself, for the products of one training step of the CNN
// (configs/fashion_mnist_cnn_gpu.yaml at batch 256) or of the MLP
// (configs/mlp_4096_gpu.yaml: 784-4096x4-10 at batch 4096): the shapes
// GemmOnGpu and GemmBiasOnGpu are asked, row-major, with the same operand
// strides; all timed without an epilogue, though mirrortrain adds the
// dense layers' forward bias (and relu) in cuBLASLt's. Per shape and
// precision, one JSON line: the time of GemmOnGpu's call (cublasSgemm, or
// cublasGemmEx with bf16 operands), of cuBLASLt's first heuristic answer,
// and of the fastest of its first 32 answers, each the mean of a timed loop
// after warm-up; `count` is how often a step makes that product.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o build/bin/gemm_candidates \
//     scripts/bench/gemm_candidates.cu -lcublas -lcublasLt
//   build/bin/gemm_candidates [cnn|mlp] [fp32] [tf32] [bf16]
//   # default: cnn fp32 bf16
#include <cublasLt.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_cuda.cuh"

namespace {

// Row-major C[m,n] = op(A) op(B); A stored [ta ? k : m, lda], B stored
// [tb ? n : k, ldb].
struct Product {
  const char* name;
  bool ta, tb;
  long m, n, k, lda, ldb;
  int count = 1;  // Products of this shape per step.
};

// The CNN's step at batch 256 (28x28x1 -> conv 5x5x32 -> pool -> conv
// 5x5x64 -> pool -> dense 1024 -> dense 10). Conv columns are rows of
// output pixels (256 x 28 x 28 and 256 x 14 x 14), their patch padded to
// 16 bytes (25 -> 28 f32 values, -> 32 bf16 values).
std::vector<Product> CnnProducts(bool bf16) {
  const long conv1_stride = bf16 ? 32 : 28;
  return {
      {"conv1 forward", false, false, 200704, 32, 25, conv1_stride, 32},
      {"conv1 filter gradient", true, false, 25, 32, 200704, conv1_stride, 32},
      {"conv2 forward", false, false, 50176, 64, 800, 800, 64},
      {"conv2 filter gradient", true, false, 800, 64, 50176, 800, 64},
      {"conv2 input gradient", false, true, 50176, 800, 64, 64, 64},
      {"dense1 forward", false, false, 256, 1024, 3136, 3136, 1024},
      {"dense1 weight gradient", true, false, 3136, 1024, 256, 3136, 1024},
      {"dense1 input gradient", false, true, 256, 3136, 1024, 1024, 1024},
      {"dense2 forward", false, false, 256, 10, 1024, 1024, 10},
      {"dense2 weight gradient", true, false, 1024, 10, 256, 1024, 10},
      {"dense2 input gradient", false, true, 256, 1024, 10, 10, 10},
  };
}

// The MLP's step at batch 4096 (784 -> 4096 -> 4096 -> 4096 -> 4096 -> 10;
// unpadded rows, as the CNN's dense layers). The first
// layer has no input gradient; the three 4096 x 4096 layers' products are
// one shape each, made three times.
std::vector<Product> MlpProducts() {
  constexpr long kBatch = 4096, kIn = 784, kWide = 4096, kOut = 10;
  return {
      {"dense1 forward", false, false, kBatch, kWide, kIn, kIn, kWide},
      {"dense1 weight gradient", true, false, kIn, kWide, kBatch, kIn, kWide},
      {"dense2-4 forward", false, false, kBatch, kWide, kWide, kWide, kWide, 3},
      {"dense2-4 weight gradient", true, false, kWide, kWide, kBatch, kWide,
       kWide, 3},
      {"dense2-4 input gradient", false, true, kBatch, kWide, kWide, kWide,
       kWide, 3},
      {"dense5 forward", false, false, kBatch, kOut, kWide, kWide, kOut},
      {"dense5 weight gradient", true, false, kWide, kOut, kBatch, kWide, kOut},
      {"dense5 input gradient", false, true, kBatch, kWide, kOut, kOut, kOut},
  };
}

// Mean microseconds per call of `run`, about 20 ms of calls after warm-up.
template <typename Run>
double TimeUs(Run run) {
  return 1000.0 * TimeLoop(run, 20.0f, 3, 5, 2000).ms_per_call;
}

// "tile T, stages S, split-K N, reduction R" of one cuBLASLt algorithm.
std::string Describe(const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t value = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value),
                                         &written);
    return value;
  };
  int32_t id = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id,
                                       sizeof(id), &written);
  return "id " + std::to_string(id) + " tile " +
         std::to_string(get(CUBLASLT_ALGO_CONFIG_TILE_ID)) + " stages " +
         std::to_string(get(CUBLASLT_ALGO_CONFIG_STAGES_ID)) + " split-k " +
         std::to_string(get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) + " reduction " +
         std::to_string(get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
}

// What the cuBLASLt candidates of one product timed: the first heuristic
// answer's time (-1 if it did not run), the fastest answer's time and rank,
// how many ran, and the first and fastest algorithms described.
struct Candidates {
  double first_us = -1, best_us = -1;
  int best = -1, runnable = 0;
  std::string first, best_algo;
};

// Row-major C = op(A) op(B) of `p` on cuBLASLt (A and B of type `operand`,
// C f32), each of the heuristic's first 32 answers timed.
Candidates TimeLtCandidates(cublasLtHandle_t lt, const Product& p,
                            cudaDataType_t operand, bool tf32, const void* a,
                            const void* b, float* c, void* workspace,
                            size_t workspace_bytes) {
  const float alpha = 1.0f, beta = 0.0f;
  const cublasOperation_t op_a = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDesc_t desc;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(
      &desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUDA_R_32F));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                              &op_b, sizeof(op_b)));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                              &op_a, sizeof(op_a)));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&la, operand, p.tb ? p.k : p.n,
                                          p.tb ? p.n : p.k, p.ldb));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lb, operand, p.ta ? p.m : p.k,
                                          p.ta ? p.k : p.m, p.lda));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, p.n, p.m, p.n));
  cublasLtMatmulPreference_t pref;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = workspace_bytes;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
      sizeof(max_workspace)));
  cublasLtMatmulHeuristicResult_t results[32];
  int found = 0;
  CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref,
                                              32, results, &found));
  Candidates out;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    // A candidate may still refuse to run; it is then left out.
    if (cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, c, ld, c, ld,
                       &results[i].algo, workspace, results[i].workspaceSize,
                       nullptr) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    ++out.runnable;
    const double us = TimeUs([&] {
      CHECK_CUBLAS(cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, c, ld,
                                  c, ld, &results[i].algo, workspace,
                                  results[i].workspaceSize, nullptr));
    });
    if (i == 0) out.first_us = us;
    if (out.best < 0 || us < out.best_us) {
      out.best_us = us;
      out.best = i;
    }
  }
  if (found > 0) out.first = Describe(results[0].algo);
  if (out.best >= 0) out.best_algo = Describe(results[out.best].algo);
  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(la));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(lb));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(ld));
  CHECK_CUBLAS(cublasLtMatmulDescDestroy(desc));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> precisions;
  std::string model = "cnn";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "cnn" || arg == "mlp") {
      model = arg;
    } else {
      precisions.push_back(arg);
    }
  }
  if (precisions.empty()) precisions = {"fp32", "bf16"};
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  cublasLtHandle_t lt;
  CHECK_CUBLAS(cublasLtCreate(&lt));
  const size_t workspace_bytes = size_t{32} << 20;
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
  CHECK_CUBLAS(cublasSetWorkspace(handle, workspace, workspace_bytes));
  for (const std::string& precision : precisions) {
    const bool bf16 = precision == "bf16", tf32 = precision == "tf32";
    if (!bf16 && !tf32 && precision != "fp32") {
      std::fprintf(stderr, "unknown argument %s (cnn, mlp, fp32, tf32, bf16)\n",
                   precision.c_str());
      return 2;
    }
    const size_t value_bytes = bf16 ? 2 : 4;
    const cudaDataType_t operand = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    for (const Product& p :
         model == "mlp" ? MlpProducts() : CnnProducts(bf16)) {
      const long a_values = (p.ta ? p.k : p.m) * p.lda;
      const long b_values = (p.tb ? p.n : p.k) * p.ldb;
      float *a32, *b32, *c;
      void *a, *b;
      CHECK_CUDA(cudaMalloc(&a32, sizeof(float) * a_values));
      CHECK_CUDA(cudaMalloc(&b32, sizeof(float) * b_values));
      CHECK_CUDA(cudaMalloc(&c, sizeof(float) * p.m * p.n));
      Fill<<<1024, 256>>>(a32, a_values, 1);
      Fill<<<1024, 256>>>(b32, b_values, 2);
      if (bf16) {
        CHECK_CUDA(cudaMalloc(&a, value_bytes * a_values));
        CHECK_CUDA(cudaMalloc(&b, value_bytes * b_values));
        ToBf16<<<1024, 256>>>(a32, static_cast<__nv_bfloat16*>(a), a_values);
        ToBf16<<<1024, 256>>>(b32, static_cast<__nv_bfloat16*>(b), b_values);
      } else {
        a = a32;
        b = b32;
      }
      CHECK_CUDA(cudaGetLastError());
      const float alpha = 1.0f, beta = 0.0f;
      const int m = static_cast<int>(p.m), n = static_cast<int>(p.n),
                k = static_cast<int>(p.k);
      const cublasOperation_t op_a = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t op_b = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      // mirrortrain's cuBLAS call: column-major C^T = op(B)^T op(A)^T.
      CHECK_CUBLAS(cublasSetMathMode(
          handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
      const double cublas_us = TimeUs([&] {
        if (bf16) {
          CHECK_CUBLAS(cublasGemmEx(handle, op_b, op_a, n, m, k, &alpha, b,
                                    CUDA_R_16BF, static_cast<int>(p.ldb), a,
                                    CUDA_R_16BF, static_cast<int>(p.lda), &beta,
                                    c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        } else {
          CHECK_CUBLAS(cublasSgemm(handle, op_b, op_a, n, m, k, &alpha, b32,
                                   static_cast<int>(p.ldb), a32,
                                   static_cast<int>(p.lda), &beta, c, n));
        }
      });

      const Candidates lt_times = TimeLtCandidates(
          lt, p, operand, tf32, a, b, c, workspace, workspace_bytes);
      std::printf(
          "{\"gpu\": \"%s\", \"model\": \"%s\", \"precision\": \"%s\", "
          "\"product\": \"%s\", \"count\": %d, "
          "\"m\": %ld, \"n\": %ld, \"k\": %ld, \"gflop\": %.3f, "
          "\"cublas_us\": %.1f, \"lt_first_us\": %.1f, \"lt_best_us\": %.1f, "
          "\"lt_best_rank\": %d, \"lt_candidates\": %d, "
          "\"lt_first\": \"%s\", \"lt_best\": \"%s\"}\n",
          prop.name, model.c_str(), precision.c_str(), p.name, p.count, p.m,
          p.n, p.k, 2e-9 * p.m * p.n * p.k, cublas_us, lt_times.first_us,
          lt_times.best_us, lt_times.best, lt_times.runnable,
          lt_times.first.c_str(), lt_times.best_algo.c_str());
      std::fflush(stdout);
      if (bf16) {
        CHECK_CUDA(cudaFree(a));
        CHECK_CUDA(cudaFree(b));
      }
      CHECK_CUDA(cudaFree(a32));
      CHECK_CUDA(cudaFree(b32));
      CHECK_CUDA(cudaFree(c));
    }
  }
  CHECK_CUDA(cudaFree(workspace));
  CHECK_CUBLAS(cublasLtDestroy(lt));
  CHECK_CUBLAS(cublasDestroy(handle));
  return 0;
}
