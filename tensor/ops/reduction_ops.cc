#include "tensor/ops/reduction_ops.h"

#include <algorithm>
#include <limits>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kReduceSumOp);
MT_DECLARE_OP(kL2LossOp);
MT_DECLARE_OP(kBroadcastToOp);
}  // namespace
namespace {

using internal::CheckFloatingSame;
using internal::KernelError;

struct ReduceAttrs {
  Shape keep_shape;  // Output shape with reduced dims kept as 1.
};

// Collapses runs of adjacent dims that are all reduced or all kept, so the
// loops below see at most a handful of dims.
void Collapse(const Shape& shape, const std::vector<bool>& reduced, Shape* dims,
              std::vector<bool>* red) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;  // Size-1 dims never matter.
    if (!dims->empty() && red->back() == reduced[i]) {
      dims->back() *= shape[i];
    } else {
      dims->push_back(shape[i]);
      red->push_back(reduced[i]);
    }
  }
}

template <typename T>
void CpuReduceSum(const Tensor& x, const std::vector<bool>& reduced,
                  Tensor& out) {
  T* po = out.data<T>();
  const T* px = x.data<T>();
  std::fill_n(po, out.num_elements(), T(0));
  Shape dims;
  std::vector<bool> red;
  Collapse(x.shape(), reduced, &dims, &red);
  if (x.num_elements() == 0) return;
  if (dims.empty()) {
    po[0] = px[0];
    return;
  }
  if (dims.size() == 1) {
    if (!red[0]) {
      std::copy_n(px, dims[0], po);
    } else {
      T acc = 0;
      for (int64_t i = 0; i < dims[0]; ++i) acc += px[i];
      po[0] = acc;
    }
    return;
  }
  if (dims.size() == 2 && red[0]) {  // [R, K] -> [K]: sum rows.
    for (int64_t r = 0; r < dims[0]; ++r) {
      const T* row = px + r * dims[1];
      for (int64_t k = 0; k < dims[1]; ++k) po[k] += row[k];
    }
    return;
  }
  if (dims.size() == 2 && red[1]) {  // [K, R] -> [K]: sum within rows.
    for (int64_t k = 0; k < dims[0]; ++k) {
      const T* row = px + k * dims[1];
      T acc = 0;
      for (int64_t r = 0; r < dims[1]; ++r) acc += row[r];
      po[k] = acc;
    }
    return;
  }
  // General: output strides over the collapsed dims, 0 on reduced ones.
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> out_strides(rank, 0);
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (!red[d]) {
      out_strides[d] = s;
      s *= dims[d];
    }
  }
  std::vector<int64_t> counter(rank, 0);
  int64_t off = 0;
  const int64_t inner = dims[rank - 1];
  const int64_t inner_stride = out_strides[rank - 1];
  for (int64_t base = 0; base < x.num_elements(); base += inner) {
    if (inner_stride == 0) {
      T acc = 0;
      for (int64_t i = 0; i < inner; ++i) acc += px[base + i];
      po[off] += acc;
    } else {
      for (int64_t i = 0; i < inner; ++i) po[off + i] += px[base + i];
    }
    for (int d = rank - 2; d >= 0; --d) {
      ++counter[d];
      off += out_strides[d];
      if (counter[d] < dims[d]) break;
      off -= out_strides[d] * dims[d];
      counter[d] = 0;
    }
  }
}

absl::StatusOr<std::vector<bool>> ReducedMask(const char* op, const Tensor& x,
                                              const std::vector<int>& axes) {
  std::vector<bool> reduced(x.rank(), axes.empty());
  for (int a : axes) {
    MT_ASSIGN_OR_RETURN(int axis, internal::NormalizeAxis(op, a, x.rank()));
    if (reduced[axis]) {
      return internal::OpError(op, absl::StrCat("axis ", a, " repeated"), {&x});
    }
    reduced[axis] = true;
  }
  return reduced;
}

template <typename T>
void CpuBroadcastTo(const Tensor& x, Tensor& out) {
  const Shape& shape = out.shape();
  const int rank = static_cast<int>(shape.size());
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const int64_t n = out.num_elements();
  if (n == 0) return;
  if (rank == 0 || x.num_elements() == 1) {
    std::fill_n(po, n, px[0]);
    return;
  }
  std::vector<int64_t> strides(rank, 0);
  std::vector<int64_t> xs = RowMajorStrides(x.shape());
  size_t offset = rank - x.rank();
  for (int i = 0; i < x.rank(); ++i) {
    strides[offset + i] = x.dim(i) == 1 ? 0 : xs[i];
  }
  std::vector<int64_t> counter(rank, 0);
  int64_t off = 0;
  const int64_t inner = shape[rank - 1];
  const int64_t is = strides[rank - 1];
  for (int64_t base = 0; base < n; base += inner) {
    for (int64_t i = 0; i < inner; ++i) po[base + i] = px[off + i * is];
    for (int d = rank - 2; d >= 0; --d) {
      ++counter[d];
      off += strides[d];
      if (counter[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      counter[d] = 0;
    }
  }
}

// The dims of x split into kept (the output, in order) and reduced ones,
// each with x's strides: the layout the CUDA reduction walks.
struct SplitDims {
  Shape kept_shape, kept_strides, reduced_shape, reduced_strides;
};
SplitDims Split(const Tensor& x, const std::vector<bool>& reduced) {
  SplitDims s;
  std::vector<int64_t> strides = RowMajorStrides(x.shape());
  for (int i = 0; i < x.rank(); ++i) {
    (reduced[i] ? s.reduced_shape : s.kept_shape).push_back(x.dim(i));
    (reduced[i] ? s.reduced_strides : s.kept_strides).push_back(strides[i]);
  }
  return s;
}

absl::Status GpuReduce(const char* op, cuda::ReduceKind kind, const Tensor& x,
                       const std::vector<bool>& reduced, double scale,
                       Tensor& out) {
  SplitDims s = Split(x, reduced);
  return KernelError(
      op,
      cuda::Reduce(kind, x.dtype(), x.raw_data(), s.kept_shape, s.kept_strides,
                   s.reduced_shape, s.reduced_strides, scale, out.dtype(),
                   out.raw_data(), x.device().index),
      {&x});
}

}  // namespace

absl::StatusOr<Tensor> ReduceSum(const Tensor& x, std::vector<int> axes,
                                 bool keepdims) {
  constexpr const char* kOp = "ReduceSum";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&x}));
  MT_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedMask(kOp, x, axes));
  Shape keep_shape, out_shape;
  for (int i = 0; i < x.rank(); ++i) {
    keep_shape.push_back(reduced[i] ? 1 : x.dim(i));
    if (!reduced[i] || keepdims) out_shape.push_back(keep_shape.back());
  }
  MT_ASSIGN_OR_RETURN(Tensor out,
                      Tensor::Empty(x.dtype(), out_shape, x.device()));
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(
        GpuReduce(kOp, cuda::ReduceKind::kSum, x, reduced, 1.0, out));
  } else {
    MT_DISPATCH_FLOAT(x.dtype(), T, CpuReduceSum<T>(x, reduced, out));
  }
  tape::RecordOperation(kReduceSumOp, {x}, {out}, ReduceAttrs{keep_shape});
  return out;
}

absl::StatusOr<Tensor> ReduceMean(const Tensor& x, std::vector<int> axes,
                                  bool keepdims) {
  MT_ASSIGN_OR_RETURN(Tensor sum, ReduceSum(x, axes, keepdims));
  const int64_t count =
      sum.num_elements() == 0
          ? 0
          : x.num_elements() / std::max<int64_t>(sum.num_elements(), 1);
  // count 0 with sums to fill: each is a mean of nothing, 0 / 0.
  return Scale(sum, count == 0 ? std::numeric_limits<double>::quiet_NaN()
                               : 1.0 / static_cast<double>(count));
}

absl::StatusOr<Tensor> L2Loss(const Tensor& x) {
  MT_RETURN_IF_ERROR(CheckFloatingSame("L2Loss", {&x}));
  if (x.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(x.dtype(), {}, x.device()));
    MT_RETURN_IF_ERROR(GpuReduce("L2Loss", cuda::ReduceKind::kSumOfSquares, x,
                                 std::vector<bool>(x.rank(), true), 0.5, out));
    tape::RecordOperation(kL2LossOp, {x}, {out});
    return out;
  }
  Tensor out = Tensor::HostEmpty(x.dtype(), {});
  MT_DISPATCH_FLOAT(x.dtype(), T, {
    const T* p = x.data<T>();
    T acc = 0;
    for (int64_t i = 0; i < x.num_elements(); ++i) acc += p[i] * p[i];
    out.data<T>()[0] = acc / T(2);
  });
  tape::RecordOperation(kL2LossOp, {x}, {out});
  return out;
}

absl::StatusOr<Tensor> BroadcastTo(const Tensor& x, const Shape& shape) {
  constexpr const char* kOp = "BroadcastTo";
  MT_RETURN_IF_ERROR(internal::CheckDefined(kOp, {&x}));
  MT_ASSIGN_OR_RETURN(Tensor target_like,
                      Tensor::Empty(x.dtype(), shape, x.device()));
  MT_ASSIGN_OR_RETURN(Shape result, BroadcastShape(kOp, x, target_like));
  if (result != shape) {
    return internal::OpError(
        kOp, absl::StrCat("cannot broadcast to ", ShapeToString(shape)), {&x});
  }
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        kOp,
        cuda::StridedCopy(DTypeSize(x.dtype()), shape, x.raw_data(), 0,
                          internal::BroadcastStrides(x.shape(), shape),
                          target_like.raw_data(), 0, RowMajorStrides(shape),
                          x.device().index),
        {&x}));
  } else {
    MT_DISPATCH_ALL(x.dtype(), T, CpuBroadcastTo<T>(x, target_like));
  }
  tape::RecordOperation(kBroadcastToOp, {x}, {target_like});
  return target_like;
}

absl::StatusOr<Tensor> SumToShape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int rank = g.rank();
  const int offset = rank - static_cast<int>(shape.size());
  if (offset < 0) {
    return internal::OpError(
        "SumToShape", absl::StrCat("cannot sum to ", ShapeToString(shape)),
        {&g});
  }
  std::vector<int> axes;
  for (int i = 0; i < rank; ++i) {
    if (i < offset || (shape[i - offset] == 1 && g.dim(i) != 1)) {
      axes.push_back(i);
    }
  }
  if (axes.empty()) return Reshape(g, shape);
  MT_ASSIGN_OR_RETURN(Tensor sum, ReduceSum(g, axes, /*keepdims=*/true));
  return Reshape(sum, shape);
}

namespace {

MT_OP_RECORDED_GRADIENT(
    kReduceSumOp, "ReduceSum",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      const auto& attrs = std::any_cast<const ReduceAttrs&>(op.attrs);
      MT_ASSIGN_OR_RETURN(Tensor kept, Reshape(g[0], attrs.keep_shape));
      MT_ASSIGN_OR_RETURN((*grads)[0], BroadcastTo(kept, op.inputs[0].shape()));
      return absl::OkStatus();
    });

MT_OP_RECORDED_GRADIENT(kL2LossOp, "L2Loss",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN((*grads)[0],
                                              Mul(op.inputs[0], g[0]));
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(
    kBroadcastToOp, "BroadcastTo",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      MT_ASSIGN_OR_RETURN((*grads)[0], SumToShape(g[0], op.inputs[0].shape()));
      return absl::OkStatus();
    });

}  // namespace
}  // namespace mirrortrain::ops
