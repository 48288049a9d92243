#include "tensor/ops/array_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/index_checks.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kReshapeOp);
MT_DECLARE_OP(kTransposeOp);
MT_DECLARE_OP(kConcatOp);
MT_DECLARE_OP(kSplitOp);
MT_DECLARE_OP(kSliceOp);
MT_DECLARE_OP(kGatherOp);
MT_DECLARE_OP(kCastOp);
}  // namespace
namespace {

using internal::CheckDefined;
using internal::CheckSameDevice;
using internal::KernelError;
using internal::OpError;

struct TransposeAttrs {
  std::vector<int> perm;
};
// Concat's and Split's: the axis they join or cut.
struct ConcatAttrs {
  int axis;
};
struct SliceAttrs {
  int axis;
  int64_t begin;
};

// Output rows (the last output dimension) split over the kernel threads;
// each row reads x with one stride (contiguous when the last axis stays).
template <typename T>
void CpuTranspose(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  const int rank = x.rank();
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const int64_t n = x.num_elements();
  if (n == 0) return;
  if (rank == 0) {
    po[0] = px[0];
    return;
  }
  std::vector<int64_t> xs = RowMajorStrides(x.shape());
  // Input stride for each output dimension.
  std::vector<int64_t> in_strides(rank);
  for (int i = 0; i < rank; ++i) in_strides[i] = xs[perm[i]];
  const Shape& shape = out.shape();
  const int64_t inner = shape[rank - 1], step = in_strides[rank - 1];
  ParallelFor(n / inner, RowsPerChunk(inner, 1 << 14),
              [&](int64_t begin, int64_t end) {
                // The multi-index of row `begin` over the outer dimensions.
                std::vector<int64_t> counter(rank, 0);
                int64_t off = 0;
                int64_t rest = begin;
                for (int d = rank - 2; d >= 0; --d) {
                  counter[d] = rest % shape[d];
                  rest /= shape[d];
                  off += counter[d] * in_strides[d];
                }
                for (int64_t row = begin; row < end; ++row) {
                  const T* src = px + off;
                  T* dst = po + row * inner;
                  if (step == 1) {
                    std::copy(src, src + inner, dst);
                  } else {
                    for (int64_t c = 0; c < inner; ++c) dst[c] = src[c * step];
                  }
                  for (int d = rank - 2; d >= 0; --d) {
                    ++counter[d];
                    off += in_strides[d];
                    if (counter[d] < shape[d]) break;
                    off -= in_strides[d] * shape[d];
                    counter[d] = 0;
                  }
                }
              });
}

// Copies the block `part` to or from its place in `whole` along `axis`,
// starting at `start` on that axis (Concat and its gradient on the GPU).
absl::Status GpuCopyAlongAxis(const char* op, const Tensor& whole, int axis,
                              int64_t start, const Tensor& part,
                              bool into_whole) {
  const std::vector<int64_t> whole_strides = RowMajorStrides(whole.shape());
  const std::vector<int64_t> part_strides = RowMajorStrides(part.shape());
  const int64_t offset = start * whole_strides[axis];
  absl::Status status =
      into_whole ? cuda::StridedCopy(DTypeSize(part.dtype()), part.shape(),
                                     part.raw_data(), 0, part_strides,
                                     whole.raw_data(), offset, whole_strides,
                                     whole.device().index)
                 : cuda::StridedCopy(DTypeSize(part.dtype()), part.shape(),
                                     whole.raw_data(), offset, whole_strides,
                                     part.raw_data(), 0, part_strides,
                                     whole.device().index);
  return KernelError(op, status, {&whole, &part});
}

// A copy of the block of `whole` shaped `part` that starts at `start` along
// `axis` (Split, and Concat's gradient).
absl::StatusOr<Tensor> CopyBlock(const char* op, const Tensor& whole, int axis,
                                 int64_t start, const Shape& part) {
  if (whole.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor out,
                        Tensor::Empty(whole.dtype(), part, whole.device()));
    MT_RETURN_IF_ERROR(GpuCopyAlongAxis(op, whole, axis, start, out, false));
    return out;
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= whole.dim(i);
  for (int i = axis + 1; i < whole.rank(); ++i) inner *= whole.dim(i);
  const size_t elem = DTypeSize(whole.dtype());
  const int64_t whole_row = whole.dim(axis) * inner, row = part[axis] * inner;
  Tensor out = Tensor::HostEmpty(whole.dtype(), part);
  const char* src = static_cast<const char*>(whole.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * row * elem,
                src + (o * whole_row + start * inner) * elem, row * elem);
  }
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Reshape(const Tensor& x, const Shape& shape) {
  MT_RETURN_IF_ERROR(CheckDefined("Reshape", {&x}));
  Shape resolved = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) return OpError("Reshape", "more than one -1", {&x});
      infer = static_cast<int>(i);
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      return OpError("Reshape",
                     absl::StrCat(ShapeToString(shape),
                                  " holds more elements than fit 64 bits"),
                     {&x});
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.num_elements() % known != 0) {
      return OpError("Reshape",
                     absl::StrCat("cannot infer -1 in ", ShapeToString(shape)),
                     {&x});
    }
    resolved[infer] = x.num_elements() / known;
  }
  if (NumElements(resolved) != x.num_elements()) {
    return OpError("Reshape",
                   absl::StrCat("cannot reshape to ", ShapeToString(shape)),
                   {&x});
  }
  MT_ASSIGN_OR_RETURN(Tensor y, x.Reshaped(resolved));
  tape::RecordOperation(kReshapeOp, {x}, {y});
  return y;
}

absl::StatusOr<Tensor> Transpose(const Tensor& x,
                                 const std::vector<int>& perm) {
  MT_RETURN_IF_ERROR(CheckDefined("Transpose", {&x}));
  if (static_cast<int>(perm.size()) != x.rank()) {
    return OpError("Transpose", "perm length differs from rank", {&x});
  }
  std::vector<bool> seen(x.rank(), false);
  Shape shape(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    if (perm[i] < 0 || perm[i] >= x.rank() || seen[perm[i]]) {
      return OpError("Transpose", "perm is not a permutation", {&x});
    }
    seen[perm[i]] = true;
    shape[i] = x.dim(perm[i]);
  }
  MT_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(x.dtype(), shape, x.device()));
  if (x.device().is_cuda()) {
    // Output-ordered copy reading x with its strides permuted.
    const std::vector<int64_t> xs = RowMajorStrides(x.shape());
    std::vector<int64_t> in_strides(x.rank());
    for (int i = 0; i < x.rank(); ++i) in_strides[i] = xs[perm[i]];
    MT_RETURN_IF_ERROR(
        KernelError("Transpose",
                    cuda::StridedCopy(DTypeSize(x.dtype()), shape, x.raw_data(),
                                      0, in_strides, y.raw_data(), 0,
                                      RowMajorStrides(shape), x.device().index),
                    {&x}));
  } else {
    MT_DISPATCH_ALL(x.dtype(), T, CpuTranspose<T>(x, perm, y));
  }
  tape::RecordOperation(kTransposeOp, {x}, {y}, TransposeAttrs{perm});
  return y;
}

absl::StatusOr<std::vector<Tensor>> Split(const Tensor& x, int64_t pieces,
                                          int axis) {
  constexpr const char* kOp = "Split";
  MT_RETURN_IF_ERROR(CheckDefined(kOp, {&x}));
  MT_ASSIGN_OR_RETURN(const int a,
                      internal::NormalizeAxis(kOp, axis, x.rank()));
  if (pieces < 1 || x.dim(a) % pieces != 0) {
    return OpError(
        kOp,
        absl::StrCat("axis ", a, " of ", x.dim(a), " does not split into ",
                     pieces, " equal pieces"),
        {&x});
  }
  Shape part = x.shape();
  part[a] /= pieces;
  std::vector<Tensor> out;
  out.reserve(pieces);
  for (int64_t k = 0; k < pieces; ++k) {
    MT_ASSIGN_OR_RETURN(Tensor piece, CopyBlock(kOp, x, a, k * part[a], part));
    out.push_back(std::move(piece));
  }
  tape::RecordOperation(kSplitOp, {x}, out, ConcatAttrs{a});
  return out;
}

absl::StatusOr<Tensor> PadZeros(const Tensor& x, int axis, int64_t before,
                                int64_t after) {
  constexpr const char* kOp = "PadZeros";
  MT_RETURN_IF_ERROR(CheckDefined(kOp, {&x}));
  MT_ASSIGN_OR_RETURN(const int a,
                      internal::NormalizeAxis(kOp, axis, x.rank()));
  if (before < 0 || after < 0) {
    return OpError(kOp, absl::StrCat("negative padding ", before, ", ", after),
                   {&x});
  }
  if (before == 0 && after == 0) return x;
  std::vector<Tensor> parts;
  for (const int64_t cells : {before, after}) {
    if (cells > 0) {
      Shape block = x.shape();
      block[a] = cells;
      MT_ASSIGN_OR_RETURN(Tensor zeros,
                          Tensor::Zeros(x.dtype(), block, x.device()));
      parts.push_back(std::move(zeros));
    }
  }
  parts.insert(parts.begin() + (before > 0 ? 1 : 0), x);
  return Concat(parts, a);
}

absl::StatusOr<Tensor> Slice(const Tensor& x, int axis, int64_t begin,
                             int64_t size) {
  constexpr const char* kOp = "Slice";
  MT_RETURN_IF_ERROR(CheckDefined(kOp, {&x}));
  MT_ASSIGN_OR_RETURN(const int a,
                      internal::NormalizeAxis(kOp, axis, x.rank()));
  if (begin < 0 || size < 0 || begin > x.dim(a) - size) {
    return OpError(kOp,
                   absl::StrCat("[", begin, ", ", begin, " + ", size,
                                ") is not inside axis ", a, " of ", x.dim(a)),
                   {&x});
  }
  Shape part = x.shape();
  part[a] = size;
  MT_ASSIGN_OR_RETURN(Tensor y, CopyBlock(kOp, x, a, begin, part));
  tape::RecordOperation(kSliceOp, {x}, {y}, SliceAttrs{a, begin});
  return y;
}

absl::StatusOr<Tensor> Concat(absl::Span<const Tensor> xs, int axis) {
  constexpr const char* kOp = "Concat";
  if (xs.empty()) {
    return absl::InvalidArgumentError("Concat: no inputs");
  }
  const Tensor& first = xs[0];
  MT_RETURN_IF_ERROR(CheckDefined(kOp, {&first}));
  MT_ASSIGN_OR_RETURN(int a, internal::NormalizeAxis(kOp, axis, first.rank()));
  Shape shape = first.shape();
  shape[a] = 0;
  for (const Tensor& t : xs) {
    MT_RETURN_IF_ERROR(CheckSameDevice(kOp, {&first, &t}));
    bool ok = t.dtype() == first.dtype() && t.rank() == first.rank();
    for (int i = 0; ok && i < t.rank(); ++i) {
      ok = i == a || t.dim(i) == first.dim(i);
    }
    if (!ok) return OpError(kOp, "inputs differ off the axis", {&first, &t});
    shape[a] += t.dim(a);
  }
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(first.dtype(), shape, first.device()));
  if (y.device().is_cuda()) {
    int64_t start = 0;
    for (const Tensor& t : xs) {
      MT_RETURN_IF_ERROR(GpuCopyAlongAxis(kOp, y, a, start, t, true));
      start += t.dim(a);
    }
    tape::RecordOperation(kConcatOp, xs, {y}, ConcatAttrs{a});
    return y;
  }
  // Rows before the axis, bytes per row within the axis block.
  int64_t outer = 1;
  for (int i = 0; i < a; ++i) outer *= shape[i];
  const size_t elem = DTypeSize(first.dtype());
  const int64_t out_row = y.num_elements() / std::max<int64_t>(outer, 1);
  char* dst = static_cast<char*>(y.raw_data());
  int64_t col = 0;
  for (const Tensor& t : xs) {
    const int64_t row = t.num_elements() / std::max<int64_t>(outer, 1);
    const char* src = static_cast<const char*>(t.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + (o * out_row + col) * elem, src + o * row * elem,
                  row * elem);
    }
    col += row;
  }
  tape::RecordOperation(kConcatOp, xs, {y}, ConcatAttrs{a});
  return y;
}

absl::StatusOr<Tensor> Gather(const Tensor& params, const Tensor& indices) {
  constexpr const char* kOp = "Gather";
  MT_RETURN_IF_ERROR(CheckSameDevice(kOp, {&params, &indices}));
  MT_RETURN_IF_ERROR(internal::CheckInteger(kOp, indices, "indices"));
  if (params.rank() < 1)
    return OpError(kOp, "params must have rank >= 1", {&params});
  Shape shape = indices.shape();
  shape.insert(shape.end(), params.shape().begin() + 1, params.shape().end());
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(params.dtype(), shape, params.device()));
  const int64_t rows = params.dim(0);
  const int64_t row = params.num_elements() / std::max<int64_t>(rows, 1);
  // Rows of no columns run no kernel that could check: on the host then.
  std::optional<internal::IndexCheckSite> site;
  if (row > 0) {
    MT_ASSIGN_OR_RETURN(site, internal::NextIndexCheckSite(
                                  params.device(), indices.num_elements()));
  }
  if (params.device().is_cuda()) {
    cuda::DeviceIndexCheck check;
    if (site.has_value()) {
      check = {site->record, site->site};  // Checked by the kernel.
    } else {
      // Range errors are reported as on the CPU, so the indices are checked
      // on the host (one small copy) before the kernel trusts them.
      MT_ASSIGN_OR_RETURN(Tensor host_indices, indices.To(Device::Cpu()));
      for (int64_t i = 0; i < host_indices.num_elements(); ++i) {
        int64_t idx = internal::IndexAt(host_indices, i);
        if (idx < 0 || idx >= rows) {
          return OpError(kOp,
                         absl::StrCat("index ", idx, " at position ", i,
                                      " is out of range [0, ", rows, ")"),
                         {&params, &indices});
        }
      }
    }
    const int device = params.device().index;
    absl::Status s =
        cuda::Gather(params.dtype(), params.raw_data(), row, rows,
                     indices.dtype(), indices.raw_data(),
                     indices.num_elements(), y.raw_data(), check, device);
    if (s.ok() && site.has_value()) {
      s = cuda::FinishIndexCheck(
          check, indices.dtype(), indices.raw_data(), rows,
          static_cast<int64_t>(internal::IndexCheckOp::kGather), device);
    }
    MT_RETURN_IF_ERROR(KernelError(kOp, s, {&params, &indices}));
    tape::RecordOperation(kGatherOp, {params, indices}, {y});
    return y;
  }
  const size_t row_bytes = params.num_elements() / std::max<int64_t>(rows, 1) *
                           DTypeSize(params.dtype());
  const char* src = static_cast<const char*>(params.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    int64_t idx = internal::IndexAt(indices, i);
    if ((idx < 0 || idx >= rows) && site.has_value()) {
      internal::RecordOnHost(*site, i, internal::IndexCheckOp::kGather, idx,
                             rows);
      std::memset(dst + i * row_bytes, 0, row_bytes);
      continue;
    }
    if (idx < 0 || idx >= rows) {
      return OpError(kOp,
                     absl::StrCat("index ", idx, " at position ", i,
                                  " is out of range [0, ", rows, ")"),
                     {&params, &indices});
    }
    std::memcpy(dst + i * row_bytes, src + idx * row_bytes, row_bytes);
  }
  tape::RecordOperation(kGatherOp, {params, indices}, {y});
  return y;
}

absl::StatusOr<Tensor> OneHot(const Tensor& indices, int64_t depth, DType dtype,
                              double on, double off) {
  constexpr const char* kOp = "OneHot";
  MT_RETURN_IF_ERROR(CheckDefined(kOp, {&indices}));
  MT_RETURN_IF_ERROR(internal::CheckInteger(kOp, indices, "indices"));
  if (depth < 0) return OpError(kOp, "depth must be >= 0", {&indices});
  Shape shape = indices.shape();
  shape.push_back(depth);
  if (indices.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor y,
                        Tensor::Empty(dtype, shape, indices.device()));
    MT_RETURN_IF_ERROR(
        KernelError(kOp,
                    cuda::OneHot(indices.dtype(), indices.raw_data(),
                                 indices.num_elements(), depth, dtype, on, off,
                                 y.raw_data(), indices.device().index),
                    {&indices}));
    return y;
  }
  Tensor y = Tensor::HostFull(dtype, shape, off);
  MT_DISPATCH_ALL(dtype, T, {
    T* p = y.data<T>();
    for (int64_t i = 0; i < indices.num_elements(); ++i) {
      int64_t idx = internal::IndexAt(indices, i);
      if (idx >= 0 && idx < depth) p[i * depth + idx] = static_cast<T>(on);
    }
  });
  return y;
}

// A float converts to an integer dtype by truncation toward zero, as in
// tf.cast. NaN, infinities and values whose truncation lies outside the
// integer's range have no such value: C++ leaves the conversion undefined
// and TensorFlow inherits that (TF 2.21 on x86 CPUs gives the integer's
// minimum for every one of them; CUDA's conversion saturates and gives 0
// for NaN, so TF's answer depends on the device). Here they are an
// InvalidArgument error naming the element and its value, the same on both
// devices: the values are checked on the host before either device
// converts (a GPU input is copied to the host for it, as Gather's indices
// are; in a ScopedIndexChecks the kernel checks and records instead). An
// error and not saturation, because token ids come through this cast
// (embedding) and a NaN saturated to 0 would read a real row.
template <typename S, typename D>
bool FitsInteger(S v) {
  // -2^(bits-1) and 2^(bits-1) are exact in float and double.
  constexpr S kLow = static_cast<S>(std::numeric_limits<D>::min());
  const S t = std::trunc(v);
  return t >= kLow && t < -kLow;  // False for NaN.
}

template <typename S, typename D>
absl::Status CheckFitsInteger(const Tensor& host_x, const Tensor& x) {
  const S* v = host_x.data<S>();
  for (int64_t i = 0; i < host_x.num_elements(); ++i) {
    if (!FitsInteger<S, D>(v[i])) {
      return OpError(
          "Cast",
          absl::StrFormat("element %d is %.17g, which has no value in %s", i,
                          static_cast<double>(v[i]),
                          DTypeName(DTypeOf<D>::value)),
          {&x});
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCastable(const Tensor& x, DType dtype) {
  if (!IsFloating(x.dtype()) || IsFloating(dtype)) return absl::OkStatus();
  Tensor host_x = x;
  if (x.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(host_x, x.To(Device::Cpu()));
  }
  absl::Status status;
  MT_DISPATCH_FLOAT(x.dtype(), S, {
    status = dtype == DType::kI32 ? CheckFitsInteger<S, int32_t>(host_x, x)
                                  : CheckFitsInteger<S, int64_t>(host_x, x);
  });
  return status;
}

absl::StatusOr<Tensor> Cast(const Tensor& x, DType dtype) {
  MT_RETURN_IF_ERROR(CheckDefined("Cast", {&x}));
  std::optional<internal::IndexCheckSite> site;
  if (IsFloating(x.dtype()) && !IsFloating(dtype)) {
    MT_ASSIGN_OR_RETURN(
        site, internal::NextIndexCheckSite(x.device(), x.num_elements()));
  }
  if (!site.has_value()) MT_RETURN_IF_ERROR(CheckCastable(x, dtype));
  MT_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(dtype, x.shape(), x.device()));
  const int64_t bits = 8 * static_cast<int64_t>(DTypeSize(dtype));
  if (x.device().is_cuda()) {
    cuda::DeviceIndexCheck check;
    if (site.has_value()) check = {site->record, site->site};
    const int device = x.device().index;
    absl::Status s = cuda::Cast(x.dtype(), x.raw_data(), dtype, y.raw_data(),
                                x.num_elements(), check, device);
    if (s.ok() && site.has_value()) {
      s = cuda::FinishIndexCheck(
          check, x.dtype(), x.raw_data(), bits,
          static_cast<int64_t>(internal::IndexCheckOp::kCast), device);
    }
    MT_RETURN_IF_ERROR(KernelError("Cast", s, {&x}));
  } else {
    MT_DISPATCH_ALL(x.dtype(), S, {
      const S* src = x.data<S>();
      MT_DISPATCH_ALL(dtype, D, {
        D* dst = y.data<D>();
        for (int64_t i = 0; i < x.num_elements(); ++i) {
          if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
            // Without a site CheckCastable has passed every value.
            if (site.has_value() && !FitsInteger<S, D>(src[i])) {
              internal::RecordOnHost(
                  *site, i, internal::IndexCheckOp::kCast,
                  std::bit_cast<int64_t>(static_cast<double>(src[i])), bits);
              dst[i] = D(0);
              continue;
            }
          }
          dst[i] = static_cast<D>(src[i]);
        }
      });
    });
  }
  if (IsFloating(x.dtype()) && IsFloating(dtype)) {
    tape::RecordOperation(kCastOp, {x}, {y});
  }
  return y;
}

absl::StatusOr<Tensor> ArgMax(const Tensor& x, int axis) {
  constexpr const char* kOp = "ArgMax";
  MT_RETURN_IF_ERROR(CheckDefined(kOp, {&x}));
  MT_ASSIGN_OR_RETURN(int a, internal::NormalizeAxis(kOp, axis, x.rank()));
  if (x.dim(a) == 0) return OpError(kOp, "reduction axis is empty", {&x});
  Shape shape;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) {
    if (i != a) shape.push_back(x.dim(i));
    if (i < a) outer *= x.dim(i);
    if (i > a) inner *= x.dim(i);
  }
  const int64_t n = x.dim(a);
  if (x.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor y,
                        Tensor::Empty(DType::kI64, shape, x.device()));
    MT_RETURN_IF_ERROR(
        KernelError(kOp,
                    cuda::ArgMax(x.dtype(), x.raw_data(), outer, n, inner,
                                 y.data<int64_t>(), x.device().index),
                    {&x}));
    return y;
  }
  Tensor y = Tensor::HostEmpty(DType::kI64, shape);
  int64_t* py = y.data<int64_t>();
  MT_DISPATCH_ALL(x.dtype(), T, {
    const T* px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* base = px + o * n * inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k) {
          if (base[k * inner] > base[best * inner]) best = k;
        }
        py[o * inner + i] = best;
      }
    }
  });
  return y;
}

absl::StatusOr<Tensor> StopGradient(const Tensor& x) {
  MT_RETURN_IF_ERROR(CheckDefined("StopGradient", {&x}));
  // A fresh view: it has a new id that no tape watches, and nothing is
  // recorded, so gradients stop here.
  return x.Reshaped(x.shape());
}

absl::StatusOr<Tensor> Fill(DType dtype, const Shape& shape, double value,
                            Device device) {
  if (device.is_cuda()) {
    // A fill kernel: a host copy would make the host wait for the stream.
    MT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(dtype, shape, device));
    MT_RETURN_IF_ERROR(cuda::Fill(dtype, out.raw_data(), value,
                                  out.num_elements(), device.index));
    return out;
  }
  // Validates the shape (no negative dimensions) before allocating.
  MT_RETURN_IF_ERROR(Tensor::Empty(dtype, shape).status());
  return Tensor::HostFull(dtype, shape, value);
}

absl::StatusOr<Tensor> ZerosLike(const Tensor& x) {
  MT_RETURN_IF_ERROR(CheckDefined("ZerosLike", {&x}));
  return Tensor::Zeros(x.dtype(), x.shape(), x.device());
}

absl::StatusOr<Tensor> OnesLike(const Tensor& x) {
  MT_RETURN_IF_ERROR(CheckDefined("OnesLike", {&x}));
  return Fill(x.dtype(), x.shape(), 1.0, x.device());
}

// ---------------------------------------------------------------- gradients

namespace {

MT_OP_RECORDED_GRADIENT(kReshapeOp, "Reshape",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN(
                              (*grads)[0], Reshape(g[0], op.inputs[0].shape()));
                          return absl::OkStatus();
                        });

MT_OP_RECORDED_GRADIENT(
    kTransposeOp, "Transpose",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      const auto& perm = std::any_cast<const TransposeAttrs&>(op.attrs).perm;
      std::vector<int> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i)
        inverse[perm[i]] = static_cast<int>(i);
      MT_ASSIGN_OR_RETURN((*grads)[0], Transpose(g[0], inverse));
      return absl::OkStatus();
    });

MT_OP(kConcatOp, "Concat",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        // Slices of g along the axis, one per input.
        const int axis = std::any_cast<const ConcatAttrs&>(op.attrs).axis;
        int64_t start = 0;
        for (size_t j = 0; j < op.inputs.size(); ++j) {
          const Tensor& in = op.inputs[j];
          if (needs[j]) {
            MT_ASSIGN_OR_RETURN((*grads)[j], CopyBlock("ConcatGrad", g[0], axis,
                                                       start, in.shape()));
          }
          start += in.dim(axis);
        }
        return absl::OkStatus();
      });

// The gradient between zeros for the cells the slice left out: a recorded
// Concat, so an outer tape differentiates through it.
MT_OP_RECORDED_GRADIENT(
    kSliceOp, "Slice",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      if (!needs[0]) return absl::OkStatus();
      const auto& at = std::any_cast<const SliceAttrs&>(op.attrs);
      const Tensor& dy = g[0];
      MT_ASSIGN_OR_RETURN(
          (*grads)[0],
          PadZeros(dy, at.axis, at.begin,
                   op.inputs[0].dim(at.axis) - at.begin - dy.dim(at.axis)));
      return absl::OkStatus();
    });

// The outputs' gradients joined again (zeros for an unused piece): a
// recorded Concat, so an outer tape differentiates through it.
MT_OP_RECORDED_GRADIENT(
    kSplitOp, "Split",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      if (!needs[0]) return absl::OkStatus();
      const int axis = std::any_cast<const ConcatAttrs&>(op.attrs).axis;
      MT_ASSIGN_OR_RETURN(
          (*grads)[0], Concat(std::vector<Tensor>(g.begin(), g.end()), axis));
      return absl::OkStatus();
    });

MT_OP(kGatherOp, "Gather",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        if (!needs[0]) return absl::OkStatus();
        const Tensor& params = op.inputs[0];
        const Tensor& indices = op.inputs[1];
        const Tensor& gy = g[0];
        if (gy.device().is_cuda()) {
          MT_ASSIGN_OR_RETURN(
              Tensor dp,
              Tensor::Zeros(params.dtype(), params.shape(), gy.device()));
          const int64_t row =
              params.num_elements() / std::max<int64_t>(params.dim(0), 1);
          MT_RETURN_IF_ERROR(KernelError(
              "GatherGrad",
              cuda::ScatterAdd(params.dtype(), gy.raw_data(), row,
                               indices.dtype(), indices.raw_data(),
                               indices.num_elements(), params.dim(0),
                               dp.raw_data(), gy.device().index),
              {&gy, &indices}));
          (*grads)[0] = std::move(dp);
          return absl::OkStatus();
        }
        Tensor dp = Tensor::HostZeros(params.dtype(), params.shape());
        const int64_t row =
            params.num_elements() / std::max<int64_t>(params.dim(0), 1);
        // In increasing i per row, the order the CUDA kernel keeps too. An
        // index out of range (only under ScopedIndexChecks, which gave its
        // row zeros and recorded it) adds to no row, as on the GPU.
        MT_DISPATCH_FLOAT(params.dtype(), T, {
          const T* src = gy.data<T>();
          T* dst = dp.data<T>();
          for (int64_t i = 0; i < indices.num_elements(); ++i) {
            const int64_t index = internal::IndexAt(indices, i);
            if (index < 0 || index >= params.dim(0)) continue;
            T* out = dst + index * row;
            const T* in = src + i * row;
            for (int64_t k = 0; k < row; ++k) out[k] += in[k];
          }
        });
        (*grads)[0] = std::move(dp);
        return absl::OkStatus();
      });

MT_OP_RECORDED_GRADIENT(kCastOp, "Cast",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          MT_ASSIGN_OR_RETURN((*grads)[0],
                                              Cast(g[0], op.inputs[0].dtype()));
                          return absl::OkStatus();
                        });

// Integer outputs, or a deliberate stop: no gradient flows through these
// (TensorFlow registers them as NotDifferentiable).
MT_NOT_DIFFERENTIABLE_OP(kArgMaxOp, "ArgMax");
MT_NOT_DIFFERENTIABLE_OP(kOneHotOp, "OneHot");
MT_NOT_DIFFERENTIABLE_OP(kStopGradientOp, "StopGradient");

}  // namespace
}  // namespace mirrortrain::ops
