#include "tensor/variable.h"

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain {

absl::StatusOr<Variable> Variable::Create(std::string name,
                                          const Tensor& initial_value,
                                          bool trainable) {
  if (!initial_value.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Variable ", name, ": undefined initial value"));
  }
  MT_ASSIGN_OR_RETURN(Tensor initial, initial_value.Clone());
  MT_ASSIGN_OR_RETURN(Tensor value, initial_value.Clone());
  return Variable(std::move(name), std::move(initial), std::move(value),
                  trainable);
}

absl::StatusOr<Variable> Variable::FromInitialValueOf(std::string name,
                                                      const Variable& other,
                                                      bool trainable) {
  return Create(std::move(name), other.initial_value_, trainable);
}

const Tensor& Variable::value() const {
  if (trainable_ && tape::AnyTapeActive()) {
    tape::WatchOnActiveTapes(value_);
  }
  return value_;
}

absl::Status Variable::CheckCompatible(const char* op, const Tensor& v) const {
  if (!v.defined() || v.dtype() != value_.dtype() ||
      v.shape() != value_.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, " to variable '", name_,
                                                   "' ", value_.DebugString(),
                                                   ": got ", v.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status Variable::Assign(const Tensor& v) {
  MT_RETURN_IF_ERROR(CheckCompatible("Assign", v));
  return value_.CopyFrom(v);
}

absl::Status Variable::Accumulate(const char* op, const Tensor& delta,
                                  double sign) {
  MT_RETURN_IF_ERROR(CheckCompatible(op, delta));
  if (value_.device().is_cuda() && IsFloating(dtype())) {
    // In place on the GPU: value = value +/- delta, elementwise.
    MT_RETURN_IF_ERROR(ops::internal::CheckSameDevice(op, {&value_, &delta}));
    MT_RETURN_IF_ERROR(ops::internal::KernelError(
        op,
        cuda::Binary(sign > 0 ? BinaryKind::kAdd : BinaryKind::kSub, dtype(),
                     value_.raw_data(), delta.raw_data(), value_.raw_data(),
                     value_.num_elements(), value_.device().index),
        {&value_, &delta}));
    return value_.RefreshBf16Copy();
  }
  MT_RETURN_IF_ERROR(ops::internal::CheckHost(op, {&value_, &delta}));
  MT_DISPATCH_ALL(dtype(), T, {
    T* p = value_.data<T>();
    const T* d = delta.data<T>();
    const T s = static_cast<T>(sign);
    for (int64_t i = 0; i < value_.num_elements(); ++i) p[i] += s * d[i];
  });
  return absl::OkStatus();
}

absl::Status Variable::AssignAdd(const Tensor& delta) {
  return Accumulate("AssignAdd", delta, 1.0);
}

absl::Status Variable::AssignSub(const Tensor& delta) {
  return Accumulate("AssignSub", delta, -1.0);
}

}  // namespace mirrortrain
