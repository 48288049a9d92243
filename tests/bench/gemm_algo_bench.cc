// cuBLASLt's candidate algorithms for the benchmark models' matrix
// products, each timed on the GPU next to the product as the trainer makes
// it (cuBLAS's own choice, or cuBLASLt's first answer for the epilogue
// products, tensor/cuda/cublaslt_gemm.cu): does it run faster on another
// algorithm, and does that algorithm give the same bits?
// The answers decide whether choosing algorithms by measurement (as
// PyTorch's TunableOp does) is worth building. Each run says so when no GPU
// is visible.
//   build/bin/gemm_algo_bench [--benchmark_filter=...]
// Args: problem (kProblems), candidate (0: the heuristic's first answer;
// -1: the project's own call, cuda::Gemm or cuda::GemmBias, which is what
// a training step runs).
// Counters: same_bits (1 when the output equals the project's call's bit
// for bit: whether choosing that candidate keeps a run's numbers),
// TFLOP/s. A candidate the heuristic did not offer is skipped with a
// message.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "models/initializers.h"
#include "tensor/cuda/cublas_library.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/stream.h"
#include "tensor/matmul_precision.h"
#include "tensor/status_macros.h"
#include "tensor/tensor.h"

namespace mirrortrain {
namespace {

// Row-major C[m, n] = op(A) op(B), as the project's products are written
// (A [m, k], or [k, m] transposed; B [k, n], or [n, k]), with the bias
// (and relu) epilogue of a dense layer's forward product or none.
struct Problem {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
  bool relu_bias;
  MatMulPrecision precision;
};

// The fp32 cnn config's products at batch 256 (its second conv as im2col
// columns [256 * 14 * 14, 5 * 5 * 32], its 3136-1024 dense layer) and the
// 784-4096x4-10 MLP's 4096-wide layers at batch 4096, tf32 and bf16.
const Problem kProblems[] = {
    {"cnn conv2 forward", false, false, 50176, 64, 800, false,
     MatMulPrecision::kFp32},
    {"cnn conv2 filter gradient", true, false, 800, 64, 50176, false,
     MatMulPrecision::kFp32},
    {"cnn dense forward", false, false, 256, 1024, 3136, true,
     MatMulPrecision::kFp32},
    {"cnn dense input gradient", false, true, 256, 3136, 1024, false,
     MatMulPrecision::kFp32},
    {"cnn dense filter gradient", true, false, 3136, 1024, 256, false,
     MatMulPrecision::kFp32},
    {"mlp forward tf32", false, false, 4096, 4096, 4096, true,
     MatMulPrecision::kTf32},
    {"mlp input gradient tf32", false, true, 4096, 4096, 4096, false,
     MatMulPrecision::kTf32},
    {"mlp filter gradient tf32", true, false, 4096, 4096, 4096, false,
     MatMulPrecision::kTf32},
    {"mlp forward bf16", false, false, 4096, 4096, 4096, true,
     MatMulPrecision::kBf16},
    {"mlp input gradient bf16", false, true, 4096, 4096, 4096, false,
     MatMulPrecision::kBf16},
    {"mlp filter gradient bf16", true, false, 4096, 4096, 4096, false,
     MatMulPrecision::kBf16},
};

constexpr int kCandidates = 8;
constexpr int kLaunches = 20;
constexpr uint64_t kWorkspaceBytes = 32ull << 20;  // As the project's.

absl::Status LtError(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cuda::CublasStatusText(s)));
}

// One problem's operands on the GPU, its cuBLASLt descriptors (the same
// mapping as cublaslt_gemm.cu: row-major C = A B is column-major
// C^T = B^T A^T), the heuristic's candidates, and the project's output.
// Owns its handle and descriptors.
struct Setup {
  Setup() = default;
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;
  ~Setup() {
    if (lib == nullptr) return;
    for (cublasLtMatrixLayout_t l : {a, b, d}) {
      if (l != nullptr) lib->LtMatrixLayoutDestroy(l);
    }
    if (desc != nullptr) lib->LtMatmulDescDestroy(desc);
    if (handle != nullptr) lib->LtDestroy(handle);
  }
  const cuda::CublasLibrary* lib = nullptr;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Tensor lt_a, lt_b, c, bias, workspace;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  std::vector<float> project_output;
};

// Per problem, made at its first benchmark; cleared before the process
// ends (main), while the CUDA context and the libraries are still there.
std::map<int, std::unique_ptr<Setup>>& Setups() {
  static auto* setups = new std::map<int, std::unique_ptr<Setup>>();
  return *setups;
}

// Glorot-uniform f32 values of `shape` on gpu:0, as 2-byte bfloat16 when
// `bf16` (then in an i32 tensor of half the elements, rounded up: storage
// only).
absl::StatusOr<Tensor> Operand(const Shape& shape, uint64_t seed, bool bf16) {
  MT_ASSIGN_OR_RETURN(const Tensor host, models::GlorotUniform(shape, seed));
  MT_ASSIGN_OR_RETURN(Tensor gpu, host.To(Device::Cuda(0)));
  if (!bf16) return gpu;
  MT_ASSIGN_OR_RETURN(Tensor halves,
                      Tensor::Empty(DType::kI32, {(gpu.num_elements() + 1) / 2},
                                    Device::Cuda(0)));
  MT_RETURN_IF_ERROR(cuda::ToBFloat16(gpu.raw_data(), halves.raw_data(),
                                      gpu.num_elements(), 0));
  return halves;
}

absl::StatusOr<Setup*> SetUp(int index) {
  std::map<int, std::unique_ptr<Setup>>& setups = Setups();
  if (auto it = setups.find(index); it != setups.end()) return it->second.get();
  const Problem& p = kProblems[index];
  auto s = std::make_unique<Setup>();
  MT_ASSIGN_OR_RETURN(s->lib, cuda::LoadCublas());
  const cuda::CublasLibrary& lib = *s->lib;
  MT_RETURN_IF_ERROR(LtError(lib.LtCreate(&s->handle), "cublasLtCreate"));
  const bool bf16 = p.precision == MatMulPrecision::kBf16;
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  MT_RETURN_IF_ERROR(
      LtError(lib.LtMatmulDescCreate(&s->desc,
                                     p.precision == MatMulPrecision::kTf32
                                         ? CUBLAS_COMPUTE_32F_FAST_TF32
                                         : CUBLAS_COMPUTE_32F,
                                     CUDA_R_32F),
              "cublasLtMatmulDescCreate"));
  const cublasOperation_t op_a = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue =
      p.relu_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  MT_RETURN_IF_ERROR(
      LtError(lib.LtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                           &op_a, sizeof(op_a)),
              "transa"));
  MT_RETURN_IF_ERROR(
      LtError(lib.LtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                           &op_b, sizeof(op_b)),
              "transb"));
  MT_RETURN_IF_ERROR(LtError(
      lib.LtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                   &epilogue, sizeof(epilogue)),
      "epilogue"));
  // cuBLASLt's A is row-major B ([k, n], or [n, k]), its B row-major A.
  const int64_t ldb = p.tb ? p.k : p.n, lda = p.ta ? p.m : p.k;
  MT_ASSIGN_OR_RETURN(
      s->lt_a, Operand(p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n}, 1, bf16));
  MT_ASSIGN_OR_RETURN(
      s->lt_b, Operand(p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k}, 2, bf16));
  MT_ASSIGN_OR_RETURN(
      s->bias, Tensor::HostFull(DType::kF32, {p.n}, 0.01).To(Device::Cuda(0)));
  MT_ASSIGN_OR_RETURN(s->c,
                      Tensor::Empty(DType::kF32, {p.m, p.n}, Device::Cuda(0)));
  MT_ASSIGN_OR_RETURN(
      s->workspace,
      Tensor::Empty(DType::kF32, {static_cast<int64_t>(kWorkspaceBytes / 4)},
                    Device::Cuda(0)));
  if (p.relu_bias) {
    const void* bias = s->bias.raw_data();
    MT_RETURN_IF_ERROR(LtError(
        lib.LtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                     &bias, sizeof(bias)),
        "bias"));
  }
  MT_RETURN_IF_ERROR(
      LtError(lib.LtMatrixLayoutCreate(&s->a, type, p.tb ? p.k : p.n,
                                       p.tb ? p.n : p.k, ldb),
              "layout a"));
  MT_RETURN_IF_ERROR(
      LtError(lib.LtMatrixLayoutCreate(&s->b, type, p.ta ? p.m : p.k,
                                       p.ta ? p.k : p.m, lda),
              "layout b"));
  MT_RETURN_IF_ERROR(LtError(
      lib.LtMatrixLayoutCreate(&s->d, CUDA_R_32F, p.n, p.m, p.n), "layout d"));
  cublasLtMatmulPreference_t pref = nullptr;
  MT_RETURN_IF_ERROR(
      LtError(lib.LtMatmulPreferenceCreate(&pref), "preference"));
  MT_RETURN_IF_ERROR(LtError(lib.LtMatmulPreferenceSetAttribute(
                                 pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                 &kWorkspaceBytes, sizeof(kWorkspaceBytes)),
                             "workspace"));
  s->candidates.resize(kCandidates);
  int found = 0;
  const cublasStatus_t asked = lib.LtMatmulAlgoGetHeuristic(
      s->handle, s->desc, s->a, s->b, s->d, s->d, pref, kCandidates,
      s->candidates.data(), &found);
  lib.LtMatmulPreferenceDestroy(pref);
  MT_RETURN_IF_ERROR(LtError(asked, "cublasLtMatmulAlgoGetHeuristic"));
  s->candidates.resize(static_cast<size_t>(found));
  return setups.emplace(index, std::move(s)).first->second.get();
}

absl::Status Launch(const Setup& s, int candidate, cudaStream_t stream) {
  const cublasLtMatmulHeuristicResult_t& r = s.candidates[candidate];
  const float alpha = 1.0f, beta = 0.0f;
  return LtError(
      s.lib->LtMatmul(s.handle, s.desc, &alpha, s.lt_a.raw_data(), s.a,
                      s.lt_b.raw_data(), s.b, &beta, s.c.raw_data(), s.d,
                      s.c.raw_data(), s.d, &r.algo, s.workspace.raw_data(),
                      r.workspaceSize, stream),
      "cublasLtMatmul");
}

// The product as the trainer makes it: cuBLAS (cuda::Gemm), or cuBLASLt
// with the epilogue (cuda::GemmBias), on the thread's current stream.
absl::Status ProjectLaunch(const Problem& p, const Setup& s) {
  const int64_t lda = p.ta ? p.m : p.k, ldb = p.tb ? p.k : p.n;
  if (p.relu_bias) {
    return cuda::GemmBias(p.ta, p.tb, p.m, p.n, p.k, s.lt_b.raw_data(), lda,
                          s.lt_a.raw_data(), ldb, s.bias.raw_data(),
                          /*relu=*/true, s.c.raw_data(), 0, p.precision);
  }
  return cuda::Gemm(DType::kF32, p.ta, p.tb,
                    {.batch = 1, .m = p.m, .n = p.n, .k = p.k}, 1.0,
                    s.lt_b.raw_data(), lda, s.lt_a.raw_data(), ldb, 0.0,
                    s.c.raw_data(), 0, p.precision);
}

void BM_GemmCandidate(benchmark::State& state) {
  if (cuda::DeviceCount() == 0) {
    state.SkipWithError("no GPU visible");
    return;
  }
  const Problem& p = kProblems[state.range(0)];
  const int candidate = static_cast<int>(state.range(1));
  state.SetLabel(candidate < 0 ? absl::StrCat(p.name, ", as trained")
                               : std::string(p.name));
  absl::StatusOr<Setup*> setup = SetUp(static_cast<int>(state.range(0)));
  if (!setup.ok()) {
    state.SkipWithError(setup.status().ToString().c_str());
    return;
  }
  Setup& s = **setup;
  if (candidate >= static_cast<int>(s.candidates.size())) {
    state.SkipWithError(
        absl::StrCat("the heuristic offered ", s.candidates.size()).c_str());
    return;
  }
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(0);
  if (!stream.ok()) {
    state.SkipWithError(stream.status().ToString().c_str());
    return;
  }
  const auto raw = static_cast<cudaStream_t>(stream->handle());
  cuda::ScopedCurrentStream current(stream->handle());
  const auto launch = [&] {
    return candidate < 0 ? ProjectLaunch(p, s) : Launch(s, candidate, raw);
  };
  // One run for the bits, compared with the project's call's.
  absl::Status ran = launch();
  if (ran.ok()) ran = stream->Synchronize();
  absl::StatusOr<Tensor> out =
      ran.ok() ? s.c.To(Device::Cpu()) : absl::StatusOr<Tensor>(ran);
  if (!out.ok()) {
    state.SkipWithError(out.status().ToString().c_str());
    return;
  }
  const std::vector<float> bits = out->ToVector<float>();
  if (candidate < 0) s.project_output = bits;
  // Only next to the project's output (a filter may have left it out).
  if (!s.project_output.empty()) {
    state.counters["same_bits"] =
        std::memcmp(bits.data(), s.project_output.data(),
                    bits.size() * sizeof(float)) == 0
            ? 1
            : 0;
  }
  double seconds = 0;
  int64_t launches = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status st;
    for (int i = 0; i < kLaunches && st.ok(); ++i) {
      st = launch();
    }
    if (st.ok()) st = stream->Synchronize();
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    state.SetIterationTime(elapsed / kLaunches);
    seconds += elapsed;
    launches += kLaunches;
  }
  if (seconds > 0) {
    state.counters["TFLOP/s"] = 2.0 * static_cast<double>(p.m) *
                                static_cast<double>(p.n) *
                                static_cast<double>(p.k) *
                                static_cast<double>(launches) / seconds * 1e-12;
  }
}

void Candidates(benchmark::internal::Benchmark* b) {
  for (int problem = 0; problem < static_cast<int>(std::size(kProblems));
       ++problem) {
    for (int candidate = -1; candidate < kCandidates; ++candidate) {
      b->Args({problem, candidate});
    }
  }
}

BENCHMARK(BM_GemmCandidate)
    ->Apply(Candidates)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mirrortrain

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  mirrortrain::Setups().clear();
  benchmark::Shutdown();
  return 0;
}
