#include "trainer/optim/ema.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensor/ops/training_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

constexpr absl::string_view kShadowSuffix = "/ExponentialMovingAverage";

}  // namespace

std::string ExponentialMovingAverage::ShadowName(
    absl::string_view variable_name) {
  return absl::StrCat(variable_name, kShadowSuffix);
}

bool ExponentialMovingAverage::IsShadowName(absl::string_view name) {
  return absl::EndsWith(name, kShadowSuffix);
}

ExponentialMovingAverage::ExponentialMovingAverage(double decay,
                                                   bool use_num_updates)
    : decay_(decay), use_num_updates_(use_num_updates) {}

absl::StatusOr<std::unique_ptr<ExponentialMovingAverage>>
ExponentialMovingAverage::Create(double decay, bool use_num_updates) {
  if (!(decay >= 0 && decay <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ema.decay must be in [0, 1], got ", decay));
  }
  return std::make_unique<ExponentialMovingAverage>(decay, use_num_updates);
}

absl::Status ExponentialMovingAverage::Track(absl::Span<Variable* const> vars) {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (vars[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("ExponentialMovingAverage: variable ", i, " is null"));
    }
    if (!IsFloating(vars[i]->dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ExponentialMovingAverage: variable '", vars[i]->name(),
                       "' has non-float dtype ", DTypeName(vars[i]->dtype())));
    }
  }
  for (Variable* var : vars) {
    if (index_.contains(var)) continue;
    MT_ASSIGN_OR_RETURN(Variable shadow, Variable::FromInitialValueOf(
                                             ShadowName(var->name()), *var,
                                             /*trainable=*/false));
    index_.emplace(var, vars_.size());
    vars_.push_back(var);
    shadows_.push_back(std::make_unique<Variable>(std::move(shadow)));
  }
  return absl::OkStatus();
}

double ExponentialMovingAverage::DecayAt(int64_t num_updates) const {
  // float32 whatever the variables' dtype: TensorFlow's decay is a float32
  // tensor and it casts num_updates to float32.
  float decay = static_cast<float>(decay_);
  if (use_num_updates_) {
    const float n = static_cast<float>(num_updates);
    decay = std::min(decay, (1.0f + n) / (10.0f + n));
  }
  return decay;
}

absl::Status ExponentialMovingAverage::Apply(int64_t num_updates) {
  if (use_num_updates_ && num_updates < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ExponentialMovingAverage.Apply: num_updates must be >= 0, got ",
        num_updates));
  }
  MT_RETURN_IF_ERROR(Stage(num_updates));
  return ApplyStaged();
}

absl::Status ExponentialMovingAverage::ApplyStaged() {
  // Every decay is looked up before any shadow changes; one list, so a
  // GPU's shadows update in one launch.
  std::vector<ops::MovingAverageTarget> targets;
  targets.reserve(vars_.size());
  for (size_t i = 0; i < vars_.size(); ++i) {
    const DecayTable* t = DecayTableOf(*vars_[i]);
    if (t == nullptr) {
      return absl::FailedPreconditionError(
          "ExponentialMovingAverage.ApplyStaged: nothing staged (Stage first)");
    }
    // shadow -= (shadow - value) * (1 - decay).
    targets.push_back({.shadow = shadows_[i]->value(),
                       .value = vars_[i]->value(),
                       .one_minus_decay = t->value.device()});
  }
  return ops::AssignMovingAverages(targets);
}

ExponentialMovingAverage::DecayTable* ExponentialMovingAverage::DecayTableOf(
    const Variable& var) {
  for (DecayTable& t : decays_) {
    if (t.device == var.device() && t.dtype == var.dtype()) return &t;
  }
  return nullptr;
}

absl::Status ExponentialMovingAverage::Stage(int64_t num_updates,
                                             BatchedCopy* uploads) {
  for (const Variable* var : vars_) {
    if (DecayTableOf(*var) != nullptr) continue;
    MT_ASSIGN_OR_RETURN(StagedTensor value,
                        StagedTensor::Create(var->dtype(), {1}, var->device()));
    decays_.push_back(DecayTable{.device = var->device(),
                                 .dtype = var->dtype(),
                                 .value = std::move(value)});
  }
  // 1 - decay is formed in float32 and then cast to the variable's dtype,
  // as TensorFlow's assign_moving_average does.
  const float one_minus_decay = 1.0f - static_cast<float>(DecayAt(num_updates));
  for (DecayTable& t : decays_) {
    MT_ASSIGN_OR_RETURN(Tensor host, t.value.Host());
    MT_RETURN_IF_ERROR(
        host.CopyFrom(Tensor::HostFull(t.dtype, {1}, one_minus_decay)));
    MT_RETURN_IF_ERROR(t.value.Upload(uploads));
  }
  return absl::OkStatus();
}

Variable* ExponentialMovingAverage::Shadow(const Variable& var) const {
  auto it = index_.find(&var);
  return it == index_.end() ? nullptr : shadows_[it->second].get();
}

std::vector<Variable*> ExponentialMovingAverage::ShadowVariables() const {
  std::vector<Variable*> out;
  out.reserve(shadows_.size());
  for (const auto& shadow : shadows_) out.push_back(shadow.get());
  return out;
}

std::vector<Variable*> ExponentialMovingAverage::TrackedVariables() const {
  return vars_;
}

absl::StatusOr<ScopedEmaWeights> ScopedEmaWeights::Create(
    const ExponentialMovingAverage& ema) {
  ScopedEmaWeights scoped;
  const std::vector<Variable*> vars = ema.TrackedVariables();
  scoped.vars_.reserve(vars.size());
  scoped.saved_.reserve(vars.size());
  for (Variable* var : vars) {
    MT_ASSIGN_OR_RETURN(Tensor saved, var->value().Clone());
    // Registered before the swap so a failure below restores what was
    // already swapped (when `scoped` is destroyed).
    scoped.vars_.push_back(var);
    scoped.saved_.push_back(std::move(saved));
    MT_RETURN_IF_ERROR(var->Assign(ema.Shadow(*var)->value()));
  }
  return scoped;
}

ScopedEmaWeights::~ScopedEmaWeights() { Restore().IgnoreError(); }

ScopedEmaWeights::ScopedEmaWeights(ScopedEmaWeights&& other) noexcept
    : vars_(std::exchange(other.vars_, {})),
      saved_(std::exchange(other.saved_, {})) {}

ScopedEmaWeights& ScopedEmaWeights::operator=(
    ScopedEmaWeights&& other) noexcept {
  if (this != &other) {
    Restore().IgnoreError();
    vars_ = std::exchange(other.vars_, {});
    saved_ = std::exchange(other.saved_, {});
  }
  return *this;
}

absl::Status ScopedEmaWeights::Restore() {
  absl::Status status;
  for (size_t i = 0; i < vars_.size(); ++i) {
    status.Update(vars_[i]->Assign(saved_[i]));
  }
  vars_.clear();
  saved_.clear();
  return status;
}

}  // namespace mirrortrain::trainer
