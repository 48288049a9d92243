#include "tensor/ops/training_ops.h"

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
void CpuUpdate(const UpdateHyperparams& hyper, const T* g, T* w, T* s0, T* s1,
               int64_t n) {
  const UpdateParams<T> p = UpdateParams<T>::From(hyper);
  ParallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
    T unused0 = T(0), unused1 = T(0);
    for (int64_t i = begin; i < end; ++i) {
      UpdateElement<R, T>(p, g[i], w[i], s0 != nullptr ? s0[i] : unused0,
                          s1 != nullptr ? s1[i] : unused1);
    }
  });
}

template <typename T>
void CpuRule(UpdateRule rule, const UpdateHyperparams& h, const T* g, T* w,
             T* s0, T* s1, int64_t n) {
  DispatchUpdateRule(
      rule, [&](auto r) { CpuUpdate<decltype(r)::value>(h, g, w, s0, s1, n); });
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

absl::Status ApplyUpdate(UpdateRule rule, const UpdateHyperparams& hyper,
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
  const int64_t n = var.num_elements();
  void* s0 = want > 0 ? slots[0].raw_data() : nullptr;
  void* s1 = want > 1 ? slots[1].raw_data() : nullptr;
  if (var.device().is_cuda()) {
    return cuda::ApplyUpdate(rule, var.dtype(), hyper, grad.raw_data(),
                             var.raw_data(), s0, s1, n, var.device().index);
  }
  MT_DISPATCH_FLOAT(var.dtype(), T,
                    CpuRule<T>(rule, hyper, grad.data<T>(), var.data<T>(),
                               static_cast<T*>(s0), static_cast<T*>(s1), n));
  return absl::OkStatus();
}

absl::Status AssignMovingAverage(const Tensor& shadow, const Tensor& value,
                                 double one_minus_decay) {
  MT_RETURN_IF_ERROR(CheckAlike("AssignMovingAverage", {&shadow, &value}));
  const int64_t n = shadow.num_elements();
  if (shadow.device().is_cuda()) {
    return cuda::MovingAverage(shadow.dtype(), one_minus_decay,
                               value.raw_data(), shadow.raw_data(), n,
                               shadow.device().index);
  }
  MT_DISPATCH_FLOAT(shadow.dtype(), T, {
    const T decay = static_cast<T>(one_minus_decay);
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

}  // namespace mirrortrain::ops
