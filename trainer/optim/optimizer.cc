#include "trainer/optim/optimizer.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/ops/training_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

absl::Status CheckVar(const Variable* var, size_t index) {
  if (var == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer: variable ", index, " is null"));
  }
  if (!IsFloating(var->dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer: variable '", var->name(),
                     "' has non-float dtype ", DTypeName(var->dtype())));
  }
  return absl::OkStatus();
}

}  // namespace

Optimizer::Optimizer(std::unique_ptr<LearningRateSchedule> schedule)
    : schedule_(std::move(schedule)) {}

Optimizer::~Optimizer() = default;

double Optimizer::SlotInitialValue(absl::string_view) const { return 0.0; }

absl::StatusOr<std::vector<GradAndVar>> Optimizer::ComputeGradients(
    GradientTape& tape, const Tensor& loss, absl::Span<Variable* const> vars) {
  std::vector<Tensor> sources;
  sources.reserve(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    MT_RETURN_IF_ERROR(CheckVar(vars[i], i));
    sources.push_back(vars[i]->value());
  }
  GradientOptions options;
  options.unconnected = UnconnectedGradients::kZero;
  MT_ASSIGN_OR_RETURN(std::vector<std::optional<Tensor>> grads,
                      tape.Gradient(loss, sources, options));
  std::vector<GradAndVar> out;
  out.reserve(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    out.push_back({*std::move(grads[i]), vars[i]});
  }
  return out;
}

absl::Status Optimizer::CreateSlots(absl::Span<Variable* const> vars) {
  for (size_t i = 0; i < vars.size(); ++i) {
    MT_RETURN_IF_ERROR(CheckVar(vars[i], i));
  }
  const std::vector<std::string> names = GetSlotNames();
  for (Variable* var : vars) {
    if (slot_index_.contains(var)) continue;
    SlotSet set{var, {}};
    for (const std::string& slot_name : names) {
      Tensor init;
      const double value = SlotInitialValue(slot_name);
      if (value == 0.0) {
        MT_ASSIGN_OR_RETURN(
            init, Tensor::Zeros(var->dtype(), var->shape(), var->device()));
      } else {
        MT_ASSIGN_OR_RETURN(init,
                            Tensor::HostFull(var->dtype(), var->shape(), value)
                                .To(var->device()));
      }
      MT_ASSIGN_OR_RETURN(
          Variable slot,
          Variable::Create(absl::StrCat(var->name(), "/", slot_name), init,
                           /*trainable=*/false));
      set.slots.push_back(std::make_unique<Variable>(std::move(slot)));
    }
    // Only registered once all its slots exist, so a failure leaves no
    // half-made set behind.
    slot_index_.emplace(var, slot_sets_.size());
    slot_sets_.push_back(std::move(set));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Variable*>> Optimizer::CheckedVariables(
    absl::Span<const GradAndVar> grads_and_vars) const {
  std::vector<Variable*> vars;
  vars.reserve(grads_and_vars.size());
  for (size_t i = 0; i < grads_and_vars.size(); ++i) {
    const GradAndVar& gv = grads_and_vars[i];
    MT_RETURN_IF_ERROR(CheckVar(gv.var, i));
    if (!gv.grad.defined()) continue;
    const Variable& var = *gv.var;
    for (size_t k = 0; k <= gv.more.size(); ++k) {
      const Tensor& term = k == 0 ? gv.grad : gv.more[k - 1];
      if (!term.defined() || term.dtype() != var.dtype() ||
          term.shape() != var.shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer: gradient ", term.DebugString(),
                         " for variable '", var.name(), "' does not match its ",
                         DTypeName(var.dtype()), ShapeToString(var.shape())));
      }
      if (var.device() != term.device()) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer: variable '", var.name(), "' is on ",
                         var.device().ToString(), " but its gradient on ",
                         term.device().ToString()));
      }
    }
    if (gv.more.size() >= kMaxGradientTerms) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer: the gradient of variable '", var.name(), "' has ",
          gv.more.size() + 1, " terms, at most ", kMaxGradientTerms));
    }
    vars.push_back(gv.var);
  }
  if (vars.empty()) {
    return absl::InvalidArgumentError(
        "optimizer: no gradients provided for any variable");
  }
  return vars;
}

absl::Status Optimizer::ApplyGradients(
    absl::Span<const GradAndVar> grads_and_vars) {
  return Apply(grads_and_vars, /*stage=*/true);
}

absl::Status Optimizer::ApplyStagedGradients(
    absl::Span<const GradAndVar> grads_and_vars) {
  return Apply(grads_and_vars, /*stage=*/false);
}

absl::Status Optimizer::Apply(absl::Span<const GradAndVar> grads_and_vars,
                              bool stage) {
  MT_ASSIGN_OR_RETURN(const std::vector<Variable*> vars,
                      CheckedVariables(grads_and_vars));
  MT_RETURN_IF_ERROR(CreateSlots(vars));
  if (stage) MT_RETURN_IF_ERROR(StageUpdate(vars));
  MT_ASSIGN_OR_RETURN(const std::vector<Tensor> params, StagedRows(vars));
  // One list, so a GPU's variables update in one launch.
  std::vector<ops::UpdateTarget> targets;
  targets.reserve(vars.size());
  size_t k = 0;
  for (const GradAndVar& gv : grads_and_vars) {
    if (!gv.grad.defined()) continue;
    ops::UpdateTarget& t = targets.emplace_back();
    t.params = params[k++];
    t.grad = gv.grad;
    t.more_grads = gv.more;
    t.var = gv.var->value();
    for (const auto& slot : slot_sets_[slot_index_.at(gv.var)].slots) {
      t.slots.push_back(slot->value());
    }
  }
  MT_RETURN_IF_ERROR(ops::ApplyUpdates(Rule(), targets));
  ++iterations_;
  return absl::OkStatus();
}

Optimizer::ParamTable* Optimizer::TableOf(const Variable& var) {
  for (ParamTable& t : param_tables_) {
    if (t.device == var.device() && t.dtype == var.dtype()) return &t;
  }
  return nullptr;
}

absl::Status Optimizer::StageUpdate(absl::Span<Variable* const> vars,
                                    BatchedCopy* uploads) {
  // A table has a row per variable it has seen; a new variable (only ever
  // in the first updates) reallocates it.
  for (Variable* var : vars) {
    MT_RETURN_IF_ERROR(CheckVar(var, 0));
    ParamTable* t = TableOf(*var);
    if (t == nullptr) {
      t = &param_tables_.emplace_back(
          ParamTable{.device = var->device(), .dtype = var->dtype()});
    }
    // Under mixed bfloat16 on a GPU the update also writes the variable's
    // bfloat16 copy, which the products read instead of converting it.
    MT_ASSIGN_OR_RETURN(const bool made, ops::KeepBf16Copy(var->value()));
    if (made) ++staging_generation_;
    if (t->rows.contains(var)) continue;
    t->rows.emplace(var, static_cast<int64_t>(t->rows.size()));
    t->params = StagedTensor();
  }
  for (ParamTable& t : param_tables_) {
    if (t.params.device().defined()) continue;
    MT_ASSIGN_OR_RETURN(
        t.params, StagedTensor::Create(t.dtype,
                                       {static_cast<int64_t>(t.rows.size()),
                                        ops::kUpdateParamCount},
                                       t.device));
    ++staging_generation_;
  }
  std::vector<Tensor> hosts;
  for (ParamTable& t : param_tables_) {
    MT_ASSIGN_OR_RETURN(hosts.emplace_back(), t.params.Host());
  }
  const double lr = (*schedule_)(iterations_);
  for (Variable* var : vars) {
    const ParamTable* t = TableOf(*var);
    MT_ASSIGN_OR_RETURN(
        const Tensor row,
        hosts[t - param_tables_.data()].SliceRows(t->rows.at(var), 1));
    MT_RETURN_IF_ERROR(ops::PackUpdateParams(Hyperparameters(*var, lr), row));
  }
  for (ParamTable& t : param_tables_) {
    MT_RETURN_IF_ERROR(t.params.Upload(uploads));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Optimizer::StagedRows(
    absl::Span<Variable* const> vars) {
  std::vector<Tensor> rows;
  rows.reserve(vars.size());
  for (const Variable* var : vars) {
    const ParamTable* t = TableOf(*var);
    if (t == nullptr || !t->rows.contains(var) ||
        !t->params.device().defined()) {
      return absl::FailedPreconditionError(
          absl::StrCat("optimizer: no staged update for variable '",
                       var->name(), "' (StageUpdate first)"));
    }
    MT_ASSIGN_OR_RETURN(rows.emplace_back(),
                        t->params.device().SliceRows(t->rows.at(var), 1));
  }
  return rows;
}

absl::Status Optimizer::Minimize(GradientTape& tape, const Tensor& loss,
                                 absl::Span<Variable* const> vars) {
  MT_ASSIGN_OR_RETURN(std::vector<GradAndVar> grads,
                      ComputeGradients(tape, loss, vars));
  return ApplyGradients(grads);
}

Variable* Optimizer::GetSlot(const Variable& var,
                             absl::string_view slot_name) const {
  auto it = slot_index_.find(&var);
  if (it == slot_index_.end()) return nullptr;
  const std::vector<std::string> names = GetSlotNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == slot_name) return slot_sets_[it->second].slots[i].get();
  }
  return nullptr;
}

std::vector<Variable*> Optimizer::SlotVariables() const {
  std::vector<Variable*> out;
  for (const SlotSet& set : slot_sets_) {
    for (const auto& slot : set.slots) out.push_back(slot.get());
  }
  return out;
}

}  // namespace mirrortrain::trainer
