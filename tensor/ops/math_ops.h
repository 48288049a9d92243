// Elementwise math: arithmetic with NumPy/TensorFlow broadcasting and the
// unary functions and activations. Every op returns a new tensor on its
// inputs' device and is recorded on active gradient tapes.
#ifndef MIRRORTRAIN_TENSOR_OPS_MATH_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_MATH_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/elementwise_kind.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// Broadcasting binary arithmetic (shapes aligned from the right; a dimension
// of 1 stretches). Inputs must share dtype (f32/f64) and device.
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b);
// tf.maximum, tf.minimum: NaN where either operand is; the gradient goes to
// a where a >= b (a <= b), ties included, and to b elsewhere (TensorFlow's,
// selected: an inf or NaN gradient reaches one operand); not differentiable
// twice.
absl::StatusOr<Tensor> Maximum(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Minimum(const Tensor& a, const Tensor& b);
// a * s for a host scalar s (a scalar tensor of a's dtype on a's device).
absl::StatusOr<Tensor> Scale(const Tensor& a, double s);

absl::StatusOr<Tensor> Neg(const Tensor& x);
absl::StatusOr<Tensor> Exp(const Tensor& x);
absl::StatusOr<Tensor> Log(const Tensor& x);
absl::StatusOr<Tensor> Sqrt(const Tensor& x);
absl::StatusOr<Tensor> Square(const Tensor& x);
absl::StatusOr<Tensor> Relu(const Tensor& x);
absl::StatusOr<Tensor> Sigmoid(const Tensor& x);
absl::StatusOr<Tensor> Tanh(const Tensor& x);
// x * Phi(x) with Phi the standard normal CDF (TensorFlow's gelu); with
// `approximate`, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
absl::StatusOr<Tensor> Gelu(const Tensor& x, bool approximate = false);
// x * sigmoid(x) (TensorFlow's silu, Keras's silu and swish).
absl::StatusOr<Tensor> Silu(const Tensor& x);
// tf.nn.elu: x > 0 ? x : exp(x) - 1.
absl::StatusOr<Tensor> Elu(const Tensor& x);
// tf.nn.selu: kSeluScale * (x > 0 ? x : kSeluAlpha * (exp(x) - 1)).
absl::StatusOr<Tensor> Selu(const Tensor& x);
// tf.nn.softplus: log(1 + exp(x)).
absl::StatusOr<Tensor> Softplus(const Tensor& x);
// Keras 3's leaky_relu: x > 0 ? x : 0.2 x (tf.nn.leaky_relu, alpha 0.2).
absl::StatusOr<Tensor> LeakyRelu(const Tensor& x);
// min(max(x, 0), 6) (tf.nn.relu6; its gradient passes where 0 < x < 6).
absl::StatusOr<Tensor> Relu6(const Tensor& x);

// The broadcast result shape of a and b, or an error naming `op`.
absl::StatusOr<Shape> BroadcastShape(const char* op, const Tensor& a,
                                     const Tensor& b);

namespace internal {
// Broadcast layout of `in` against the (broadcast) shape `out`: element
// strides per dimension of `out`, 0 where `in` is stretched.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);
// Unrecorded elementwise kernels, for gradient functions.
absl::StatusOr<Tensor> UnaryKernel(const char* op, UnaryKind kind,
                                   const Tensor& x);
absl::StatusOr<Tensor> BinaryKernel(const char* op, BinaryKind kind,
                                    const Tensor& a, const Tensor& b);
// A scalar of `like`'s dtype on its device.
absl::StatusOr<Tensor> ScalarLike(const Tensor& like, double value);
}  // namespace internal

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_MATH_OPS_H_
