// The elementwise functions shared by the CPU kernels and their CUDA twins.
#ifndef MIRRORTRAIN_TENSOR_ELEMENTWISE_KIND_H_
#define MIRRORTRAIN_TENSOR_ELEMENTWISE_KIND_H_

#include <cstdint>

namespace mirrortrain {

enum class UnaryKind : uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kSquare,
  kRelu,
  kSigmoid,
  kTanh,
};

// Binary functions of two same-shaped operands. The *Grad kinds take
// (upstream gradient, forward output) and give the input gradient.
enum class BinaryKind : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kReluGrad,     // g * (y > 0)
  kSigmoidGrad,  // g * y * (1 - y)
  kTanhGrad,     // g * (1 - y^2)
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_ELEMENTWISE_KIND_H_
