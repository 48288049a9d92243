#include "tensor/ops/precision_ops.h"

#include "tensor/bfloat16.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

// y = x rounded; y has x's shape, dtype f32 and device; y may be x.
absl::Status Round(const Tensor& x, Tensor& y) {
  const int64_t n = x.num_elements();
  if (x.device().is_cuda()) {
    return internal::KernelError(
        "RoundToBFloat16",
        cuda::RoundToBFloat16(x.raw_data(), y.raw_data(), n, x.device().index),
        {&x});
  }
  const float* in = x.data<float>();
  float* out = y.data<float>();
  ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    RoundToBFloat16(in + begin, out + begin, end - begin);
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status RoundToBFloat16InPlace(Tensor& t) {
  if (t.dtype() != DType::kF32) return absl::OkStatus();
  return Round(t, t);
}

absl::StatusOr<Tensor> RoundedToBFloat16(const Tensor& x) {
  if (x.dtype() != DType::kF32) return x;
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  MT_RETURN_IF_ERROR(Round(x, y));
  return y;
}

}  // namespace mirrortrain::ops
