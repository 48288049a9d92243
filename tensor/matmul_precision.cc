#include "tensor/matmul_precision.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace mirrortrain {
namespace {

std::atomic<MatMulPrecision>& Precision() {
  static std::atomic<MatMulPrecision> precision{MatMulPrecision::kFp32};
  return precision;
}

}  // namespace

void SetMatMulPrecision(MatMulPrecision precision) { Precision() = precision; }

MatMulPrecision GetMatMulPrecision() { return Precision(); }

absl::StatusOr<MatMulPrecision> ParseMatMulPrecision(absl::string_view name) {
  if (name == "fp32") return MatMulPrecision::kFp32;
  if (name == "tf32") return MatMulPrecision::kTf32;
  if (name == "bf16") return MatMulPrecision::kBf16;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown precision '", name, "' (expected fp32, tf32 or bf16)"));
}

}  // namespace mirrortrain
