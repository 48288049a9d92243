// Precision of f32 matrix products (MatMul, and Conv2D's GEMMs): full f32;
// TensorFloat-32 tensor cores on GPUs (10-bit mantissa inputs, f32
// accumulation; about 1e-3 relative error; CPUs stay full f32); or bf16
// operands (both operands rounded to bfloat16, products and sums in f32:
// cuBLAS bf16 tensor cores on GPUs, the same rounding then an f32 GEMM on
// CPUs, so both compute the same products and differ only in summation
// order). Process-wide, as TensorFlow's
// tf.config.experimental.enable_tensor_float_32_execution and PyTorch's
// torch.backends.cuda.matmul.allow_tf32; f64 products are always full f64.
// Thread-safe; set it before training starts.
#ifndef MIRRORTRAIN_TENSOR_MATMUL_PRECISION_H_
#define MIRRORTRAIN_TENSOR_MATMUL_PRECISION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain {

enum class MatMulPrecision { kFp32, kTf32, kBf16 };

void SetMatMulPrecision(MatMulPrecision precision);
// kFp32 unless set: results then match the CPU kernels within f32 rounding.
MatMulPrecision GetMatMulPrecision();
// "fp32" | "tf32" | "bf16".
absl::StatusOr<MatMulPrecision> ParseMatMulPrecision(absl::string_view name);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_MATMUL_PRECISION_H_
