// Checking macros for CUDA runtime, cuBLAS and NCCL calls. Each failure
// becomes an absl::Status carrying the call, file:line and the library's own
// error string. Only for .cu/.cc files compiled with the CUDA toolkit.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_CHECK_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mirrortrain::cuda {

inline absl::Status CudaError(cudaError_t err, const char* call,
                              const char* file, int line) {
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line,
                                          ": ", cudaGetErrorName(err), ": ",
                                          cudaGetErrorString(err)));
}

}  // namespace mirrortrain::cuda

#define MT_CUDA_RETURN_IF_ERROR(call)                                     \
  do {                                                                    \
    cudaError_t _mt_err = (call);                                         \
    if (_mt_err != cudaSuccess) {                                         \
      cudaGetLastError(); /* Reported here: not blamed on later calls. */ \
      return ::mirrortrain::cuda::CudaError(_mt_err, #call, __FILE__,     \
                                            __LINE__);                    \
    }                                                                     \
  } while (0)

// After a kernel launch: reports bad launch configurations immediately.
// cudaGetLastError (not Peek) clears the error, so a failure elsewhere on
// this thread (a recovered cudaMalloc, say) is not blamed on later launches.
#define MT_CUDA_RETURN_IF_LAUNCH_ERROR(name)                         \
  do {                                                               \
    cudaError_t _mt_err = cudaGetLastError();                        \
    if (_mt_err != cudaSuccess) {                                    \
      return ::mirrortrain::cuda::CudaError(_mt_err, name, __FILE__, \
                                            __LINE__);               \
    }                                                                \
  } while (0)

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_CHECK_H_
