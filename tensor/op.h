// An op's definition: its name and its gradient, declared where the op is
// implemented (its checks, CPU kernel and CUDA kernel live in the same op
// function; see tensor/cuda/cuda_kernel.h for the CUDA side):
//
//   MT_DECLARE_OP(kExpOp);      // near the top of the op's .cc file
//   ... absl::StatusOr<Tensor> Exp(x) { ...; tape::RecordOperation(kExpOp,
//                                              {x}, {y}); ... }
//   MT_OP(kExpOp, "Exp", [](const OpRecord& op, auto g, auto,
//                           Grads* grads) -> absl::Status { ... });
//
// The tape records the OpDef itself, so the gradient is found through the
// op, never by a name typed twice. An op defined with a null gradient is
// recorded all the same: differentiating through it is an error naming it
// (never a silent zero). An op whose outputs carry no gradient by nature
// (integer results) says so with MT_NOT_DIFFERENTIABLE_OP; it is not
// recorded and a target computed through it does not depend on its inputs
// (TensorFlow's NotDifferentiable).
//
// Higher-order gradients: while a tape differentiates, an outer tape
// records the ops the gradient functions run. An op whose gradient is
// built from recorded ops alone says so with MT_OP_RECORDED_GRADIENT; an
// outer tape then differentiates through it like any other computation.
// Every other op's gradient (unrecorded kernels) is recorded on the outer
// tape as one step without a gradient, so differentiating it again is an
// error naming the op, never a silent zero.
#ifndef MIRRORTRAIN_TENSOR_OP_H_
#define MIRRORTRAIN_TENSOR_OP_H_

#include <any>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/registry.h"
#include "tensor/tensor.h"

namespace mirrortrain {

struct OpDef;

// What the tape keeps of one executed op.
struct OpRecord {
  const OpDef* op = nullptr;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  // Op-specific attributes and saved intermediates (e.g. a softmax, a
  // pooling argmax), read back with std::any_cast by the gradient function.
  std::any attrs;
};

using Grads = std::vector<std::optional<Tensor>>;

// Computes input gradients. `output_grads[i]` is the gradient of the target
// with respect to outputs[i] (zeros where the target does not depend on it).
// `needs[j]` says whether inputs[j]'s gradient is wanted; a function may skip
// unwanted ones (leave them empty) to save work.
using GradientFn = absl::Status (*)(const OpRecord& op,
                                    absl::Span<const Tensor> output_grads,
                                    absl::Span<const bool> needs, Grads* grads);

struct OpDef {
  const char* name;
  GradientFn gradient = nullptr;  // Null: differentiating is an error.
  bool differentiable = true;     // False: outputs carry no gradient.
  // True: `gradient` computes only through ops that record themselves, so
  // an outer tape can differentiate it (see the file comment).
  bool gradient_recorded = false;
};

// Every defined op, for the op table test.
struct OpEntry {
  std::string name;
  const OpDef* def;
};
using OpRegistry = Registry<OpEntry>;

}  // namespace mirrortrain

// Declares an op defined later in the same namespace of the same file.
#define MT_DECLARE_OP(var) extern const ::mirrortrain::OpDef var

// Defines (constant-initialised) and registers an op. Variadic so a
// gradient lambda with unparenthesised commas can be passed.
#define MT_OP(var, name, ...)                                  \
  constinit const ::mirrortrain::OpDef var{name, __VA_ARGS__}; \
  MT_REGISTER(::mirrortrain::OpEntry, {name, &var})

// MT_OP for an op whose gradient runs recorded ops only.
#define MT_OP_RECORDED_GRADIENT(var, name, ...)                            \
  constinit const ::mirrortrain::OpDef var{name, __VA_ARGS__, true, true}; \
  MT_REGISTER(::mirrortrain::OpEntry, {name, &var})

#define MT_NOT_DIFFERENTIABLE_OP(var, name)                       \
  constinit const ::mirrortrain::OpDef var{name, nullptr, false}; \
  MT_REGISTER(::mirrortrain::OpEntry, {name, &var})

#endif  // MIRRORTRAIN_TENSOR_OP_H_
