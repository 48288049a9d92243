// The update rules, and hyperparameters that give every field a value:
// shared by the CPU and GPU training-op tests.
#ifndef MIRRORTRAIN_TESTS_TENSOR_UPDATE_RULE_CASES_H_
#define MIRRORTRAIN_TESTS_TENSOR_UPDATE_RULE_CASES_H_

#include "tensor/update_rules.h"

namespace mirrortrain::testing {

inline constexpr UpdateRule kEveryUpdateRule[] = {UpdateRule::kGradientDescent,
                                                  UpdateRule::kMomentum,
                                                  UpdateRule::kNesterovMomentum,
                                                  UpdateRule::kAdagradV2,
                                                  UpdateRule::kAdam,
                                                  UpdateRule::kRMSProp,
                                                  UpdateRule::kAdamW};

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
  return h;
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TENSOR_UPDATE_RULE_CASES_H_
