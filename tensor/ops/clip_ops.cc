#include "tensor/ops/clip_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kClipByValueOp);
}  // namespace
namespace {

struct ClipValueAttrs {
  double lo, hi;
};

absl::Status CheckClip(const char* op, double clip) {
  if (!(clip > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": clip_norm must be > 0, got ", clip));
  }
  return absl::OkStatus();
}

// The sums of squares (in double) of tensors on GPU `device`, one element
// each, computed there.
absl::StatusOr<Tensor> SquaresOnGpu(absl::Span<const Tensor* const> tensors,
                                    int device) {
  MT_ASSIGN_OR_RETURN(
      Tensor sq,
      Tensor::Empty(DType::kF64, {static_cast<int64_t>(tensors.size())},
                    Device::Cuda(device)));
  for (size_t j = 0; j < tensors.size(); ++j) {
    const Tensor& t = *tensors[j];
    const Shape all{t.num_elements()};
    MT_RETURN_IF_ERROR(internal::KernelError(
        "GlobalNorm",
        cuda::Reduce(cuda::ReduceKind::kSumOfSquares, t.dtype(), t.raw_data(),
                     {}, {}, all, {1}, 1.0, DType::kF64, sq.data<double>() + j,
                     device),
        {&t}));
  }
  return sq;
}

// Whether `tensors` (at least one) share one GPU and one of f32 / f64: then
// the clip scale is computed there (ClipOnDevice).
bool ClipsOnDevice(absl::Span<const Tensor> tensors) {
  if (tensors.empty()) return false;
  const Tensor& first = tensors[0];
  if (!first.device().is_cuda() ||
      (first.dtype() != DType::kF32 && first.dtype() != DType::kF64)) {
    return false;
  }
  for (const Tensor& t : tensors) {
    if (t.device() != first.device() || t.dtype() != first.dtype()) {
      return false;
    }
  }
  return true;
}

// Each tensor times clip / max(norm, clip), the norm and the scale computed
// on the tensors' GPU (ClipsOnDevice), with the host's arithmetic.
absl::StatusOr<GlobalNormClipped> ClipOnDevice(absl::Span<const Tensor> tensors,
                                               double clip,
                                               bool nan_if_not_finite) {
  for (const Tensor& t : tensors) {
    MT_RETURN_IF_ERROR(internal::CheckFloatingSame("ClipByNorm", {&t}));
  }
  const Tensor& first = tensors[0];
  const int device = first.device().index;
  std::vector<const Tensor*> all;
  for (const Tensor& t : tensors) all.push_back(&t);
  MT_ASSIGN_OR_RETURN(const Tensor squares, SquaresOnGpu(all, device));
  MT_ASSIGN_OR_RETURN(Tensor scale,
                      Tensor::Empty(first.dtype(), {}, first.device()));
  GlobalNormClipped result;
  MT_ASSIGN_OR_RETURN(result.global_norm,
                      Tensor::Empty(DType::kF64, {}, first.device()));
  MT_RETURN_IF_ERROR(internal::KernelError(
      "ClipByNorm",
      cuda::ClipScale(squares.data<double>(), squares.num_elements(), clip,
                      nan_if_not_finite, first.dtype(), scale.raw_data(),
                      result.global_norm.data<double>(), device),
      {&first}));
  for (const Tensor& t : tensors) {
    MT_ASSIGN_OR_RETURN(Tensor clipped, Mul(t, scale));
    result.tensors.push_back(std::move(clipped));
  }
  return result;
}

}  // namespace

absl::StatusOr<double> GlobalNorm(absl::Span<const Tensor> tensors) {
  // GPU tensors: each sum of squares (in double) goes to its slot of one
  // vector per device, copied back once; the sums are then added in tensor
  // order, as on the host.
  std::map<int, std::vector<size_t>> on_gpu;  // Device index -> tensors.
  for (size_t k = 0; k < tensors.size(); ++k) {
    MT_RETURN_IF_ERROR(
        internal::CheckFloatingSame("GlobalNorm", {&tensors[k]}));
    if (tensors[k].device().is_cuda()) {
      on_gpu[tensors[k].device().index].push_back(k);
    }
  }
  std::vector<double> squares(tensors.size(), 0.0);
  for (const auto& [device, indices] : on_gpu) {
    std::vector<const Tensor*> these;
    for (size_t k : indices) these.push_back(&tensors[k]);
    MT_ASSIGN_OR_RETURN(const Tensor sq, SquaresOnGpu(these, device));
    MT_ASSIGN_OR_RETURN(Tensor host, sq.To(Device::Cpu()));
    for (size_t j = 0; j < indices.size(); ++j) {
      squares[indices[j]] = host.data<double>()[j];
    }
  }
  double sum = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    if (t.device().is_cuda()) {
      sum += squares[k];
      continue;
    }
    MT_DISPATCH_FLOAT(t.dtype(), T, {
      const T* p = t.data<T>();
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        sum += static_cast<double>(p[i]) * static_cast<double>(p[i]);
      }
    });
  }
  return std::sqrt(sum);
}

absl::StatusOr<Tensor> ClipByNorm(const Tensor& t, double clip_norm) {
  MT_RETURN_IF_ERROR(CheckClip("ClipByNorm", clip_norm));
  if (ClipsOnDevice({t})) {
    MT_ASSIGN_OR_RETURN(GlobalNormClipped clipped,
                        ClipOnDevice({t}, clip_norm,
                                     /*nan_if_not_finite=*/false));
    return std::move(clipped.tensors[0]);
  }
  MT_ASSIGN_OR_RETURN(double norm, GlobalNorm({t}));
  return Scale(t, clip_norm / std::max(norm, clip_norm));
}

absl::StatusOr<GlobalNormClipped> ClipByGlobalNorm(
    absl::Span<const Tensor> tensors, double clip_norm) {
  MT_RETURN_IF_ERROR(CheckClip("ClipByGlobalNorm", clip_norm));
  if (ClipsOnDevice(tensors)) {
    return ClipOnDevice(tensors, clip_norm, /*nan_if_not_finite=*/true);
  }
  MT_ASSIGN_OR_RETURN(double norm, GlobalNorm(tensors));
  GlobalNormClipped result{{}, Tensor::HostFull(DType::kF64, {}, norm)};
  const double scale = std::isfinite(norm)
                           ? clip_norm / std::max(norm, clip_norm)
                           : std::numeric_limits<double>::quiet_NaN();
  for (const Tensor& t : tensors) {
    MT_ASSIGN_OR_RETURN(Tensor clipped, Scale(t, scale));
    result.tensors.push_back(std::move(clipped));
  }
  return result;
}

absl::StatusOr<Tensor> ClipByValue(const Tensor& t, double lo, double hi) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame("ClipByValue", {&t}));
  if (!(lo <= hi)) {
    return internal::OpError("ClipByValue",
                             absl::StrCat("lo ", lo, " > hi ", hi), {&t});
  }
  if (t.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor y,
                        Tensor::Empty(t.dtype(), t.shape(), t.device()));
    MT_RETURN_IF_ERROR(internal::KernelError(
        "ClipByValue",
        cuda::ClipByValue(t.dtype(), t.raw_data(), lo, hi, y.raw_data(),
                          t.num_elements(), t.device().index),
        {&t}));
    tape::RecordOperation(kClipByValueOp, {t}, {y}, ClipValueAttrs{lo, hi});
    return y;
  }
  Tensor y = Tensor::HostEmpty(t.dtype(), t.shape());
  MT_DISPATCH_FLOAT(t.dtype(), T, {
    const T* p = t.data<T>();
    T* q = y.data<T>();
    const T l = static_cast<T>(lo), h = static_cast<T>(hi);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      q[i] = std::min(std::max(p[i], l), h);
    }
  });
  tape::RecordOperation(kClipByValueOp, {t}, {y}, ClipValueAttrs{lo, hi});
  return y;
}

namespace {

MT_OP(kClipByValueOp, "ClipByValue",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const auto& at = std::any_cast<const ClipValueAttrs&>(op.attrs);
        const Tensor& x = op.inputs[0];
        if (x.device().is_cuda()) {
          MT_RETURN_IF_ERROR(
              internal::CheckFloatingSame("ClipByValueGrad", {&x, &g[0]}));
          MT_ASSIGN_OR_RETURN(Tensor d,
                              Tensor::Empty(x.dtype(), x.shape(), x.device()));
          MT_RETURN_IF_ERROR(internal::KernelError(
              "ClipByValueGrad",
              cuda::ClipByValueGrad(x.dtype(), x.raw_data(), g[0].raw_data(),
                                    at.lo, at.hi, d.raw_data(),
                                    x.num_elements(), x.device().index),
              {&x, &g[0]}));
          (*grads)[0] = std::move(d);
          return absl::OkStatus();
        }
        MT_RETURN_IF_ERROR(internal::CheckHost("ClipByValueGrad", {&g[0]}));
        Tensor d = Tensor::HostEmpty(x.dtype(), x.shape());
        MT_DISPATCH_FLOAT(x.dtype(), T, {
          const T* px = x.data<T>();
          const T* pg = g[0].template data<T>();
          T* pd = d.data<T>();
          const T l = static_cast<T>(at.lo), h = static_cast<T>(at.hi);
          for (int64_t i = 0; i < x.num_elements(); ++i) {
            pd[i] = (px[i] >= l && px[i] <= h) ? pg[i] : T(0);
          }
        });
        (*grads)[0] = std::move(d);
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
