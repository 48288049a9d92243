#include "tensor/ops/math_ops.h"

#include <cmath>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"
#include "tensor/vector_clones.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kAddOp);
MT_DECLARE_OP(kSubOp);
MT_DECLARE_OP(kMulOp);
MT_DECLARE_OP(kDivOp);
MT_DECLARE_OP(kMaximumOp);
MT_DECLARE_OP(kMinimumOp);
MT_DECLARE_OP(kNegOp);
MT_DECLARE_OP(kExpOp);
MT_DECLARE_OP(kLogOp);
MT_DECLARE_OP(kSqrtOp);
MT_DECLARE_OP(kSquareOp);
MT_DECLARE_OP(kReluOp);
MT_DECLARE_OP(kSigmoidOp);
MT_DECLARE_OP(kTanhOp);
MT_DECLARE_OP(kGeluOp);
MT_DECLARE_OP(kSiluOp);
MT_DECLARE_OP(kEluOp);
MT_DECLARE_OP(kSeluOp);
MT_DECLARE_OP(kSoftplusOp);
MT_DECLARE_OP(kLeakyReluOp);
MT_DECLARE_OP(kRelu6Op);
}  // namespace
namespace {

// Elementwise loops split over threads above this many elements.
constexpr int64_t kParallelGrain = 1 << 15;

template <typename T, UnaryKind K>
MT_VECTOR_CLONES void UnaryRange(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ApplyUnary(K, x[i]);
}

template <typename T, UnaryKind K>
void CpuUnaryOf(const T* x, T* y, int64_t n) {
  ParallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    UnaryRange<T, K>(x + begin, y + begin, end - begin);
  });
}

template <typename T>
void CpuUnary(UnaryKind kind, const T* x, T* y, int64_t n) {
  // One instantiation per kind keeps the switch out of the loop, so each
  // loop vectorises.
  switch (kind) {
    case UnaryKind::kNeg:
      return CpuUnaryOf<T, UnaryKind::kNeg>(x, y, n);
    case UnaryKind::kExp:
      return CpuUnaryOf<T, UnaryKind::kExp>(x, y, n);
    case UnaryKind::kLog:
      return CpuUnaryOf<T, UnaryKind::kLog>(x, y, n);
    case UnaryKind::kSqrt:
      return CpuUnaryOf<T, UnaryKind::kSqrt>(x, y, n);
    case UnaryKind::kSquare:
      return CpuUnaryOf<T, UnaryKind::kSquare>(x, y, n);
    case UnaryKind::kRelu:
      return CpuUnaryOf<T, UnaryKind::kRelu>(x, y, n);
    case UnaryKind::kSigmoid:
      return CpuUnaryOf<T, UnaryKind::kSigmoid>(x, y, n);
    case UnaryKind::kTanh:
      return CpuUnaryOf<T, UnaryKind::kTanh>(x, y, n);
    case UnaryKind::kGelu:
      return CpuUnaryOf<T, UnaryKind::kGelu>(x, y, n);
    case UnaryKind::kGeluTanh:
      return CpuUnaryOf<T, UnaryKind::kGeluTanh>(x, y, n);
    case UnaryKind::kSilu:
      return CpuUnaryOf<T, UnaryKind::kSilu>(x, y, n);
    case UnaryKind::kElu:
      return CpuUnaryOf<T, UnaryKind::kElu>(x, y, n);
    case UnaryKind::kSelu:
      return CpuUnaryOf<T, UnaryKind::kSelu>(x, y, n);
    case UnaryKind::kSoftplus:
      return CpuUnaryOf<T, UnaryKind::kSoftplus>(x, y, n);
    case UnaryKind::kLeakyRelu:
      return CpuUnaryOf<T, UnaryKind::kLeakyRelu>(x, y, n);
    case UnaryKind::kRelu6:
      return CpuUnaryOf<T, UnaryKind::kRelu6>(x, y, n);
  }
}

using internal::BroadcastStrides;

template <typename T, BinaryKind K>
MT_VECTOR_CLONES void BinaryRange(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ApplyBinary(K, a[i], b[i]);
}

// One instantiation per kind: the switch in ApplyBinary folds away, so each
// loop vectorises.
template <typename T, BinaryKind K>
void BinaryLoop(const Tensor& a, const Tensor& b, Tensor& out) {
  const auto f = [](T x, T y) { return ApplyBinary(K, x, y); };
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const int64_t n = out.num_elements();
  if (n == 0) return;
  if (a.shape() == b.shape()) {
    ParallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      BinaryRange<T, K>(pa + begin, pb + begin, po + begin, end - begin);
    });
    return;
  }
  if (b.num_elements() == 1) {
    const T vb = pb[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    return;
  }
  if (a.num_elements() == 1) {
    const T va = pa[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
    return;
  }
  // General case: walk the output row by row (last dimension innermost).
  const Shape& shape = out.shape();
  const int rank = static_cast<int>(shape.size());
  std::vector<int64_t> sa = BroadcastStrides(a.shape(), shape);
  std::vector<int64_t> sb = BroadcastStrides(b.shape(), shape);
  const int64_t inner = shape[rank - 1];
  const int64_t ia = sa[rank - 1], ib = sb[rank - 1];
  std::vector<int64_t> counter(rank, 0);
  int64_t off_a = 0, off_b = 0;
  for (int64_t row = 0; row < n / inner; ++row) {
    T* dst = po + row * inner;
    if (ia == 1 && ib == 1) {
      for (int64_t i = 0; i < inner; ++i)
        dst[i] = f(pa[off_a + i], pb[off_b + i]);
    } else if (ia == 1) {
      const T vb = pb[off_b];
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(pa[off_a + i], vb);
    } else if (ib == 1) {
      const T va = pa[off_a];
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(va, pb[off_b + i]);
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(pa[off_a], pb[off_b]);
    }
    // Advance the multi-index over the outer dimensions.
    for (int d = rank - 2; d >= 0; --d) {
      ++counter[d];
      off_a += sa[d];
      off_b += sb[d];
      if (counter[d] < shape[d]) break;
      off_a -= sa[d] * shape[d];
      off_b -= sb[d] * shape[d];
      counter[d] = 0;
    }
  }
}

template <typename T>
void CpuBinary(BinaryKind kind, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (kind) {
    case BinaryKind::kAdd:
      return BinaryLoop<T, BinaryKind::kAdd>(a, b, out);
    case BinaryKind::kSub:
      return BinaryLoop<T, BinaryKind::kSub>(a, b, out);
    case BinaryKind::kMul:
      return BinaryLoop<T, BinaryKind::kMul>(a, b, out);
    case BinaryKind::kDiv:
      return BinaryLoop<T, BinaryKind::kDiv>(a, b, out);
    case BinaryKind::kReluGrad:
      return BinaryLoop<T, BinaryKind::kReluGrad>(a, b, out);
    case BinaryKind::kSigmoidGrad:
      return BinaryLoop<T, BinaryKind::kSigmoidGrad>(a, b, out);
    case BinaryKind::kTanhGrad:
      return BinaryLoop<T, BinaryKind::kTanhGrad>(a, b, out);
    case BinaryKind::kGeluGrad:
      return BinaryLoop<T, BinaryKind::kGeluGrad>(a, b, out);
    case BinaryKind::kGeluTanhGrad:
      return BinaryLoop<T, BinaryKind::kGeluTanhGrad>(a, b, out);
    case BinaryKind::kSiluGrad:
      return BinaryLoop<T, BinaryKind::kSiluGrad>(a, b, out);
    case BinaryKind::kEluGrad:
      return BinaryLoop<T, BinaryKind::kEluGrad>(a, b, out);
    case BinaryKind::kSeluGrad:
      return BinaryLoop<T, BinaryKind::kSeluGrad>(a, b, out);
    case BinaryKind::kSoftplusGrad:
      return BinaryLoop<T, BinaryKind::kSoftplusGrad>(a, b, out);
    case BinaryKind::kLeakyReluGrad:
      return BinaryLoop<T, BinaryKind::kLeakyReluGrad>(a, b, out);
    case BinaryKind::kRelu6Grad:
      return BinaryLoop<T, BinaryKind::kRelu6Grad>(a, b, out);
    case BinaryKind::kMaximum:
      return BinaryLoop<T, BinaryKind::kMaximum>(a, b, out);
    case BinaryKind::kMinimum:
      return BinaryLoop<T, BinaryKind::kMinimum>(a, b, out);
    case BinaryKind::kGreaterEqual:
      return BinaryLoop<T, BinaryKind::kGreaterEqual>(a, b, out);
    case BinaryKind::kLessEqual:
      return BinaryLoop<T, BinaryKind::kLessEqual>(a, b, out);
    case BinaryKind::kNotEqual:
      return BinaryLoop<T, BinaryKind::kNotEqual>(a, b, out);
  }
}

const OpDef& UnaryOp(UnaryKind kind) {
  switch (kind) {
    case UnaryKind::kNeg:
      return kNegOp;
    case UnaryKind::kExp:
      return kExpOp;
    case UnaryKind::kLog:
      return kLogOp;
    case UnaryKind::kSqrt:
      return kSqrtOp;
    case UnaryKind::kSquare:
      return kSquareOp;
    case UnaryKind::kRelu:
      return kReluOp;
    case UnaryKind::kSigmoid:
      return kSigmoidOp;
    case UnaryKind::kTanh:
      return kTanhOp;
    case UnaryKind::kGelu:
    case UnaryKind::kGeluTanh:
      return kGeluOp;
    case UnaryKind::kSilu:
      return kSiluOp;
    case UnaryKind::kElu:
      return kEluOp;
    case UnaryKind::kSelu:
      return kSeluOp;
    case UnaryKind::kSoftplus:
      return kSoftplusOp;
    case UnaryKind::kLeakyRelu:
      return kLeakyReluOp;
    case UnaryKind::kRelu6:
      return kRelu6Op;
  }
  return kNegOp;
}

absl::StatusOr<Tensor> RecordedUnary(UnaryKind kind, const Tensor& x) {
  const OpDef& op = UnaryOp(kind);
  MT_ASSIGN_OR_RETURN(Tensor y, internal::UnaryKernel(op.name, kind, x));
  tape::RecordOperation(op, {x}, {y});
  return y;
}

absl::StatusOr<Tensor> RecordedBinary(const OpDef& op, BinaryKind kind,
                                      const Tensor& a, const Tensor& b) {
  MT_ASSIGN_OR_RETURN(Tensor y, internal::BinaryKernel(op.name, kind, a, b));
  tape::RecordOperation(op, {a, b}, {y});
  return y;
}

}  // namespace

absl::StatusOr<Shape> BroadcastShape(const char* op, const Tensor& a,
                                     const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  size_t rank = std::max(sa.size(), sb.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - sa.size() ? 1 : sa[i - (rank - sa.size())];
    int64_t db = i < rank - sb.size() ? 1 : sb[i - (rank - sb.size())];
    if (da != db && da != 1 && db != 1) {
      return ops::internal::OpError(op, "shapes are not broadcastable",
                                    {&a, &b});
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace internal {

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  std::vector<int64_t> in_strides = RowMajorStrides(in);
  size_t offset = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    strides[offset + i] = in[i] == 1 ? 0 : in_strides[i];
  }
  return strides;
}

absl::StatusOr<Tensor> UnaryKernel(const char* op, UnaryKind kind,
                                   const Tensor& x) {
  MT_RETURN_IF_ERROR(CheckFloatingSame(op, {&x}));
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(cuda::Unary(kind, x.dtype(), x.raw_data(), y.raw_data(),
                                   x.num_elements(), x.device().index));
    return y;
  }
  MT_DISPATCH_FLOAT(
      x.dtype(), T,
      CpuUnary<T>(kind, x.data<T>(), y.data<T>(), x.num_elements()));
  return y;
}

absl::StatusOr<Tensor> BinaryKernel(const char* op, BinaryKind kind,
                                    const Tensor& a, const Tensor& b) {
  MT_RETURN_IF_ERROR(CheckFloatingSame(op, {&a, &b}));
  MT_ASSIGN_OR_RETURN(Shape shape, BroadcastShape(op, a, b));
  MT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(a.dtype(), shape, a.device()));
  if (a.device().is_cuda()) {
    if (a.shape() == b.shape()) {
      MT_RETURN_IF_ERROR(cuda::Binary(kind, a.dtype(), a.raw_data(),
                                      b.raw_data(), out.raw_data(),
                                      out.num_elements(), a.device().index));
      return out;
    }
    absl::Status status = cuda::BroadcastBinary(
        kind, a.dtype(), a.raw_data(), BroadcastStrides(a.shape(), shape),
        b.raw_data(), BroadcastStrides(b.shape(), shape), out.raw_data(), shape,
        a.device().index);
    if (!status.ok()) return KernelError(op, status, {&a, &b});
    return out;
  }
  MT_DISPATCH_FLOAT(a.dtype(), T, CpuBinary<T>(kind, a, b, out));
  return out;
}

absl::StatusOr<Tensor> ScalarLike(const Tensor& like, double value) {
  return Fill(like.dtype(), {}, value, like.device());
}

}  // namespace internal

absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b) {
  return RecordedBinary(kAddOp, BinaryKind::kAdd, a, b);
}
absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b) {
  return RecordedBinary(kSubOp, BinaryKind::kSub, a, b);
}
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) {
  return RecordedBinary(kMulOp, BinaryKind::kMul, a, b);
}
absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b) {
  return RecordedBinary(kDivOp, BinaryKind::kDiv, a, b);
}
absl::StatusOr<Tensor> Maximum(const Tensor& a, const Tensor& b) {
  return RecordedBinary(kMaximumOp, BinaryKind::kMaximum, a, b);
}
absl::StatusOr<Tensor> Minimum(const Tensor& a, const Tensor& b) {
  return RecordedBinary(kMinimumOp, BinaryKind::kMinimum, a, b);
}
absl::StatusOr<Tensor> Scale(const Tensor& a, double s) {
  MT_RETURN_IF_ERROR(internal::CheckDefined("Scale", {&a}));
  MT_ASSIGN_OR_RETURN(Tensor scalar, internal::ScalarLike(a, s));
  return Mul(a, scalar);
}

absl::StatusOr<Tensor> Neg(const Tensor& x) {
  return RecordedUnary(UnaryKind::kNeg, x);
}
absl::StatusOr<Tensor> Exp(const Tensor& x) {
  return RecordedUnary(UnaryKind::kExp, x);
}
absl::StatusOr<Tensor> Log(const Tensor& x) {
  return RecordedUnary(UnaryKind::kLog, x);
}
absl::StatusOr<Tensor> Sqrt(const Tensor& x) {
  return RecordedUnary(UnaryKind::kSqrt, x);
}
absl::StatusOr<Tensor> Square(const Tensor& x) {
  return RecordedUnary(UnaryKind::kSquare, x);
}
absl::StatusOr<Tensor> Relu(const Tensor& x) {
  return RecordedUnary(UnaryKind::kRelu, x);
}
absl::StatusOr<Tensor> Sigmoid(const Tensor& x) {
  return RecordedUnary(UnaryKind::kSigmoid, x);
}
absl::StatusOr<Tensor> Tanh(const Tensor& x) {
  return RecordedUnary(UnaryKind::kTanh, x);
}
absl::StatusOr<Tensor> Silu(const Tensor& x) {
  return RecordedUnary(UnaryKind::kSilu, x);
}
absl::StatusOr<Tensor> Elu(const Tensor& x) {
  return RecordedUnary(UnaryKind::kElu, x);
}
absl::StatusOr<Tensor> Selu(const Tensor& x) {
  return RecordedUnary(UnaryKind::kSelu, x);
}
absl::StatusOr<Tensor> Softplus(const Tensor& x) {
  return RecordedUnary(UnaryKind::kSoftplus, x);
}
absl::StatusOr<Tensor> LeakyRelu(const Tensor& x) {
  return RecordedUnary(UnaryKind::kLeakyRelu, x);
}
absl::StatusOr<Tensor> Relu6(const Tensor& x) {
  return RecordedUnary(UnaryKind::kRelu6, x);
}
absl::StatusOr<Tensor> Gelu(const Tensor& x, bool approximate) {
  MT_ASSIGN_OR_RETURN(
      Tensor y,
      internal::UnaryKernel(
          "Gelu", approximate ? UnaryKind::kGeluTanh : UnaryKind::kGelu, x));
  tape::RecordOperation(kGeluOp, {x}, {y}, approximate);
  return y;
}

// ---------------------------------------------------------------- gradients

namespace {

// Sets grads[i] = SumToShape(value, inputs[i].shape) when needed.
absl::Status SetReduced(const OpRecord& op, absl::Span<const bool> needs, int i,
                        absl::StatusOr<Tensor> value, Grads* grads) {
  if (!needs[i]) return absl::OkStatus();
  MT_RETURN_IF_ERROR(value.status());
  MT_ASSIGN_OR_RETURN((*grads)[i], SumToShape(*value, op.inputs[i].shape()));
  return absl::OkStatus();
}

MT_OP_RECORDED_GRADIENT(kAddOp, "Add",
                        [](const OpRecord& op, auto g, auto needs,
                           Grads* grads) -> absl::Status {
                          MT_RETURN_IF_ERROR(
                              SetReduced(op, needs, 0, g[0], grads));
                          return SetReduced(op, needs, 1, g[0], grads);
                        });

MT_OP_RECORDED_GRADIENT(kSubOp, "Sub",
                        [](const OpRecord& op, auto g, auto needs,
                           Grads* grads) -> absl::Status {
                          MT_RETURN_IF_ERROR(
                              SetReduced(op, needs, 0, g[0], grads));
                          if (!needs[1]) return absl::OkStatus();
                          return SetReduced(op, needs, 1, Neg(g[0]), grads);
                        });

MT_OP_RECORDED_GRADIENT(kMulOp, "Mul",
                        [](const OpRecord& op, auto g, auto needs,
                           Grads* grads) -> absl::Status {
                          if (needs[0]) {
                            MT_RETURN_IF_ERROR(SetReduced(
                                op, needs, 0, Mul(g[0], op.inputs[1]), grads));
                          }
                          if (needs[1]) {
                            MT_RETURN_IF_ERROR(SetReduced(
                                op, needs, 1, Mul(g[0], op.inputs[0]), grads));
                          }
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(
    kDivOp, "Div",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      const Tensor& b = op.inputs[1];
      if (needs[0])
        MT_RETURN_IF_ERROR(SetReduced(op, needs, 0, Div(g[0], b), grads));
      if (needs[1]) {
        // d(a/b)/db = -(a/b)/b = -y/b.
        MT_ASSIGN_OR_RETURN(Tensor gy, Mul(g[0], op.outputs[0]));
        MT_ASSIGN_OR_RETURN(Tensor gyb, Div(gy, b));
        MT_RETURN_IF_ERROR(SetReduced(op, needs, 1, Neg(gyb), grads));
      }
      return absl::OkStatus();
    });

// TensorFlow's MaximumGrad and MinimumGrad: the gradient goes to a where
// `mask` (a >= b, a <= b: a tie goes to a; a NaN operand to b) and to b
// elsewhere, selected as tf.where selects (an inf or NaN gradient reaches
// only the operand it is selected for). The selections are ReluGrad's
// kernel (g where the 0/1 mask is above 0), unrecorded.
template <BinaryKind mask>
absl::Status SelectedGrads(const OpRecord& op, const Tensor& g,
                           absl::Span<const bool> needs, Grads* grads) {
  const char* name = op.op->name;
  MT_ASSIGN_OR_RETURN(
      Tensor m, internal::BinaryKernel(name, mask, op.inputs[0], op.inputs[1]));
  if (needs[0]) {
    MT_RETURN_IF_ERROR(SetReduced(
        op, needs, 0, internal::BinaryKernel(name, BinaryKind::kReluGrad, g, m),
        grads));
  }
  if (!needs[1]) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(const Tensor one, internal::ScalarLike(m, 1));
  MT_ASSIGN_OR_RETURN(m,
                      internal::BinaryKernel(name, BinaryKind::kSub, one, m));
  return SetReduced(op, needs, 1,
                    internal::BinaryKernel(name, BinaryKind::kReluGrad, g, m),
                    grads);
}

MT_OP(kMaximumOp, "Maximum",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) {
        return SelectedGrads<BinaryKind::kGreaterEqual>(op, g[0], needs, grads);
      });

MT_OP(kMinimumOp, "Minimum",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) {
        return SelectedGrads<BinaryKind::kLessEqual>(op, g[0], needs, grads);
      });

MT_OP_RECORDED_GRADIENT(kNegOp, "Neg",
                        [](const OpRecord&, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN((*grads)[0], Neg(g[0]));
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(kExpOp, "Exp",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN((*grads)[0],
                                              Mul(g[0], op.outputs[0]));
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(kLogOp, "Log",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN((*grads)[0],
                                              Div(g[0], op.inputs[0]));
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(kSqrtOp, "Sqrt",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN(Tensor half_g, Scale(g[0], 0.5));
                          MT_ASSIGN_OR_RETURN((*grads)[0],
                                              Div(half_g, op.outputs[0]));
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(kSquareOp, "Square",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN(Tensor two_x,
                                              Scale(op.inputs[0], 2.0));
                          MT_ASSIGN_OR_RETURN((*grads)[0], Mul(g[0], two_x));
                          return absl::OkStatus();
                        });

// The activation gradients use fused kernels of (g, y), which are not
// recorded: second derivatives through them are not available.
template <BinaryKind kKind>
absl::Status ActivationGrad(const OpRecord& rec, absl::Span<const Tensor> g,
                            absl::Span<const bool>, Grads* grads) {
  MT_ASSIGN_OR_RETURN(
      (*grads)[0],
      internal::BinaryKernel(rec.op->name, kKind, g[0], rec.outputs[0]));
  return absl::OkStatus();
}
MT_OP(kReluOp, "Relu", ActivationGrad<BinaryKind::kReluGrad>);
MT_OP(kSigmoidOp, "Sigmoid", ActivationGrad<BinaryKind::kSigmoidGrad>);
MT_OP(kTanhOp, "Tanh", ActivationGrad<BinaryKind::kTanhGrad>);
// Gelu's derivative needs x, not y: one fused kernel of (g, x).
MT_OP(kGeluOp, "Gelu",
      [](const OpRecord& rec, auto g, auto, Grads* grads) -> absl::Status {
        const bool approximate = std::any_cast<bool>(rec.attrs);
        MT_ASSIGN_OR_RETURN(
            (*grads)[0],
            internal::BinaryKernel(
                "GeluGrad",
                approximate ? BinaryKind::kGeluTanhGrad : BinaryKind::kGeluGrad,
                g[0], rec.inputs[0]));
        return absl::OkStatus();
      });
// Silu's too, and the others below: one kernel of (g, x).
template <BinaryKind kKind>
absl::Status InputActivationGrad(const OpRecord& rec,
                                 absl::Span<const Tensor> g,
                                 absl::Span<const bool>, Grads* grads) {
  MT_ASSIGN_OR_RETURN((*grads)[0], internal::BinaryKernel(rec.op->name, kKind,
                                                          g[0], rec.inputs[0]));
  return absl::OkStatus();
}
MT_OP(kSiluOp, "Silu", InputActivationGrad<BinaryKind::kSiluGrad>);
MT_OP(kEluOp, "Elu", InputActivationGrad<BinaryKind::kEluGrad>);
MT_OP(kSeluOp, "Selu", InputActivationGrad<BinaryKind::kSeluGrad>);
MT_OP(kSoftplusOp, "Softplus", InputActivationGrad<BinaryKind::kSoftplusGrad>);
MT_OP(kLeakyReluOp, "LeakyRelu",
      InputActivationGrad<BinaryKind::kLeakyReluGrad>);
MT_OP(kRelu6Op, "Relu6", InputActivationGrad<BinaryKind::kRelu6Grad>);

}  // namespace
}  // namespace mirrortrain::ops
