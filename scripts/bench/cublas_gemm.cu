// cuBLAS GEMM rate, the denominator of scripts/bench_gpu.sh's MLP
// efficiency: the same call mirrortrain makes (see tensor/cuda/cublas_gemm.cu),
// timed with CUDA events after warm-up. One JSON line per shape and precision:
//   tf32  cublasSgemm with CUBLAS_TF32_TENSOR_OP_MATH
//   fp32  cublasSgemm with CUBLAS_DEFAULT_MATH
//   bf16  cublasGemmEx with CUDA_R_16BF A and B, CUDA_R_32F C,
//         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, default math mode
//         (mirrortrain's Bf16Gemm; its operands' f32 -> bf16 conversion,
//         one pass per operand at the op layer, is not timed here)
//
//   nvcc -O2 -o build/bin/cublas_gemm_bench scripts/bench/cublas_gemm.cu
//   -lcublas build/bin/cublas_gemm_bench [M N K]...      # default: 8192 8192
//   8192  4096 4096 4096
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_cuda.cuh"

int main(int argc, char** argv) {
  std::vector<long> shapes;
  for (int i = 1; i < argc; ++i) shapes.push_back(std::atol(argv[i]));
  if (shapes.empty()) shapes = {8192, 8192, 8192, 4096, 4096, 4096};
  if (shapes.size() % 3 != 0) {
    std::fprintf(stderr, "usage: %s [M N K]...\n", argv[0]);
    return 2;
  }
  int device = 0;
  CHECK_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  int version = 0;
  CHECK_CUBLAS(cublasGetVersion(handle, &version));
  for (size_t s = 0; s < shapes.size(); s += 3) {
    const long m = shapes[s], n = shapes[s + 1], k = shapes[s + 2];
    float *a, *b, *c;
    __nv_bfloat16 *a16, *b16;
    CHECK_CUDA(cudaMalloc(&a, sizeof(float) * m * k));
    CHECK_CUDA(cudaMalloc(&b, sizeof(float) * k * n));
    CHECK_CUDA(cudaMalloc(&c, sizeof(float) * m * n));
    CHECK_CUDA(cudaMalloc(&a16, sizeof(__nv_bfloat16) * m * k));
    CHECK_CUDA(cudaMalloc(&b16, sizeof(__nv_bfloat16) * k * n));
    Fill<<<1024, 256>>>(a, static_cast<size_t>(m) * k, 1);
    Fill<<<1024, 256>>>(b, static_cast<size_t>(k) * n, 2);
    ToBf16<<<1024, 256>>>(a, a16, static_cast<size_t>(m) * k);
    ToBf16<<<1024, 256>>>(b, b16, static_cast<size_t>(k) * n);
    CHECK_CUDA(cudaGetLastError());
    for (const char* precision : {"tf32", "fp32", "bf16"}) {
      const bool tf32 = precision[0] == 't', bf16 = precision[0] == 'b';
      const char* call = bf16 ? "cublasGemmEx" : "cublasSgemm";
      CHECK_CUBLAS(cublasSetMathMode(
          handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
      const float alpha = 1.0f, beta = 0.0f;
      // Row-major C[m,n] = A[m,k] B[k,n] as column-major C^T = B^T A^T.
      auto gemm = [&] {
        if (bf16) {
          CHECK_CUBLAS(cublasGemmEx(
              handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
              static_cast<int>(m), static_cast<int>(k), &alpha, b16,
              CUDA_R_16BF, static_cast<int>(n), a16, CUDA_R_16BF,
              static_cast<int>(k), &beta, c, CUDA_R_32F, static_cast<int>(n),
              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          return;
        }
        CHECK_CUBLAS(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N,
                                 static_cast<int>(n), static_cast<int>(m),
                                 static_cast<int>(k), &alpha, b,
                                 static_cast<int>(n), a, static_cast<int>(k),
                                 &beta, c, static_cast<int>(n)));
      };
      // About half a second of work per measurement, at least 10 calls.
      const Timing t = TimeLoop(gemm, 500.0f, 5, 10, 1000);
      const int iters = t.iters;
      const double ms = t.ms_per_call * iters;
      const double tflops = 2.0 * m * n * k * iters / (ms * 1e-3) / 1e12;
      std::printf(
          "{\"framework\": \"cublas\", \"version\": %d, \"gpu\": \"%s\", "
          "\"bench\": \"gemm\", \"call\": \"%s\", \"m\": %ld, "
          "\"n\": %ld, \"k\": %ld, \"precision\": \"%s\", \"iters\": %d, "
          "\"tflops\": %.2f}\n",
          version, prop.name, call, m, n, k, precision, iters, tflops);
      std::fflush(stdout);
    }
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
    CHECK_CUDA(cudaFree(c));
    CHECK_CUDA(cudaFree(a16));
    CHECK_CUDA(cudaFree(b16));
  }
  CHECK_CUBLAS(cublasDestroy(handle));
  return 0;
}
