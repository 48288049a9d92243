// Variable: named, mutable state of a model (tf.Variable).
//
// Ownership: a Variable owns its current value tensor and keeps its initial
// value (for re-initialisation, EMA shadows and variables initialised from
// another's initial value). Assign* update the buffer in place, so tensors
// read before an update alias the new values afterwards; read a Clone() to
// keep a snapshot.
//
// Thread contract: not synchronised; a variable belongs to one replica
// thread at a time.
#ifndef MIRRORTRAIN_TENSOR_VARIABLE_H_
#define MIRRORTRAIN_TENSOR_VARIABLE_H_

#include <string>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain {

class Variable {
 public:
  // Takes `initial_value` as the initial value; the variable's value is a
  // copy of it. Fails when the value is undefined.
  static absl::StatusOr<Variable> Create(std::string name,
                                         const Tensor& initial_value,
                                         bool trainable = true);
  // A variable whose initial value is `other`'s initial value (as
  // tf.Variable(other.initialized_value())), on `other`'s device.
  static absl::StatusOr<Variable> FromInitialValueOf(std::string name,
                                                     const Variable& other,
                                                     bool trainable = true);

  Variable(Variable&&) = default;
  Variable& operator=(Variable&&) = default;
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  const std::string& name() const { return name_; }
  bool trainable() const { return trainable_; }
  // Keras's `layer.trainable = False`: call before any optimizer, EMA or
  // tape has seen the variable (a layer frozen as it is built).
  void set_trainable(bool trainable) { trainable_ = trainable; }
  DType dtype() const { return value_.dtype(); }
  const Shape& shape() const { return value_.shape(); }
  Device device() const { return value_.device(); }

  // The current value. Reading a trainable variable while a GradientTape is
  // active watches it on that tape, as TensorFlow does.
  const Tensor& value() const;
  const Tensor& initial_value() const { return initial_value_; }

  // In place; `v` must have the variable's dtype and shape (any device).
  absl::Status Assign(const Tensor& v);
  absl::Status AssignAdd(const Tensor& delta);
  absl::Status AssignSub(const Tensor& delta);
  // Back to the initial value.
  absl::Status Reinitialize() { return Assign(initial_value_); }

 private:
  Variable(std::string name, Tensor initial, Tensor value, bool trainable)
      : name_(std::move(name)),
        initial_value_(std::move(initial)),
        value_(std::move(value)),
        trainable_(trainable) {}
  absl::Status CheckCompatible(const char* op, const Tensor& v) const;
  absl::Status Accumulate(const char* op, const Tensor& delta, double sign);

  std::string name_;
  Tensor initial_value_;
  Tensor value_;
  bool trainable_;
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_VARIABLE_H_
