// A matrix product's operand in the form the product reads it, converted
// once so that an op's backward products reuse what its forward product
// read.
//
// Under `precision: bf16` (tensor/matmul_precision.h) the products read an
// f32 tensor's values rounded to bfloat16: on GPUs 2-byte bfloat16 values
// (what cuBLAS's bf16 tensor cores read), on CPUs f32 values rounded to
// bfloat16 (what OpenBLAS reads: the same numbers). Otherwise the operand is
// the tensor itself; a tensor rounded already (a layer output under mixed
// bfloat16, ops/precision_ops.h) is read as it is, through its 2-byte copy
// on GPUs when the rounding pass wrote one. MatMul and the dense fusions keep
// their operands for their gradient, so x, the kernel and the gradient dy are
// converted once each per step instead of once per product reading them (three
// conversions per layer instead of six), and the backward products read
// the values the forward product read, as TensorFlow's saved bf16 tensors
// (under fp32 and tf32 they read the tensors themselves, as they are when
// the gradient runs). A variable with a bfloat16 copy (ops::KeepBf16Copy) is
// read through it, unconverted: like fp32 and tf32, its backward product
// reads the copy as it is then. The copies cost memory next to the f32 tensors
// the tape holds: half an input's size on GPUs, its whole size on CPUs.
//
// Thread contract: a conversion runs on the calling thread (its stream on
// GPUs); the storage is freed stream-ordered, like a Tensor's.
#ifndef MIRRORTRAIN_TENSOR_OPS_GEMM_OPERAND_H_
#define MIRRORTRAIN_TENSOR_OPS_GEMM_OPERAND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops::internal {

// Whether products read `t` as bfloat16: precision bf16 and `t` f32.
bool ProductsReadBf16(const Tensor& t);

class GemmOperand {
 public:
  GemmOperand() = default;  // Undefined.

  // `t` as products read it: converted to bfloat16 when `bf16` and `t` is
  // f32, else `t` itself. Holds `t` (shared, not copied).
  static absl::StatusOr<GemmOperand> Of(const Tensor& t, bool bf16);
  // Of(t, ProductsReadBf16(t)).
  static absl::StatusOr<GemmOperand> Of(const Tensor& t);
  // A bf16 operand of an f32 value of `shape` on the GPU `device`, whose
  // 2-byte storage (bf16_storage()) a kernel fills instead of writing f32
  // values for a conversion pass to read back (conv's im2col, a relu
  // layer's masked gradient). No tensor stands behind it.
  // Its rows `row_stride` values apart (0: shape's last dim), so a kernel
  // can start every row 16-byte aligned (conv columns, see ColumnStride).
  static absl::StatusOr<GemmOperand> Bf16Storage(Shape shape, Device device,
                                                 int64_t row_stride = 0);
  // The first `cols` columns of the rank-2 f32 or f64 tensor `t`, read as
  // they are (never bf16): a matrix whose rows are t's row length apart.
  static absl::StatusOr<GemmOperand> Columns(const Tensor& t, int64_t cols);

  bool defined() const { return dtype_.has_value(); }
  // The value it stands for: its shape, its dtype (f32 for bf16 operands:
  // the products' inputs and results are f32 values) and device.
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_.value_or(DType::kF32); }
  Device device() const { return device_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  // "f32[2,3]@cuda:0 as bf16", for errors.
  std::string DebugString() const;
  // The tensor it was made from (Of); undefined for Bf16Storage operands.
  const Tensor& tensor() const { return tensor_; }

  // True when the products read bfloat16 (data() as above), false when
  // they read tensor() itself.
  bool bf16() const {
    return exact_ || rounded_.defined() || device_bf16_ != nullptr;
  }
  // What the product reads, row-major in shape() with rows leading_dim()
  // values apart; null when undefined.
  const void* data() const;
  int64_t leading_dim() const {
    return row_stride_ > 0 ? row_stride_ : shape_.back();
  }
  // The 2-byte storage of a bf16 GPU operand (null otherwise). Kernels fill
  // only a Bf16Storage operand's: an Of operand's may be a rounded tensor's
  // halves, which other operands share.
  void* bf16_storage() const { return device_bf16_.get(); }

 private:
  Shape shape_;
  std::optional<DType> dtype_;  // Unset: undefined.
  Device device_ = Device::Cpu();
  Tensor tensor_;
  Tensor rounded_;      // CPU bf16: f32 rounded values.
  bool exact_ = false;  // CPU bf16: tensor_ holds rounded values itself.
  // GPU bf16: the first of its 2-byte values (owning their buffer).
  std::shared_ptr<void> device_bf16_;
  int64_t row_stride_ = 0;  // 0: dense rows.
};

}  // namespace mirrortrain::ops::internal

#endif  // MIRRORTRAIN_TENSOR_OPS_GEMM_OPERAND_H_
