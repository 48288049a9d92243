// The update rules, and hyperparameters that give every field a value:
// shared by the CPU and GPU training-op tests.
#ifndef MIRRORTRAIN_TESTS_TENSOR_UPDATE_RULE_CASES_H_
#define MIRRORTRAIN_TESTS_TENSOR_UPDATE_RULE_CASES_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "tensor/ops/training_ops.h"
#include "tensor/update_rules.h"
#include "tests/test_util.h"

namespace mirrortrain::testing {

inline constexpr UpdateRule kEveryUpdateRule[] = {UpdateRule::kGradientDescent,
                                                  UpdateRule::kMomentum,
                                                  UpdateRule::kNesterovMomentum,
                                                  UpdateRule::kAdagradV2,
                                                  UpdateRule::kAdam,
                                                  UpdateRule::kRMSProp,
                                                  UpdateRule::kAdamW,
                                                  UpdateRule::kAdamax,
                                                  UpdateRule::kLion,
                                                  UpdateRule::kNadam};

// Adam's powers are those of its first update.
inline UpdateHyperparams EveryHyperparameter() {
  UpdateHyperparams h;
  h.lr = 0.05;
  h.momentum = 0.9;
  h.epsilon = 1e-7;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.beta1_power = 0.9;
  h.beta2_power = 0.999;
  h.rho = 0.95;
  h.weight_decay = 0.004;
  h.nadam_u_next = 0.45;
  h.nadam_one_minus_u = 0.55;
  h.nadam_one_minus_product = 0.6;
  h.nadam_one_minus_product_next = 0.7;
  return h;
}

// Host targets for ops::ApplyUpdates, one per size, each with a learning
// rate of its own (so updating with another target's parameters shows) and
// positive slots (accumulators hold sums of squares).
inline std::vector<ops::UpdateTarget> UpdateTargets(
    UpdateRule rule, DType dtype, absl::Span<const int64_t> sizes) {
  std::vector<ops::UpdateTarget> targets;
  for (size_t i = 0; i < sizes.size(); ++i) {
    UpdateHyperparams h = EveryHyperparameter();
    h.lr = 0.01 * static_cast<double>(i + 1);
    ops::UpdateTarget& t = targets.emplace_back();
    t.params = Tensor::HostEmpty(dtype, {ops::kUpdateParamCount});
    if (absl::Status s = ops::PackUpdateParams(h, t.params); !s.ok()) {
      ADD_FAILURE() << s;
    }
    const uint64_t seed = 10 * i;
    t.var = RandomTensor({sizes[i]}, seed + 1, dtype);
    t.grad = RandomTensor({sizes[i]}, seed + 2, dtype);
    for (int s = 0; s < UpdateRuleSlots(rule); ++s) {
      t.slots.push_back(RandomTensor({sizes[i]}, seed + 3 + s, dtype, 0.1, 1));
    }
  }
  return targets;
}

// Gives every target `terms` - 1 further gradient terms (more_grads).
inline void AddGradientTerms(std::vector<ops::UpdateTarget>& targets,
                             int terms) {
  for (size_t i = 0; i < targets.size(); ++i) {
    ops::UpdateTarget& t = targets[i];
    for (int k = 1; k < terms; ++k) {
      t.more_grads.push_back(
          RandomTensor(t.grad.shape(), 1000 + 10 * i + k, t.grad.dtype()));
    }
  }
}

// Adds `term` to `sum` element by element.
template <typename T>
void AddInto(Tensor& sum, const Tensor& term) {
  for (int64_t e = 0; e < sum.num_elements(); ++e) {
    sum.data<T>()[e] += term.data<T>()[e];
  }
}

// The targets with each gradient's terms summed on the host, in order, one
// element at a time (what an all-reduce would hand the update).
inline std::vector<ops::UpdateTarget> SummedGradients(
    std::vector<ops::UpdateTarget> targets) {
  for (ops::UpdateTarget& t : targets) {
    Tensor sum = *t.grad.Clone();
    for (const Tensor& term : t.more_grads) {
      if (sum.dtype() == DType::kF32) {
        AddInto<float>(sum, term);
      } else {
        AddInto<double>(sum, term);
      }
    }
    t.grad = sum;
    t.more_grads.clear();
  }
  return targets;
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TENSOR_UPDATE_RULE_CASES_H_
