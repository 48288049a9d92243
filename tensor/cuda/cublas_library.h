// cuBLAS and cuBLASLt, loaded with dlopen on first use instead of linked:
// loading cuBLASLt runs static initialisers that take about 0.2 s and
// 200 MB (measured on this project's build machine), which every process
// of a CUDA build paid before main, GPU jobs or not. A GPU job loads them
// at its first device allocation (the caching allocator's creation, in
// runtime.cu), or earlier, while its CUDA contexts are created, when it
// calls cuda::StartDevices (the trainer does, on its warm-up thread while
// the data set loads). CPU jobs never load them. (Only on a thread the
// process waits for: a process that exits while cuBLASLt's initialisers
// run crashes in them.)
//
// The libraries are looked for first where the build found them
// (MT_CUBLAS_LIBRARY_DIR), then by soname (the executable's run path, then
// the loader's search path). TensorFlow's stream executor loads its CUDA
// libraries the same way.
//
// Thread contract: every function may be called from any thread; the first
// LoadCublas() loads once, later and concurrent callers wait for it.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUBLAS_LIBRARY_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUBLAS_LIBRARY_H_

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "absl/status/statusor.h"

namespace mirrortrain::cuda {

// The entry points this project calls, named without the library prefix.
struct CublasLibrary {
  decltype(&cublasCreate) Create;
  decltype(&cublasDestroy) Destroy;
  decltype(&cublasSetStream) SetStream;
  decltype(&cublasSetWorkspace) SetWorkspace;
  decltype(&cublasSetMathMode) SetMathMode;
  decltype(&cublasSgemm) Sgemm;
  decltype(&cublasDgemm) Dgemm;
  decltype(&cublasSgemmStridedBatched) SgemmStridedBatched;
  decltype(&cublasDgemmStridedBatched) DgemmStridedBatched;
  // The two below are overloaded in C++ (a wrapper taking the old
  // cudaDataType compute type): the library's own signatures.
  cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                           int, int, int, const void*, const void*,
                           cudaDataType, int, const void*, cudaDataType, int,
                           const void*, void*, cudaDataType, int,
                           cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*GemmStridedBatchedEx)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
      const void*, const void*, cudaDataType, int, long long, const void*,
      cudaDataType, int, long long, const void*, void*, cudaDataType, int,
      long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGetStatusName) GetStatusName;
  decltype(&cublasGetStatusString) GetStatusString;

  decltype(&cublasLtCreate) LtCreate;
  decltype(&cublasLtDestroy) LtDestroy;
  decltype(&cublasLtMatmul) LtMatmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) LtMatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) LtMatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) LtMatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) LtMatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) LtMatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) LtMatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute)
      LtMatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) LtMatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) LtMatrixLayoutDestroy;
};

// The loaded libraries (never unloaded), or FailedPrecondition naming the
// library and the loader's error, or the missing symbol.
absl::StatusOr<const CublasLibrary*> LoadCublas();

// "CUBLAS_STATUS_X: description" (the status number when the library did
// not load).
std::string CublasStatusText(cublasStatus_t status);

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUBLAS_LIBRARY_H_
