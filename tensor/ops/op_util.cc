#include "tensor/ops/op_util.h"

#include "absl/strings/str_join.h"

namespace mirrortrain::ops::internal {

absl::Status KernelError(absl::string_view op, const absl::Status& status,
                         std::initializer_list<const Tensor*> inputs) {
  if (status.ok()) return status;
  std::vector<std::string> parts;
  for (const Tensor* t : inputs) parts.push_back(t->DebugString());
  return absl::Status(status.code(),
                      absl::StrCat(op, ": ", status.message(), " (inputs ",
                                   absl::StrJoin(parts, ", "), ")"));
}

absl::Status OpError(absl::string_view op, absl::string_view reason,
                     std::initializer_list<const Tensor*> inputs) {
  return KernelError(op, absl::InvalidArgumentError(reason), inputs);
}

absl::Status CheckDefined(absl::string_view op,
                          std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (!t->defined()) return OpError(op, "undefined input tensor", inputs);
  }
  return absl::OkStatus();
}

absl::Status CheckSameDevice(absl::string_view op,
                             std::initializer_list<const Tensor*> inputs) {
  if (absl::Status s = CheckDefined(op, inputs); !s.ok()) return s;
  const Device d = (*inputs.begin())->device();
  for (const Tensor* t : inputs) {
    if (!(t->device() == d)) {
      return OpError(op, "inputs are on different devices", inputs);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFloatingSame(absl::string_view op,
                               std::initializer_list<const Tensor*> inputs) {
  if (absl::Status s = CheckSameDevice(op, inputs); !s.ok()) return s;
  const DType d = (*inputs.begin())->dtype();
  for (const Tensor* t : inputs) {
    if (t->dtype() != d) return OpError(op, "dtype mismatch", inputs);
  }
  if (!IsFloating(d)) return OpError(op, "expected f32 or f64", inputs);
  return absl::OkStatus();
}

absl::Status CheckRank(absl::string_view op, const Tensor& t, int rank,
                       absl::string_view what) {
  if (t.rank() != rank) {
    return OpError(op, absl::StrCat(what, " must have rank ", rank), {&t});
  }
  return absl::OkStatus();
}

absl::Status CheckInteger(absl::string_view op, const Tensor& t,
                          absl::string_view what) {
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64) {
    return OpError(op, absl::StrCat(what, " must be i32 or i64"), {&t});
  }
  return absl::OkStatus();
}

absl::Status CheckHost(absl::string_view op,
                       std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (!t->device().is_cpu()) {
      return absl::UnimplementedError(
          absl::StrCat(op, ": no CUDA kernel yet for ", t->DebugString()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> NormalizeAxis(absl::string_view op, int axis, int rank) {
  int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": axis ", axis, " out of range for rank ", rank));
  }
  return a;
}

}  // namespace mirrortrain::ops::internal
