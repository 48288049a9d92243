#include "tensor/gradient_tape.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain {
namespace {

thread_local std::vector<GradientTape*> active_tapes;

// What an outer tape records for a gradient computed by unrecorded kernels
// (OpDef::gradient_recorded false): one step from the op's inputs and
// output gradients to its input gradients, with no gradient of its own.
// Its attrs hold the op's OpDef, which errors name.
constinit const OpDef kUnrecordedGradientOp{"UnrecordedGradient", nullptr};

bool IsFloatingTensor(const Tensor& t) { return IsFloating(t.dtype()); }

// Records, on the outer tapes, that `in_grads` came from `record`'s inputs
// and `out_grads` through kernels they did not see.
void RecordUnrecordedGradient(
    const OpRecord& record, absl::Span<const Tensor> out_grads,
    absl::Span<const std::optional<Tensor>> in_grads) {
  std::vector<Tensor> inputs = record.inputs;
  inputs.insert(inputs.end(), record.outputs.begin(), record.outputs.end());
  inputs.insert(inputs.end(), out_grads.begin(), out_grads.end());
  std::vector<Tensor> outputs;
  for (const std::optional<Tensor>& g : in_grads) {
    // A gradient passed on unchanged is already connected where it is.
    if (!g.has_value() ||
        std::any_of(inputs.begin(), inputs.end(),
                    [&](const Tensor& t) { return t.id() == g->id(); })) {
      continue;
    }
    outputs.push_back(*g);
  }
  tape::RecordOperation(kUnrecordedGradientOp, inputs, outputs,
                        std::any(record.op));
}

}  // namespace

GradientTape::GradientTape(bool persistent) : persistent_(persistent) {
  active_tapes.push_back(this);
}

GradientTape::~GradientTape() {
  auto it = std::find(active_tapes.begin(), active_tapes.end(), this);
  if (it != active_tapes.end()) active_tapes.erase(it);
}

void GradientTape::Watch(const Tensor& tensor) {
  if (tensor.defined() && IsFloatingTensor(tensor))
    watched_.insert(tensor.id());
}

bool GradientTape::IsWatched(const Tensor& tensor) const {
  return watched_.contains(tensor.id());
}

void GradientTape::Record(OpRecord record) {
  if (!recording_) return;
  bool watches_input = false;
  for (const Tensor& in : record.inputs) {
    if (watched_.contains(in.id())) {
      watches_input = true;
      break;
    }
  }
  if (!watches_input) return;
  for (const Tensor& out : record.outputs) {
    if (IsFloatingTensor(out)) watched_.insert(out.id());
  }
  records_.push_back(std::move(record));
}

absl::StatusOr<std::vector<std::optional<Tensor>>> GradientTape::Gradient(
    const Tensor& target, absl::Span<const Tensor> sources,
    const GradientOptions& options) {
  if (used_ && !persistent_) {
    return absl::FailedPreconditionError(
        "GradientTape.Gradient: a non-persistent tape computes one set of "
        "gradients; create it with persistent=true for more");
  }
  // Checked before the tape is used up: a bad call leaves it usable.
  if (options.output_gradient.has_value() &&
      (options.output_gradient->shape() != target.shape() ||
       options.output_gradient->dtype() != target.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradientTape.Gradient: output_gradient ",
                     options.output_gradient->DebugString(),
                     " does not match target ", target.DebugString()));
  }
  used_ = true;
  // A non-persistent tape lets go of its records (and the activations they
  // hold) however this call ends.
  const absl::Cleanup release = [this] {
    if (persistent_) return;
    records_.clear();
    records_.shrink_to_fit();
  };
  // Ops run while differentiating are not recorded on this tape (they may be
  // on an outer one, which is how higher-order gradients would work).
  recording_ = false;
  struct Resume {
    bool* flag;
    ~Resume() { *flag = true; }
  } resume{&recording_};

  absl::flat_hash_set<int64_t> source_ids, stop_ids;
  // Only watched sources take part, as in TensorFlow: an unwatched source
  // gets no gradient even if the target uses it.
  for (const Tensor& s : sources) {
    if (watched_.contains(s.id())) source_ids.insert(s.id());
  }
  for (const Tensor& s : options.stop_gradients) stop_ids.insert(s.id());

  // Forward pass over the records: which tensors depend on a source along a
  // path that no stop tensor cuts.
  absl::flat_hash_set<int64_t> reachable = source_ids;
  for (const OpRecord& r : records_) {
    bool depends = std::any_of(
        r.inputs.begin(), r.inputs.end(),
        [&](const Tensor& t) { return reachable.contains(t.id()); });
    if (!depends) continue;
    for (const Tensor& out : r.outputs) {
      if (!stop_ids.contains(out.id())) reachable.insert(out.id());
    }
  }

  // A source's gradient is final once the backward walk has processed the
  // first (in forward order) record that reads it.
  std::vector<std::vector<size_t>> ready_after;
  // Gradients already final (and reported) as backward goes, by source.
  std::vector<bool> reported(sources.size(), false);
  std::vector<std::optional<Tensor>> result(sources.size());
  absl::flat_hash_set<int64_t> produced;  // Outputs of records.
  if (options.on_gradient_ready) {
    absl::flat_hash_map<int64_t, size_t> first_use;
    for (size_t i = records_.size(); i-- > 0;) {
      for (const Tensor& in : records_[i].inputs) {
        if (source_ids.contains(in.id())) first_use[in.id()] = i;
      }
      for (const Tensor& out : records_[i].outputs) produced.insert(out.id());
    }
    ready_after.resize(records_.size());
    for (size_t k = 0; k < sources.size(); ++k) {
      auto it = first_use.find(sources[k].id());
      if (it != first_use.end()) ready_after[it->second].push_back(k);
    }
  }

  absl::flat_hash_map<int64_t, Tensor> grads;
  if (options.output_gradient.has_value()) {
    grads[target.id()] = *options.output_gradient;
  } else {
    MT_ASSIGN_OR_RETURN(grads[target.id()], ops::OnesLike(target));
  }

  // Source k's gradient as Gradient() returns it.
  auto final_gradient = [&](size_t k) -> absl::StatusOr<std::optional<Tensor>> {
    auto it = grads.find(sources[k].id());
    if (it != grads.end() && source_ids.contains(sources[k].id())) {
      return std::optional<Tensor>(it->second);
    }
    if (options.unconnected == UnconnectedGradients::kZero) {
      MT_ASSIGN_OR_RETURN(Tensor zeros, ops::ZerosLike(sources[k]));
      return std::optional<Tensor>(std::move(zeros));
    }
    return std::optional<Tensor>();
  };
  // Hands source k's gradient to the listener, keeping no reference.
  auto hand_over = [&](size_t k) {
    std::optional<Tensor> g = std::move(result[k]);
    result[k].reset();
    options.on_gradient_ready(k, std::move(g));
  };
  auto report_ready = [&](size_t record_index) -> absl::Status {
    if (!options.on_gradient_ready) return absl::OkStatus();
    std::vector<size_t> now;
    for (size_t k : ready_after[record_index]) {
      if (reported[k]) continue;
      reported[k] = true;
      MT_ASSIGN_OR_RETURN(result[k], final_gradient(k));
      now.push_back(k);
    }
    // The walk reads a final gradient again only when a record outputs
    // its source (a watched intermediate): otherwise the tape lets go of
    // it, so the listener may hold the only reference.
    for (size_t k : now) {
      if (!produced.contains(sources[k].id())) grads.erase(sources[k].id());
    }
    for (size_t k : now) hand_over(k);
    return absl::OkStatus();
  };
  // Processes one record: its gradient function, then accumulation into
  // the inputs' gradients.
  auto process = [&](const OpRecord* r) -> absl::Status {
    bool has_grad = false;
    for (const Tensor& out : r->outputs) {
      if (grads.contains(out.id()) && !stop_ids.contains(out.id())) {
        has_grad = true;
      }
    }
    if (!has_grad) return absl::OkStatus();
    std::vector<bool> needs_vec(r->inputs.size());
    bool any_needed = false;
    for (size_t j = 0; j < r->inputs.size(); ++j) {
      needs_vec[j] = reachable.contains(r->inputs[j].id()) &&
                     IsFloatingTensor(r->inputs[j]);
      any_needed |= needs_vec[j];
    }
    if (!any_needed) return absl::OkStatus();
    std::vector<Tensor> out_grads;
    out_grads.reserve(r->outputs.size());
    for (const Tensor& out : r->outputs) {
      auto it = grads.find(out.id());
      if (it != grads.end() && !stop_ids.contains(out.id())) {
        out_grads.push_back(it->second);
      } else {
        MT_ASSIGN_OR_RETURN(Tensor zeros, ops::ZerosLike(out));
        out_grads.push_back(std::move(zeros));
      }
    }
    const GradientFn fn = r->op->gradient;
    if (fn == nullptr && r->op == &kUnrecordedGradientOp) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GradientTape.Gradient: the gradient of op ",
          std::any_cast<const OpDef*>(r->attrs)->name,
          " cannot be differentiated again (its kernels are not recorded); "
          "the target depends on a source through it"));
    }
    if (fn == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GradientTape.Gradient: op ", r->op->name,
                       " has no gradient; the target depends on a source "
                       "through it"));
    }
    // std::vector<bool> is not contiguous bools; copy for the Span.
    std::unique_ptr<bool[]> needs(new bool[needs_vec.size()]);
    std::copy(needs_vec.begin(), needs_vec.end(), needs.get());
    std::vector<std::optional<Tensor>> in_grads(r->inputs.size());
    MT_RETURN_IF_ERROR(fn(*r, out_grads,
                          absl::MakeConstSpan(needs.get(), needs_vec.size()),
                          &in_grads));
    if (!r->op->gradient_recorded && tape::AnyTapeRecording()) {
      RecordUnrecordedGradient(*r, out_grads, in_grads);
    }
    // Intermediate gradients are dead once their producer is processed.
    for (const Tensor& out : r->outputs) {
      if (!source_ids.contains(out.id())) grads.erase(out.id());
    }
    for (size_t j = 0; j < r->inputs.size(); ++j) {
      if (!needs_vec[j] || !in_grads[j].has_value()) continue;
      const Tensor& in = r->inputs[j];
      Tensor& g = *in_grads[j];
      if (g.shape() != in.shape()) {
        return absl::InternalError(
            absl::StrCat("gradient of ", r->op->name, " input ", j,
                         " has shape ", ShapeToString(g.shape()), ", expected ",
                         ShapeToString(in.shape())));
      }
      auto it = grads.find(in.id());
      if (it == grads.end()) {
        grads.emplace(in.id(), std::move(g));
      } else {
        MT_ASSIGN_OR_RETURN(it->second, ops::Add(it->second, g));
      }
    }
    return absl::OkStatus();
  };
  for (size_t i = records_.size(); i-- > 0;) {
    MT_RETURN_IF_ERROR(process(&records_[i]));
    MT_RETURN_IF_ERROR(report_ready(i));
  }

  // The rest: every source without a listener; with one, the sources no
  // record reads (unconnected, or the target itself).
  for (size_t k = 0; k < sources.size(); ++k) {
    if (reported[k]) continue;
    MT_ASSIGN_OR_RETURN(result[k], final_gradient(k));
    if (options.on_gradient_ready) hand_over(k);
  }
  return result;
}

namespace tape {

bool AnyTapeActive() { return !active_tapes.empty(); }

bool AnyTapeRecording() {
  return std::any_of(active_tapes.begin(), active_tapes.end(),
                     [](const GradientTape* t) { return t->recording(); });
}

bool AnyRecordingTapeWatches(const Tensor& tensor) {
  return std::any_of(active_tapes.begin(), active_tapes.end(),
                     [&](const GradientTape* t) {
                       return t->recording() && t->IsWatched(tensor);
                     });
}

void RecordOperation(const OpDef& op, absl::Span<const Tensor> inputs,
                     absl::Span<const Tensor> outputs, std::any attrs) {
  if (active_tapes.empty() || !op.differentiable) return;
  for (GradientTape* tape : active_tapes) {
    OpRecord record;
    record.op = &op;
    record.inputs.assign(inputs.begin(), inputs.end());
    record.outputs.assign(outputs.begin(), outputs.end());
    record.attrs = attrs;
    tape->Record(std::move(record));
  }
}

void WatchOnActiveTapes(const Tensor& tensor) {
  for (GradientTape* tape : active_tapes) tape->Watch(tensor);
}

}  // namespace tape
}  // namespace mirrortrain
