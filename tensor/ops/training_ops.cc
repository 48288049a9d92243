#include "tensor/ops/training_ops.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_training.h"
#include "tensor/ops/op_util.h"
#include "tensor/ordered_sum.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

// Elements per unit of parallel work: the updates are memory-bound.
constexpr int64_t kGrain = 1 << 14;

// `g`: the gradient's terms (at most kMaxGradientTerms), summed a block at
// a time by the collectives' OrderedSum before the block's updates.
template <UpdateRule R, typename T>
void CpuUpdate(const UpdateParams<T>& p, absl::Span<const T* const> g, T* w,
               T* s0, T* s1, int64_t n) {
  ParallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
    T unused0 = T(0), unused1 = T(0);
    constexpr int64_t kBlock = 2048;
    T sum[kBlock];
    T* const sum_out[] = {sum};
    const T* at[kMaxGradientTerms];
    for (int64_t block = begin; block < end; block += kBlock) {
      const int64_t len = std::min(kBlock, end - block);
      const T* grad = g[0] + block;
      if (g.size() > 1) {
        for (size_t k = 0; k < g.size(); ++k) at[k] = g[k] + block;
        OrderedSum<T>({at, g.size()}, len, /*mean=*/false, sum_out);
        grad = sum;
      }
      for (int64_t i = 0; i < len; ++i) {
        const int64_t e = block + i;
        UpdateElement<R, T>(p, grad[i], w[e], s0 != nullptr ? s0[e] : unused0,
                            s1 != nullptr ? s1[e] : unused1);
      }
    }
  });
}

template <typename T>
void CpuRule(UpdateRule rule, const UpdateParams<T>& p,
             absl::Span<const T* const> g, T* w, T* s0, T* s1, int64_t n) {
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

// Validates one update as ApplyUpdate documents.
absl::Status CheckUpdate(UpdateRule rule, const UpdateTarget& t) {
  constexpr const char* kOp = "ApplyUpdate";
  const int want = UpdateRuleSlots(rule);
  if (static_cast<int>(t.slots.size()) != want) {
    return internal::OpError(
        kOp,
        absl::StrCat("rule takes ", want, " slot(s), got ", t.slots.size()),
        {&t.grad, &t.var});
  }
  // Missing slots stand in as var itself, so one check covers every case.
  const Tensor& slot0 = want > 0 ? t.slots[0] : t.var;
  const Tensor& slot1 = want > 1 ? t.slots[1] : t.var;
  MT_RETURN_IF_ERROR(CheckAlike(kOp, {&t.var, &t.grad, &slot0, &slot1}));
  if (t.more_grads.size() >= kMaxGradientTerms) {
    return internal::OpError(
        kOp,
        absl::StrCat("a gradient of at most ", kMaxGradientTerms,
                     " terms, got ", t.more_grads.size() + 1),
        {&t.grad, &t.var});
  }
  for (const Tensor& term : t.more_grads) {
    MT_RETURN_IF_ERROR(CheckAlike(kOp, {&t.var, &term}));
  }
  return CheckScalars(kOp, "params", t.params, kUpdateParamCount, t.var);
}

// Writing one element twice in a list (a tensor listed twice, views that
// overlap, a slot aliasing its variable) would race on a GPU (one launch)
// and is never what an optimizer means. `updated` adds the tensors a
// target writes.
template <typename Target>
absl::Status CheckDistinct(const char* op, absl::Span<const Target> targets,
                           void (*updated)(const Target&,
                                           std::vector<const Tensor*>&)) {
  std::vector<const Tensor*> written;
  for (const Target& t : targets) updated(t, written);
  auto begin = [](const Tensor* t) {
    return static_cast<const char*>(t->raw_data());
  };
  auto end = [&](const Tensor* t) {
    return begin(t) + t->num_elements() * DTypeSize(t->dtype());
  };
  std::erase_if(written,
                [](const Tensor* t) { return t->num_elements() == 0; });
  std::sort(written.begin(), written.end(),
            [&](const Tensor* a, const Tensor* b) {
              return std::less<>()(begin(a), begin(b));
            });
  for (size_t i = 1; i < written.size(); ++i) {
    if (std::less<>()(begin(written[i]), end(written[i - 1]))) {
      return internal::OpError(op, "two tensors it writes overlap",
                               {written[i - 1], written[i]});
    }
  }
  return absl::OkStatus();
}

// The GPU operands of a list, one group per (device, dtype), in list order.
template <typename Operands>
struct GpuGroups {
  struct Group {
    int device;
    DType dtype;
    std::vector<Operands> tensors;
  };
  std::vector<Group> groups;

  std::vector<Operands>& Of(const Tensor& t) {
    for (Group& g : groups) {
      if (g.device == t.device().index && g.dtype == t.dtype()) {
        return g.tensors;
      }
    }
    groups.push_back({t.device().index, t.dtype(), {}});
    return groups.back().tensors;
  }
};

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
  const UpdateTarget target{.params = params,
                            .grad = grad,
                            .var = var,
                            .slots = {slots.begin(), slots.end()}};
  return ApplyUpdates(rule, {&target, 1});
}

absl::Status ApplyUpdates(UpdateRule rule,
                          absl::Span<const UpdateTarget> targets) {
  for (const UpdateTarget& t : targets) {
    MT_RETURN_IF_ERROR(CheckUpdate(rule, t));
  }
  MT_RETURN_IF_ERROR(CheckDistinct<UpdateTarget>(
      "ApplyUpdates", targets,
      [](const UpdateTarget& t, std::vector<const Tensor*>& written) {
        written.push_back(&t.var);
        for (const Tensor& slot : t.slots) written.push_back(&slot);
      }));
  GpuGroups<cuda::UpdateOperands> gpu;
  for (const UpdateTarget& t : targets) {
    void* s0 = t.slots.size() > 0 ? t.slots[0].raw_data() : nullptr;
    void* s1 = t.slots.size() > 1 ? t.slots[1].raw_data() : nullptr;
    const int64_t n = t.var.num_elements();
    if (t.var.device().is_cuda()) {
      // The variable's bfloat16 copy, if it has one, is written in the
      // same pass (Buffer::bf16_copy).
      cuda::UpdateOperands operands{.params = t.params.raw_data(),
                                    .grad = t.grad.raw_data(),
                                    .var = t.var.raw_data(),
                                    .s0 = s0,
                                    .s1 = s1,
                                    .bf16 = t.var.bf16_copy().get(),
                                    .n = n};
      for (size_t k = 0; k < t.more_grads.size(); ++k) {
        operands.more_grads[k] = t.more_grads[k].raw_data();
      }
      gpu.Of(t.var).push_back(operands);
      continue;
    }
    MT_DISPATCH_FLOAT(t.var.dtype(), T, {
      UpdateParams<T> p;
      std::memcpy(&p, t.params.raw_data(), sizeof(p));
      // No allocation per variable and step: CheckUpdate bounded the terms.
      const T* terms[kMaxGradientTerms] = {t.grad.data<T>()};
      for (size_t k = 0; k < t.more_grads.size(); ++k) {
        terms[k + 1] = t.more_grads[k].data<T>();
      }
      CpuRule<T>(rule, p, {terms, t.more_grads.size() + 1}, t.var.data<T>(),
                 static_cast<T*>(s0), static_cast<T*>(s1), n);
    });
  }
  for (const auto& g : gpu.groups) {
    MT_RETURN_IF_ERROR(cuda::ApplyUpdates(rule, g.dtype, g.tensors, g.device));
  }
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
  const MovingAverageTarget target{
      .shadow = shadow, .value = value, .one_minus_decay = one_minus_decay};
  return AssignMovingAverages({&target, 1});
}

absl::Status AssignMovingAverages(
    absl::Span<const MovingAverageTarget> targets) {
  constexpr const char* kOp = "AssignMovingAverage";
  for (const MovingAverageTarget& t : targets) {
    MT_RETURN_IF_ERROR(CheckAlike(kOp, {&t.shadow, &t.value}));
    MT_RETURN_IF_ERROR(
        CheckScalars(kOp, "one_minus_decay", t.one_minus_decay, 1, t.shadow));
  }
  MT_RETURN_IF_ERROR(CheckDistinct<MovingAverageTarget>(
      "AssignMovingAverages", targets,
      [](const MovingAverageTarget& t, std::vector<const Tensor*>& written) {
        written.push_back(&t.shadow);
      }));
  GpuGroups<cuda::MovingAverageOperands> gpu;
  for (const MovingAverageTarget& t : targets) {
    const int64_t n = t.shadow.num_elements();
    if (t.shadow.device().is_cuda()) {
      gpu.Of(t.shadow).push_back(
          {.one_minus_decay = t.one_minus_decay.raw_data(),
           .value = t.value.raw_data(),
           .shadow = t.shadow.raw_data(),
           .n = n});
      continue;
    }
    MT_DISPATCH_FLOAT(t.shadow.dtype(), T, {
      const T decay = *t.one_minus_decay.data<T>();
      const T* v = t.value.data<T>();
      T* s = t.shadow.data<T>();
      ParallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          MovingAverageElement(decay, v[i], s[i]);
        }
      });
    });
  }
  for (const auto& g : gpu.groups) {
    MT_RETURN_IF_ERROR(cuda::MovingAverages(g.dtype, g.tensors, g.device));
  }
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
