// The elementwise functions as device code, shared by the same-shape kernels
// (elementwise_kernels.cu) and the broadcasting ones (broadcast_kernels.cu);
// they mirror the CPU kernels in tensor/ops/math_ops.cc. Only for files
// compiled by nvcc.
#ifndef MIRRORTRAIN_TENSOR_CUDA_ELEMENTWISE_APPLY_H_
#define MIRRORTRAIN_TENSOR_CUDA_ELEMENTWISE_APPLY_H_

#include <cuda_runtime.h>

#include "tensor/elementwise_kind.h"

namespace mirrortrain::cuda {

template <typename T>
__device__ inline T ApplyUnary(UnaryKind kind, T x) {
  switch (kind) {
    case UnaryKind::kNeg:
      return -x;
    case UnaryKind::kExp:
      return exp(x);
    case UnaryKind::kLog:
      return log(x);
    case UnaryKind::kSqrt:
      return sqrt(x);
    case UnaryKind::kSquare:
      return x * x;
    case UnaryKind::kRelu:
      return x > T(0) ? x : T(0);
    case UnaryKind::kSigmoid:
      return T(1) / (T(1) + exp(-x));
    case UnaryKind::kTanh:
      return tanh(x);
  }
  return x;
}

template <typename T>
__device__ inline T ApplyBinary(BinaryKind kind, T a, T b) {
  switch (kind) {
    case BinaryKind::kAdd:
      return a + b;
    case BinaryKind::kSub:
      return a - b;
    case BinaryKind::kMul:
      return a * b;
    case BinaryKind::kDiv:
      return a / b;
    case BinaryKind::kReluGrad:
      return b > T(0) ? a : T(0);
    case BinaryKind::kSigmoidGrad:
      return a * b * (T(1) - b);
    case BinaryKind::kTanhGrad:
      return a * (T(1) - b * b);
  }
  return a;
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_ELEMENTWISE_APPLY_H_
