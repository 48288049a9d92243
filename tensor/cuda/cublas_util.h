// Shared by the cuBLAS and cuBLASLt files (compiled by nvcc only): the
// checking macro for cublasStatus_t results and per-thread library handles.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUBLAS_UTIL_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUBLAS_UTIL_H_

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cublas_library.h"

// A failed call may also leave the runtime's per-thread error set (a
// launch into an invalidated capture): cleared here, so the thread's next
// kernel launch is not blamed for it.
#define MT_CUBLAS_RETURN_IF_ERROR(call)                                     \
  do {                                                                      \
    cublasStatus_t _mt_cublas = (call);                                     \
    if (_mt_cublas != CUBLAS_STATUS_SUCCESS) {                              \
      cudaGetLastError();                                                   \
      return absl::InternalError(                                           \
          absl::StrCat(#call, " failed at ", __FILE__, ":", __LINE__, ": ", \
                       ::mirrortrain::cuda::CublasStatusText(_mt_cublas))); \
    }                                                                       \
  } while (0)

namespace mirrortrain::cuda {

// The calling thread's handle of a library (cuBLAS, cuBLASLt) for `device`,
// created on first use and destroyed with the thread: the libraries'
// handles must not be shared between threads. `create` and `destroy` are
// the loaded library's (cublas_library.h).
template <typename Handle>
absl::StatusOr<Handle> ThreadHandle(int device,
                                    cublasStatus_t (*create)(Handle*),
                                    cublasStatus_t (*destroy)(Handle)) {
  struct Deleter {
    cublasStatus_t (*destroy)(Handle);
    void operator()(std::remove_pointer_t<Handle>* h) const { destroy(h); }
  };
  using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, Deleter>;
  thread_local std::map<int, Owned> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    Handle h = nullptr;
    MT_CUBLAS_RETURN_IF_ERROR(create(&h));
    it = handles.emplace(device, Owned(h, Deleter{destroy})).first;
  }
  return it->second.get();
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUBLAS_UTIL_H_
