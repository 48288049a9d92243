// MirroredVariable: one logical variable with a copy on every replica's
// device, after TensorFlow's MirroredVariable. Replicas update their own
// copy with identical summed gradients (all-reduced, or summed by each
// update in replica order), so the copies stay bitwise equal; this class
// names them as one variable and checks that.
//
// Ownership: the copies are not owned (each replica's model, optimizer or
// EMA owns its own); they must outlive this object. Thread contract: not
// synchronised; use it between steps.
#ifndef MIRRORTRAIN_DISTRIBUTE_MIRRORED_VARIABLE_H_
#define MIRRORTRAIN_DISTRIBUTE_MIRRORED_VARIABLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/variable.h"

namespace mirrortrain::distribute {

class MirroredVariable {
 public:
  // `copies[r]` is replica r's. They must share name, dtype and shape and
  // hold bitwise-identical values (mirrored from the start).
  static absl::StatusOr<MirroredVariable> Create(std::vector<Variable*> copies);

  const std::string& name() const { return copies_[0]->name(); }
  int num_replicas() const { return static_cast<int>(copies_.size()); }
  Variable* copy(int replica) const { return copies_[replica]; }
  // The value every replica holds (replica 0's copy).
  const Tensor& value() const { return copies_[0]->value(); }

  // Internal error naming the variable and the first replica that differs
  // from replica 0.
  absl::Status CheckIdentical() const;
  // Assigns `value` to every copy (how a checkpoint restores all replicas).
  absl::Status AssignAll(const Tensor& value);

 private:
  explicit MirroredVariable(std::vector<Variable*> copies)
      : copies_(std::move(copies)) {}
  std::vector<Variable*> copies_;
};

// Mirrors every replica's state: `per_replica[r]` lists replica r's
// variables in one order (same construction order on every replica), and
// entry i of the result holds copy r of each. InvalidArgument when the lists
// do not line up.
absl::StatusOr<std::vector<MirroredVariable>> MirrorReplicaStates(
    const std::vector<std::vector<Variable*>>& per_replica);

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_MIRRORED_VARIABLE_H_
