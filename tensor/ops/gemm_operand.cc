#include "tensor/ops/gemm_operand.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/allocator.h"
#include "tensor/bfloat16.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops::internal {
namespace {

// `n` 2-byte values in a fresh buffer on the GPU `device`, owning it.
absl::StatusOr<std::shared_ptr<void>> NewBf16(int64_t n, Device device) {
  MT_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, AllocateBf16(n, device));
  void* data = buffer->data();
  return std::shared_ptr<void>(std::move(buffer), data);
}

}  // namespace

bool ProductsReadBf16(const Tensor& t) {
  return t.defined() && t.dtype() == DType::kF32 &&
         GetMatMulPrecision() == MatMulPrecision::kBf16;
}

absl::StatusOr<GemmOperand> GemmOperand::Of(const Tensor& t) {
  return Of(t, ProductsReadBf16(t));
}

absl::StatusOr<GemmOperand> GemmOperand::Of(const Tensor& t, bool bf16) {
  GemmOperand op;
  if (!t.defined()) return op;
  op.tensor_ = t;
  op.shape_ = t.shape();
  op.dtype_ = t.dtype();
  op.device_ = t.device();
  if (!bf16) {
    // A layer output kept as halves alone, read as f32 by a product of
    // another precision: its f32 values must be the rounded ones.
    MT_RETURN_IF_ERROR(
        KernelError("RoundToBFloat16", t.RoundRenderedValues(), {&t}));
  }
  if (!bf16 || t.dtype() != DType::kF32) return op;
  if (const Bf16Rendering* r = t.bf16_rendering(); r != nullptr) {
    // Rounded already (a layer output): read as it is.
    if (!t.device().is_cuda()) {
      op.exact_ = true;
      return op;
    }
    if (r->halves != nullptr) {
      // Shares the halves' ownership, points at t's first value.
      op.device_bf16_ = std::shared_ptr<void>(r->halves, Bf16Halves(t));
      return op;
    }
  }
  if (std::shared_ptr<void> copy = t.bf16_copy(); copy != nullptr) {
    // A variable's copy, kept current by its writers (Buffer::bf16_copy).
    op.device_bf16_ = std::move(copy);
    return op;
  }
  if (!t.device().is_cuda()) {
    // On the calling thread: conversions run inside parallel GEMM chunks
    // (conv), and cost little next to the product reading them.
    MT_ASSIGN_OR_RETURN(op.rounded_, Tensor::Empty(DType::kF32, t.shape()));
    RoundToBFloat16(t.data<float>(), op.rounded_.data<float>(),
                    t.num_elements());
    return op;
  }
  MT_ASSIGN_OR_RETURN(op.device_bf16_, NewBf16(t.num_elements(), t.device()));
  MT_RETURN_IF_ERROR(
      KernelError("ToBFloat16",
                  cuda::ToBFloat16(t.raw_data(), op.bf16_storage(),
                                   t.num_elements(), t.device().index),
                  {&t}));
  return op;
}

absl::StatusOr<GemmOperand> GemmOperand::Bf16Storage(Shape shape, Device device,
                                                     int64_t row_stride) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ToBFloat16: bfloat16 storage is for GPU operands, not ",
                     device.ToString()));
  }
  if (row_stride != 0 && (shape.size() != 2 || row_stride < shape[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("ToBFloat16: row stride ", row_stride,
                     " for bfloat16 storage of ", ShapeToString(shape)));
  }
  GemmOperand op;
  op.dtype_ = DType::kF32;
  op.device_ = device;
  op.shape_ = std::move(shape);
  op.row_stride_ = row_stride;
  const int64_t n =
      row_stride == 0 ? NumElements(op.shape_) : op.shape_[0] * row_stride;
  MT_ASSIGN_OR_RETURN(op.device_bf16_, NewBf16(n, device));
  return op;
}

absl::StatusOr<GemmOperand> GemmOperand::Columns(const Tensor& t,
                                                 int64_t cols) {
  if (!t.defined() || t.rank() != 2 || !IsFloating(t.dtype()) || cols < 0 ||
      cols > t.dim(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul: columns ", cols, " of ",
                     t.defined() ? t.DebugString() : "undefined",
                     " (want a rank-2 floating tensor at least that wide)"));
  }
  MT_ASSIGN_OR_RETURN(GemmOperand op, Of(t, /*bf16=*/false));
  op.shape_ = {t.dim(0), cols};
  op.row_stride_ = t.dim(1);
  return op;
}

std::string GemmOperand::DebugString() const {
  if (!defined()) return "undefined";
  return absl::StrCat(
      DTypeName(dtype()), ShapeToString(shape_), "@", device_.ToString(),
      bf16() ? " as bf16" : "",
      row_stride_ > 0 ? absl::StrCat(", rows ", row_stride_, " apart") : "");
}

const void* GemmOperand::data() const {
  if (device_bf16_ != nullptr) return device_bf16_.get();
  if (rounded_.defined()) return rounded_.raw_data();
  return tensor_.defined() ? tensor_.raw_data() : nullptr;
}

}  // namespace mirrortrain::ops::internal
