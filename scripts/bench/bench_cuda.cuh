// Helpers of the standalone cuBLAS benchmarks in scripts/bench: checking
// macros that print and exit (these are programs, not library code),
// deterministic operand fills, and an event-timed loop.
#ifndef MIRRORTRAIN_SCRIPTS_BENCH_BENCH_CUDA_CUH_
#define MIRRORTRAIN_SCRIPTS_BENCH_BENCH_CUDA_CUH_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    cudaError_t e = (call);                                              \
    if (e != cudaSuccess) {                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(e));                               \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)
#define CHECK_CUBLAS(call)                                               \
  do {                                                                   \
    cublasStatus_t s = (call);                                           \
    if (s != CUBLAS_STATUS_SUCCESS) {                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cublasGetStatusString(s));                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

// Fills with values in [-1, 1) from a fixed linear congruential sequence.
__global__ void Fill(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 1664525u + seed * 1013904223u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    p[i] = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

// The bf16 operands of the bf16 row: `in` rounded to nearest even.
__global__ void ToBf16(const float* in, __nv_bfloat16* out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

// What TimeLoop measured: the mean time per call and how many calls.
struct Timing {
  double ms_per_call;
  int iters;
};

// Times `run` (work on the default stream) with CUDA events: `warm` calls,
// one timed call to size the loop to about `target_ms` (100 calls if it
// read 0), then the loop, its length clamped to [min_iters, max_iters].
template <typename Run>
Timing TimeLoop(Run run, float target_ms, int warm, int min_iters,
                int max_iters) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < warm; ++i) run();
  CHECK_CUDA(cudaEventRecord(start));
  run();
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float one_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&one_ms, start, stop));
  int iters = one_ms > 0 ? static_cast<int>(target_ms / one_ms) : 100;
  iters =
      iters < min_iters ? min_iters : (iters > max_iters ? max_iters : iters);
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) run();
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return {ms / iters, iters};
}

#endif  // MIRRORTRAIN_SCRIPTS_BENCH_BENCH_CUDA_CUH_
