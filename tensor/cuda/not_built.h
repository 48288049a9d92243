// The error every CUDA entry point returns in a build without CUDA (the
// *_stub.cc files).
#ifndef MIRRORTRAIN_TENSOR_CUDA_NOT_BUILT_H_
#define MIRRORTRAIN_TENSOR_CUDA_NOT_BUILT_H_

#include "absl/status/status.h"

namespace mirrortrain::cuda {

inline absl::Status NotBuiltError() {
  return absl::FailedPreconditionError(
      "this mirrortrain was built without CUDA (MIRRORTRAIN_CUDA=OFF or no "
      "nvcc found)");
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_NOT_BUILT_H_
