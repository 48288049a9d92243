#include "tensor/ops/gemm_operand.h"

#include <algorithm>

#include "tensor/allocator.h"
#include "tensor/bfloat16.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops::internal {

bool ProductsReadBf16(const Tensor& t) {
  return t.defined() && t.dtype() == DType::kF32 &&
         GetMatMulPrecision() == MatMulPrecision::kBf16;
}

absl::StatusOr<GemmOperand> GemmOperand::Of(const Tensor& t) {
  return Of(t, ProductsReadBf16(t));
}

absl::StatusOr<GemmOperand> GemmOperand::Of(const Tensor& t, bool bf16) {
  GemmOperand op;
  op.tensor_ = t;
  if (!bf16 || !t.defined() || t.dtype() != DType::kF32) return op;
  if (!t.device().is_cuda()) {
    // On the calling thread: conversions run inside parallel GEMM chunks
    // (conv), and cost little next to the product reading them.
    MT_ASSIGN_OR_RETURN(op.rounded_, Tensor::Empty(DType::kF32, t.shape()));
    RoundToBFloat16(t.data<float>(), op.rounded_.data<float>(),
                    t.num_elements());
    return op;
  }
  MT_ASSIGN_OR_RETURN(op, Bf16Storage(t));
  MT_RETURN_IF_ERROR(
      KernelError("ToBFloat16",
                  cuda::ToBFloat16(t.raw_data(), op.bf16_storage(),
                                   t.num_elements(), t.device().index),
                  {&t}));
  return op;
}

absl::StatusOr<GemmOperand> GemmOperand::Bf16Storage(const Tensor& like) {
  if (!like.defined() || like.dtype() != DType::kF32 ||
      !like.device().is_cuda()) {
    return OpError("ToBFloat16", "bfloat16 storage is for GPU f32 tensors",
                   {&like});
  }
  constexpr size_t kBf16Bytes = 2;
  GemmOperand op;
  op.tensor_ = like;
  MT_ASSIGN_OR_RETURN(Allocator * allocator, AllocatorFor(like.device()));
  MT_ASSIGN_OR_RETURN(
      op.device_bf16_,
      Buffer::Allocate(allocator, static_cast<size_t>(std::max<int64_t>(
                                      like.num_elements(), 1)) *
                                      kBf16Bytes));
  return op;
}

const void* GemmOperand::data() const {
  if (!tensor_.defined()) return nullptr;
  if (device_bf16_ != nullptr) return device_bf16_->data();
  if (rounded_.defined()) return rounded_.raw_data();
  return tensor_.raw_data();
}

}  // namespace mirrortrain::ops::internal
