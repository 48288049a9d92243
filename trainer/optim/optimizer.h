// Optimizer: the base of the gradient-descent optimizers, after
// tf.compat.v1.train.Optimizer.
//
// An optimizer computes gradients on a GradientTape, keeps per-variable slot
// variables (momentum accumulators, Adam moments, ...) and applies one
// update per ApplyGradients call with the learning rate its schedule gives
// at iterations(), the number of updates applied so far. Updates are the
// TensorFlow training ops' (ApplyGradientDescent, ApplyMomentum, ...),
// computed element by element in the variable's dtype with the
// hyperparameters rounded to it, so float32 results match TensorFlow's CPU
// kernels.
//
// Ownership: the optimizer owns its schedule and its slot variables. It does
// not own the model variables; it refers to them by address, so a variable
// passed to it must outlive it and must not be moved.
//
// Thread contract: not synchronised. Under a distribution strategy each
// replica has its own optimizer, used only from that replica's thread.
#ifndef MIRRORTRAIN_TRAINER_OPTIM_OPTIMIZER_H_
#define MIRRORTRAIN_TRAINER_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/batched_copy.h"
#include "tensor/gradient_tape.h"
#include "tensor/staged_tensor.h"
#include "tensor/tensor.h"
#include "tensor/update_rules.h"
#include "tensor/variable.h"
#include "trainer/optim/lr_schedule.h"

namespace mirrortrain::trainer {

struct GradAndVar {
  Tensor grad;  // Undefined: no gradient; ApplyGradients skips the variable.
  Variable* var = nullptr;
  // Further terms of the gradient, added to `grad` in order where the update
  // reads it (ops::UpdateTarget::more_grads): every replica's gradient when
  // logical replicas of one device share them instead of all-reducing
  // (ReplicaContext::ShareGradients). Each like grad.
  std::vector<Tensor> more;
};

class Optimizer {
 public:
  explicit Optimizer(std::unique_ptr<LearningRateSchedule> schedule);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Gradients of `loss` with respect to each variable's value, one entry per
  // variable in order; a variable the loss does not depend on gets zeros.
  // Consumes the tape's one Gradient() call unless it is persistent.
  absl::StatusOr<std::vector<GradAndVar>> ComputeGradients(
      GradientTape& tape, const Tensor& loss, absl::Span<Variable* const> vars);

  // Updates every variable with a defined gradient in place (creating its
  // slots first if needed), with lr = schedule(iterations()), then
  // increments iterations(). Everything is checked before anything is
  // written: on error no variable, slot or counter has changed. The
  // gradient must match its variable's dtype, shape and device. Fails when
  // no entry has a gradient (as TensorFlow does).
  //
  // The update's parameters (UpdateHyperparams rounded to each variable's
  // dtype) are staged into one tensor per device and dtype (StagedTensor)
  // that the update kernels read, so the kernels' arguments are the same
  // every step (what a captured CUDA graph needs). Under mixed bfloat16 on a
  // GPU, staging also gives each variable a bfloat16 copy
  // (ops::KeepBf16Copy) that the update writes and the products read.
  absl::Status ApplyGradients(absl::Span<const GradAndVar> grads_and_vars);

  // ApplyGradients in two halves, for a captured CUDA graph that holds the
  // update kernels: StageUpdate writes the parameters of the next update
  // (iterations() + 1) of `vars` where the kernels read them, and is called
  // outside the capture before every replay; ApplyStagedGradients is
  // ApplyGradients without staging (its variables must be those staged).
  // A replay does not run ApplyStagedGradients: call
  // set_iterations(iterations() + 1) after it. With `uploads`, the
  // parameters reach the kernels at its Flush().
  absl::Status StageUpdate(absl::Span<Variable* const> vars,
                           BatchedCopy* uploads = nullptr);
  absl::Status ApplyStagedGradients(
      absl::Span<const GradAndVar> grads_and_vars);
  // Changes whenever a parameter table is (re)allocated or a variable gets
  // its bfloat16 copy: a graph captured before reads the old table, or
  // neither reads nor writes the copy.
  int64_t staging_generation() const { return staging_generation_; }

  // ComputeGradients then ApplyGradients.
  absl::Status Minimize(GradientTape& tape, const Tensor& loss,
                        absl::Span<Variable* const> vars);

  // Slot names in creation order, e.g. {"Adam", "Adam_1"}; {} for SGD.
  virtual std::vector<std::string> GetSlotNames() const = 0;
  // The slot `slot_name` of `var`, or nullptr when there is none (yet).
  Variable* GetSlot(const Variable& var, absl::string_view slot_name) const;
  // All slot variables: variables in the order their slots were first
  // created, then GetSlotNames() order. Stable across runs with the same
  // call sequence, so checkpoints can rely on it.
  std::vector<Variable*> SlotVariables() const;
  // Creates the slots of each variable that has none yet, named
  // "<var name>/<slot name>", non-trainable, on the variable's device, with
  // the variable's dtype and shape. Called lazily by ApplyGradients; call it
  // up front to restore slots from a checkpoint before the first step.
  absl::Status CreateSlots(absl::Span<Variable* const> vars);

  // Updates applied so far (tf.train.Optimizer's `iterations`).
  int64_t iterations() const { return iterations_; }
  // For checkpoint restore.
  void set_iterations(int64_t iterations) { iterations_ = iterations; }
  // The learning rate the next update will use.
  double LearningRate() const { return (*schedule_)(iterations_); }
  const LearningRateSchedule& schedule() const { return *schedule_; }

 protected:
  // Initial value of every element of slot `slot_name`.
  virtual double SlotInitialValue(absl::string_view slot_name) const;
  // The training op every variable is updated with; its slots are
  // GetSlotNames() in order.
  virtual UpdateRule Rule() const = 0;
  // This update's hyperparameters for `var` (float64, rounded to the
  // variable's dtype later): `lr` is the schedule's value for it, and
  // iterations() the number of updates before it.
  virtual UpdateHyperparams Hyperparameters(const Variable& var,
                                            double lr) const = 0;

 private:
  // The packed parameters of the variables of one device and dtype, a row
  // of ops::kUpdateParamCount each.
  struct ParamTable {
    Device device;
    DType dtype;
    StagedTensor params;
    absl::flat_hash_map<const Variable*, int64_t> rows;
  };
  // Checks the entries and returns the variables with a gradient.
  absl::StatusOr<std::vector<Variable*>> CheckedVariables(
      absl::Span<const GradAndVar> grads_and_vars) const;
  // The tables' rows of `vars`, after StageUpdate(vars).
  absl::StatusOr<std::vector<Tensor>> StagedRows(
      absl::Span<Variable* const> vars);
  absl::Status Apply(absl::Span<const GradAndVar> grads_and_vars, bool stage);
  ParamTable* TableOf(const Variable& var);

  struct SlotSet {
    Variable* var;
    std::vector<std::unique_ptr<Variable>> slots;  // GetSlotNames() order
  };

  std::unique_ptr<LearningRateSchedule> schedule_;
  int64_t iterations_ = 0;
  std::vector<SlotSet> slot_sets_;  // creation order
  absl::flat_hash_map<const Variable*, size_t> slot_index_;
  std::vector<ParamTable> param_tables_;
  int64_t staging_generation_ = 0;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_OPTIM_OPTIMIZER_H_
