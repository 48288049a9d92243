#include "trainer/parameter_server_shards.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {

struct ParameterServerShards::Part {
  int var;              // Index into Create's variables.
  int64_t begin, rows;  // Its rows of that variable.
  bool whole;           // All of it (also scalars): no slicing.
  std::unique_ptr<Variable> value;
};

struct ParameterServerShards::Shard {
  Device device;
  mutable std::mutex mu;
  std::vector<Part> parts;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<ExponentialMovingAverage> ema;
  // Updates this shard holds: pushes applied since Create, or since
  // CopyFrom, which sets it to the restored step.
  int64_t applied = 0;
};

namespace {

// The rows of a full-size tensor that `part` covers (a view).
absl::StatusOr<Tensor> Rows(const Tensor& full, int64_t begin, int64_t rows,
                            bool whole) {
  if (whole) return full;
  return full.SliceRows(begin, rows);
}

}  // namespace

ParameterServerShards::~ParameterServerShards() = default;

absl::StatusOr<std::unique_ptr<ParameterServerShards>>
ParameterServerShards::Create(
    absl::Span<Variable* const> vars, absl::Span<Variable* const> forward_state,
    const std::vector<std::vector<distribute::VariablePartition>>& plan,
    const std::vector<Device>& ps_devices,
    const OptimizerFactory& make_optimizer, std::optional<EmaOptions> ema) {
  if (plan.size() != vars.size()) {
    return absl::InternalError("partition plan does not fit the variables");
  }
  std::unique_ptr<ParameterServerShards> out(new ParameterServerShards());
  for (const Device& device : ps_devices) {
    auto shard = std::make_unique<Shard>();
    shard->device = device;
    MT_ASSIGN_OR_RETURN(shard->optimizer, make_optimizer());
    if (ema) {
      shard->ema = std::make_unique<ExponentialMovingAverage>(
          ema->decay, ema->use_num_updates);
    }
    out->shards_.push_back(std::move(shard));
  }
  int grads = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = *vars[i];
    out->grad_index_.push_back(v.trainable() ? grads++ : -1);
    out->state_index_.push_back(
        absl::c_linear_search(forward_state, vars[i]) ? out->states_++ : -1);
    const int64_t all_rows = v.shape().empty() ? 1 : v.shape()[0];
    for (const distribute::VariablePartition& p : plan[i]) {
      Shard& shard = *out->shards_[p.ps];
      Part part{static_cast<int>(i), p.row_begin, p.row_end - p.row_begin,
                p.row_end - p.row_begin == all_rows, nullptr};
      MT_ASSIGN_OR_RETURN(Tensor rows,
                          Rows(v.value(), part.begin, part.rows, part.whole));
      MT_ASSIGN_OR_RETURN(rows, rows.To(shard.device));
      // The variable's name, so name-based optimizer rules still apply.
      MT_ASSIGN_OR_RETURN(Variable value,
                          Variable::Create(v.name(), rows, v.trainable()));
      part.value = std::make_unique<Variable>(std::move(value));
      shard.parts.push_back(std::move(part));
    }
  }
  for (auto& shard : out->shards_) {
    std::vector<Variable*> trainable;
    for (Part& part : shard->parts) {
      if (part.value->trainable()) trainable.push_back(part.value.get());
    }
    MT_RETURN_IF_ERROR(shard->optimizer->CreateSlots(trainable));
    if (shard->ema) MT_RETURN_IF_ERROR(shard->ema->Track(trainable));
  }
  return out;
}

absl::Status ParameterServerShards::Copy(
    const std::vector<std::pair<FullTensor, PartTensor>>& what,
    bool to_full) const {
  for (const auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    for (const Part& part : shard->parts) {
      for (const auto& [full_of, part_of] : what) {
        MT_ASSIGN_OR_RETURN(Tensor full, full_of(part.var));
        MT_ASSIGN_OR_RETURN(Tensor mine, part_of(*shard, part));
        if (!full.defined() || !mine.defined()) continue;
        MT_ASSIGN_OR_RETURN(Tensor rows,
                            Rows(full, part.begin, part.rows, part.whole));
        MT_RETURN_IF_ERROR(to_full ? rows.CopyFrom(mine) : mine.CopyFrom(rows));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerShards::Read(
    absl::Span<Variable* const> vars) const {
  std::vector<std::pair<FullTensor, PartTensor>> values =
      StateTensors(vars, *shards_[0]->optimizer, nullptr);
  values.resize(1);  // The values, no slots.
  return Copy(values, /*to_full=*/true);
}

absl::StatusOr<std::vector<Tensor>> ParameterServerShards::ForwardState(
    absl::Span<Variable* const> vars) const {
  if (vars.size() != state_index_.size()) {
    return absl::InternalError("ForwardState: not Create's variables");
  }
  std::vector<Tensor> state;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (state_index_[i] < 0) continue;
    MT_ASSIGN_OR_RETURN(Tensor copy, vars[i]->value().Clone());
    state.push_back(std::move(copy));
  }
  return state;
}

absl::Status ParameterServerShards::Push(absl::Span<Variable* const> vars,
                                         absl::Span<const Tensor> read,
                                         absl::Span<const Tensor> grads,
                                         int64_t update) {
  if (states_ != static_cast<int>(read.size())) {
    return absl::InternalError("Push: `read` does not fit the variables");
  }
  // Moved at the start and again at the end (whatever the exit): a copy
  // that overlapped a push has neither version.
  version_.fetch_add(1, std::memory_order_acq_rel);
  absl::Cleanup moved = [this] {
    version_.fetch_add(1, std::memory_order_acq_rel);
  };
  for (auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    std::vector<GradAndVar> pairs;
    for (Part& part : shard->parts) {
      const int g = grad_index_[part.var];
      if (g < 0) {
        // Frozen (Layer::Freeze): nothing changes it.
        if (state_index_[part.var] < 0) continue;
        // Forward-pass state: its change since the worker's read.
        MT_ASSIGN_OR_RETURN(
            Tensor now,
            Rows(vars[part.var]->value(), part.begin, part.rows, part.whole));
        MT_ASSIGN_OR_RETURN(Tensor then,
                            Rows(read[state_index_[part.var]], part.begin,
                                 part.rows, part.whole));
        MT_ASSIGN_OR_RETURN(Tensor change, ops::Sub(now, then));
        MT_ASSIGN_OR_RETURN(change, change.To(shard->device));
        MT_ASSIGN_OR_RETURN(Tensor sum, ops::Add(part.value->value(), change));
        MT_RETURN_IF_ERROR(part.value->Assign(sum));
        continue;
      }
      if (g >= static_cast<int>(grads.size())) {
        return absl::InternalError("fewer gradients than trainable variables");
      }
      MT_ASSIGN_OR_RETURN(Tensor rows,
                          Rows(grads[g], part.begin, part.rows, part.whole));
      MT_ASSIGN_OR_RETURN(rows, rows.To(shard->device));
      pairs.push_back({rows, part.value.get()});
    }
    if (pairs.empty()) continue;
    // The update's own number on every device, whatever order pushes
    // reach them in (ApplyGradients steps from update - 1 to update).
    Optimizer& optimizer = *shard->optimizer;
    const int64_t highest = std::max(optimizer.iterations(), update);
    optimizer.set_iterations(update - 1);
    absl::Status applied = optimizer.ApplyGradients(pairs);
    if (applied.ok() && shard->ema) applied = shard->ema->Apply(update);
    optimizer.set_iterations(highest);
    MT_RETURN_IF_ERROR(applied);
    ++shard->applied;
  }
  return absl::OkStatus();
}

namespace {

// `optimizer`'s slot `name` of variable `var`, as a tensor (undefined when
// the variable has none: it is not trainable).
absl::StatusOr<Tensor> SlotValue(const Optimizer& optimizer,
                                 const Variable& var, const std::string& name) {
  Variable* slot = optimizer.GetSlot(var, name);
  return slot == nullptr ? Tensor() : slot->value();
}

absl::StatusOr<Tensor> ShadowValue(const ExponentialMovingAverage* ema,
                                   const Variable& var) {
  Variable* shadow = ema == nullptr ? nullptr : ema->Shadow(var);
  return shadow == nullptr ? Tensor() : shadow->value();
}

}  // namespace

std::vector<std::pair<ParameterServerShards::FullTensor,
                      ParameterServerShards::PartTensor>>
ParameterServerShards::StateTensors(absl::Span<Variable* const> vars,
                                    const Optimizer& optimizer,
                                    const ExponentialMovingAverage* ema) {
  std::vector<std::pair<FullTensor, PartTensor>> what;
  what.push_back(
      {[vars](int i) -> absl::StatusOr<Tensor> { return vars[i]->value(); },
       [](const Shard&, const Part& p) -> absl::StatusOr<Tensor> {
         return p.value->value();
       }});
  for (const std::string& name : optimizer.GetSlotNames()) {
    what.push_back({[vars, &optimizer, name](int i) {
                      return SlotValue(optimizer, *vars[i], name);
                    },
                    [name](const Shard& s, const Part& p) {
                      return SlotValue(*s.optimizer, *p.value, name);
                    }});
  }
  if (ema != nullptr) {
    what.push_back({[vars, ema](int i) { return ShadowValue(ema, *vars[i]); },
                    [](const Shard& s, const Part& p) {
                      return ShadowValue(s.ema.get(), *p.value);
                    }});
  }
  return what;
}

absl::Status ParameterServerShards::CopyTo(
    absl::Span<Variable* const> vars, const Optimizer& optimizer,
    const ExponentialMovingAverage* ema) const {
  return Copy(StateTensors(vars, optimizer, ema), /*to_full=*/true);
}

absl::Status ParameterServerShards::CopyFrom(
    absl::Span<Variable* const> vars, const Optimizer& optimizer,
    const ExponentialMovingAverage* ema, int64_t updates) {
  version_.fetch_add(1, std::memory_order_acq_rel);
  MT_RETURN_IF_ERROR(
      Copy(StateTensors(vars, optimizer, ema), /*to_full=*/false));
  for (auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    shard->optimizer->set_iterations(updates);
    shard->applied = updates;
  }
  return absl::OkStatus();
}

std::vector<int64_t> ParameterServerShards::UpdatesPerShard() const {
  std::vector<int64_t> out;
  for (const auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    bool trainable = false;
    for (const Part& part : shard->parts)
      trainable |= grad_index_[part.var] >= 0;
    if (trainable) out.push_back(shard->applied);
  }
  return out;
}

}  // namespace mirrortrain::trainer
