// cuda_training.h without CUDA: every call says so.
#include "tensor/cuda/cuda_training.h"
#include "tensor/cuda/not_built.h"

namespace mirrortrain::cuda {
namespace {

absl::Status NotBuilt() { return NotBuiltError(); }

}  // namespace

absl::Status ApplyUpdate(UpdateRule, DType, const UpdateHyperparams&,
                         const void*, void*, void*, void*, int64_t, int) {
  return NotBuilt();
}

absl::Status MovingAverage(DType, double, const void*, void*, int64_t, int) {
  return NotBuilt();
}

}  // namespace mirrortrain::cuda
