// Gradient functions of ops, registered by op name (as TensorFlow's
// RegisterGradient). An op that has no registered gradient is not recorded,
// so a target computed through it has no gradient there (TF's None).
#ifndef MIRRORTRAIN_TENSOR_GRADIENT_REGISTRY_H_
#define MIRRORTRAIN_TENSOR_GRADIENT_REGISTRY_H_

#include <any>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace mirrortrain {

// What the tape keeps of one executed op.
struct OpRecord {
  const char* op = "";  // Static string: the registered op name.
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  // Op-specific attributes and saved intermediates (e.g. a softmax, a
  // pooling argmax), read back with std::any_cast by the gradient function.
  std::any attrs;
};

// Computes input gradients. `output_grads[i]` is the gradient of the target
// with respect to outputs[i] (zeros where the target does not depend on it).
// `needs[j]` says whether inputs[j]'s gradient is wanted; a function may skip
// unwanted ones (leave them empty) to save work.
using GradientFunction = std::function<absl::Status(
    const OpRecord& op, absl::Span<const Tensor> output_grads,
    absl::Span<const bool> needs, std::vector<std::optional<Tensor>>* grads)>;

// Returns nullptr for an unregistered op. Registration happens during static
// initialisation; lookups are thread-safe afterwards.
const GradientFunction* LookupGradient(const char* op);

struct GradientRegistrar {
  GradientRegistrar(const char* op, GradientFunction fn);
};

}  // namespace mirrortrain

// Registers `fn` as the gradient of `op`. Put it in the .cc file that defines
// the op, so the registration is linked whenever the op is.
// Variadic so a lambda with unparenthesised commas can be passed.
#define MT_REGISTER_GRADIENT(op, ...)                                   \
  static ::mirrortrain::GradientRegistrar MT_REGISTRAR_NAME_(__LINE__)( \
      op, __VA_ARGS__)
#define MT_REGISTRAR_NAME_INNER_(line) mt_gradient_registrar_##line
#define MT_REGISTRAR_NAME_(line) MT_REGISTRAR_NAME_INNER_(line)

#endif  // MIRRORTRAIN_TENSOR_GRADIENT_REGISTRY_H_
