#include "tensor/ops/training_ops.h"

#include <cstring>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_training.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

// Elements per unit of parallel work: the updates are memory-bound.
constexpr int64_t kGrain = 1 << 14;

template <UpdateRule R, typename T>
void CpuUpdate(const UpdateParams<T>& p, const T* g, T* w, T* s0, T* s1,
               int64_t n) {
  ParallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
    T unused0 = T(0), unused1 = T(0);
    for (int64_t i = begin; i < end; ++i) {
      UpdateElement<R, T>(p, g[i], w[i], s0 != nullptr ? s0[i] : unused0,
                          s1 != nullptr ? s1[i] : unused1);
    }
  });
}

template <typename T>
void CpuRule(UpdateRule rule, const UpdateParams<T>& p, const T* g, T* w, T* s0,
             T* s1, int64_t n) {
  DispatchUpdateRule(
      rule, [&](auto r) { CpuUpdate<decltype(r)::value>(p, g, w, s0, s1, n); });
}

static_assert(sizeof(UpdateParams<float>) == kUpdateParamCount * sizeof(float));
static_assert(sizeof(UpdateParams<double>) ==
              kUpdateParamCount * sizeof(double));

// One scalar-ish operand: `count` elements of `like`'s dtype on its device.
absl::Status CheckScalars(const char* op, const char* what, const Tensor& t,
                          int64_t count, const Tensor& like) {
  if (!t.defined() || t.dtype() != like.dtype() ||
      t.device() != like.device() || t.num_elements() != count) {
    return internal::OpError(
        op,
        absl::StrCat(what, " must be ", count, " ", DTypeName(like.dtype()),
                     " element(s) on ", like.device().ToString(), ", got ",
                     t.defined() ? t.DebugString() : "undefined"),
        {&like});
  }
  return absl::OkStatus();
}

// Defined, floating, one dtype, one device and one shape.
absl::Status CheckAlike(const char* op,
                        std::initializer_list<const Tensor*> operands) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, operands));
  for (const Tensor* t : operands) {
    if (t->shape() != (*operands.begin())->shape()) {
      return internal::OpError(op, "operands must have the same shape",
                               operands);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PackUpdateParams(const UpdateHyperparams& hyper,
                              const Tensor& params) {
  if (!params.defined() || !params.device().is_cpu() ||
      !IsFloating(params.dtype()) ||
      params.num_elements() != kUpdateParamCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackUpdateParams: want ", kUpdateParamCount,
                     " floating host elements, got ",
                     params.defined() ? params.DebugString() : "undefined"));
  }
  MT_DISPATCH_FLOAT(params.dtype(), T, {
    const UpdateParams<T> p = UpdateParams<T>::From(hyper);
    std::memcpy(params.raw_data(), &p, sizeof(p));
  });
  return absl::OkStatus();
}

absl::Status ApplyUpdate(UpdateRule rule, const Tensor& params,
                         const Tensor& grad, const Tensor& var,
                         absl::Span<const Tensor> slots) {
  constexpr const char* kOp = "ApplyUpdate";
  const int want = UpdateRuleSlots(rule);
  if (static_cast<int>(slots.size()) != want) {
    return internal::OpError(
        kOp, absl::StrCat("rule takes ", want, " slot(s), got ", slots.size()),
        {&grad, &var});
  }
  // Missing slots stand in as var itself, so one check covers every case.
  const Tensor& slot0 = want > 0 ? slots[0] : var;
  const Tensor& slot1 = want > 1 ? slots[1] : var;
  MT_RETURN_IF_ERROR(CheckAlike(kOp, {&var, &grad, &slot0, &slot1}));
  MT_RETURN_IF_ERROR(
      CheckScalars(kOp, "params", params, kUpdateParamCount, var));
  const int64_t n = var.num_elements();
  void* s0 = want > 0 ? slots[0].raw_data() : nullptr;
  void* s1 = want > 1 ? slots[1].raw_data() : nullptr;
  if (var.device().is_cuda()) {
    return cuda::ApplyUpdate(rule, var.dtype(), params.raw_data(),
                             grad.raw_data(), var.raw_data(), s0, s1, n,
                             var.device().index);
  }
  MT_DISPATCH_FLOAT(var.dtype(), T, {
    UpdateParams<T> p;
    std::memcpy(&p, params.raw_data(), sizeof(p));
    CpuRule<T>(rule, p, grad.data<T>(), var.data<T>(), static_cast<T*>(s0),
               static_cast<T*>(s1), n);
  });
  return absl::OkStatus();
}

absl::Status ApplyUpdate(UpdateRule rule, const UpdateHyperparams& hyper,
                         const Tensor& grad, const Tensor& var,
                         absl::Span<const Tensor> slots) {
  if (!var.defined() || !IsFloating(var.dtype())) {
    return ApplyUpdate(rule, Tensor(), grad, var, slots);  // Names the error.
  }
  Tensor params = Tensor::HostEmpty(var.dtype(), {kUpdateParamCount});
  MT_RETURN_IF_ERROR(PackUpdateParams(hyper, params));
  MT_ASSIGN_OR_RETURN(params, params.To(var.device()));
  return ApplyUpdate(rule, params, grad, var, slots);
}

absl::Status AssignMovingAverage(const Tensor& shadow, const Tensor& value,
                                 const Tensor& one_minus_decay) {
  constexpr const char* kOp = "AssignMovingAverage";
  MT_RETURN_IF_ERROR(CheckAlike(kOp, {&shadow, &value}));
  MT_RETURN_IF_ERROR(
      CheckScalars(kOp, "one_minus_decay", one_minus_decay, 1, shadow));
  const int64_t n = shadow.num_elements();
  if (shadow.device().is_cuda()) {
    return cuda::MovingAverage(shadow.dtype(), one_minus_decay.raw_data(),
                               value.raw_data(), shadow.raw_data(), n,
                               shadow.device().index);
  }
  MT_DISPATCH_FLOAT(shadow.dtype(), T, {
    const T decay = *one_minus_decay.data<T>();
    const T* v = value.data<T>();
    T* s = shadow.data<T>();
    ParallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        MovingAverageElement(decay, v[i], s[i]);
      }
    });
  });
  return absl::OkStatus();
}

absl::Status AssignMovingAverage(const Tensor& shadow, const Tensor& value,
                                 double one_minus_decay) {
  MT_RETURN_IF_ERROR(CheckAlike("AssignMovingAverage", {&shadow, &value}));
  Tensor decay = Tensor::HostFull(shadow.dtype(), {1}, one_minus_decay);
  MT_ASSIGN_OR_RETURN(decay, decay.To(shadow.device()));
  return AssignMovingAverage(shadow, value, decay);
}

}  // namespace mirrortrain::ops
