// Helpers of the standalone cuBLAS benchmarks in scripts/bench: checking
// macros that print and exit (these are programs, not library code) and
// deterministic operand fills.
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

#endif  // MIRRORTRAIN_SCRIPTS_BENCH_BENCH_CUDA_CUH_
