#include "tensor/ops/normalization_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/lane_reduce.h"
#include "tensor/op.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kChannelSumsOp);
MT_DECLARE_OP(kMomentsFromSumsOp);
MT_DECLARE_OP(kBatchNormalizationOp);
MT_DECLARE_OP(kLayerNormalizationOp);

using internal::CheckFloatingSame;
using internal::KernelError;
using internal::OpError;

// x as [rows, cols] with cols its last dimension.
void RowsCols(const Tensor& x, int64_t* rows, int64_t* cols) {
  *cols = x.dim(x.rank() - 1);
  *rows = *cols == 0 ? 0 : x.num_elements() / *cols;
}

// A view of `t` that no tape watches: per-channel coefficients computed
// inside an op from its inputs must not be recorded as ops of their own.
Tensor Detached(const Tensor& t) { return *t.Reshaped(t.shape()); }

// y = x * a[c] + b[c] (b undefined: + 0), on x's device.
absl::StatusOr<Tensor> ChannelAffine(const char* op, const Tensor& x,
                                     const Tensor& a, const Tensor* b) {
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  int64_t rows, cols;
  RowsCols(x, &rows, &cols);
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        op,
        cuda::ChannelAffine(x.dtype(), x.raw_data(), a.raw_data(),
                            b == nullptr ? nullptr : b->raw_data(),
                            y.raw_data(), rows, cols, x.device().index),
        {&x, &a}));
    return y;
  }
  MT_DISPATCH_FLOAT(x.dtype(), T, {
    const T* px = x.data<T>();
    const T* pa = a.data<T>();
    const T* pb = b == nullptr ? nullptr : b->data<T>();
    T* py = y.data<T>();
    ParallelFor(
        rows, RowsPerChunk(cols, 1 << 15), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const T* xr = px + r * cols;
            T* yr = py + r * cols;
            for (int64_t c = 0; c < cols; ++c) {
              yr[c] = pb == nullptr ? xr[c] * pa[c] : xr[c] * pa[c] + pb[c];
            }
          }
        });
  });
  return y;
}

// sum[c] = sum of w[r, c]; dot[c] = sum of w[r, c] * (x[r, c] - shift[c])
// (shift undefined: 0), as x's dtype or (`double_sums`) float64. On the
// CPU: fixed blocks of rows summed in double, then the blocks in order, so
// the result does not depend on the threads.
absl::StatusOr<ChannelSumsResult> Sums(const char* op, const Tensor& x,
                                       const Tensor& w, const Tensor* shift,
                                       bool double_sums = false) {
  int64_t rows, cols;
  RowsCols(x, &rows, &cols);
  const Shape shape = {cols};
  const DType out = double_sums ? DType::kF64 : x.dtype();
  MT_ASSIGN_OR_RETURN(Tensor sum, Tensor::Empty(out, shape, x.device()));
  MT_ASSIGN_OR_RETURN(Tensor dot, Tensor::Empty(out, shape, x.device()));
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        op,
        cuda::ChannelSums(x.dtype(), x.raw_data(), w.raw_data(),
                          shift == nullptr ? nullptr : shift->raw_data(), rows,
                          cols, sum.raw_data(), dot.raw_data(), double_sums,
                          x.device().index),
        {&x, &w}));
    return ChannelSumsResult{std::move(sum), std::move(dot)};
  }
  constexpr int64_t kBlockRows = 256;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<double> partial(static_cast<size_t>(blocks * 2 * cols), 0.0);
  MT_DISPATCH_FLOAT(x.dtype(), T, {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* ps = shift == nullptr ? nullptr : shift->data<T>();
    ParallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t blk = begin; blk < end; ++blk) {
        double* s = &partial[blk * 2 * cols];
        double* d = s + cols;
        const int64_t r1 = std::min(rows, (blk + 1) * kBlockRows);
        for (int64_t r = blk * kBlockRows; r < r1; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const double wv = pw[r * cols + c];
            const double xv = px[r * cols + c];
            s[c] += wv;
            d[c] += wv * (ps == nullptr ? xv : xv - ps[c]);
          }
        }
      }
    });
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0, d = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        s += partial[blk * 2 * cols + c];
        d += partial[blk * 2 * cols + cols + c];
      }
      if (double_sums) {
        sum.data<double>()[c] = s;
        dot.data<double>()[c] = d;
      } else {
        sum.data<T>()[c] = static_cast<T>(s);
        dot.data<T>()[c] = static_cast<T>(d);
      }
    }
  });
  return ChannelSumsResult{std::move(sum), std::move(dot)};
}

// rsqrt(variance + epsilon), and k = scale * that: computed by the forward
// pass and kept for the gradient.
struct Coefficients {
  Tensor inv, k;
};
absl::StatusOr<Coefficients> MakeCoefficients(const Tensor& variance,
                                              const Tensor& scale,
                                              double epsilon) {
  MT_ASSIGN_OR_RETURN(Tensor eps, internal::ScalarLike(variance, epsilon));
  MT_ASSIGN_OR_RETURN(Tensor v, Add(Detached(variance), eps));
  MT_ASSIGN_OR_RETURN(v, Sqrt(v));
  MT_ASSIGN_OR_RETURN(Tensor one, internal::ScalarLike(variance, 1.0));
  MT_ASSIGN_OR_RETURN(Tensor inv, Div(one, v));
  MT_ASSIGN_OR_RETURN(Tensor k, Mul(Detached(scale), inv));
  return Coefficients{std::move(inv), std::move(k)};
}

// What LayerNormalization keeps for its gradient: per-row statistics.
struct LayerNormSaved {
  Tensor mean, rstd;  // [rows]
};

// The CPU kernels of layer normalization, the same arithmetic as the CUDA
// ones (tensor/cuda/normalization_kernels.cu): per row in double (summed in
// another order, over lanes: one dependent chain per row was most of the
// time).
template <typename T>
void LayerNormForwardCpu(const T* x, const T* gamma, const T* beta, T* y,
                         T* mean, T* rstd, int64_t rows, int64_t cols,
                         double epsilon) {
  ParallelFor(
      rows, RowsPerChunk(cols, 1 << 14), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * cols;
          const double m =
              LaneSum<double>(cols, [&](int64_t c) { return double{xr[c]}; }) /
              cols;
          const double v = LaneSum<double>(
              cols, [&](int64_t c) { return (xr[c] - m) * (xr[c] - m); });
          const double inv = 1.0 / std::sqrt(v / cols + epsilon);
          for (int64_t c = 0; c < cols; ++c) {
            y[r * cols + c] =
                static_cast<T>((xr[c] - m) * inv * gamma[c] + beta[c]);
          }
          mean[r] = static_cast<T>(m);
          rstd[r] = static_cast<T>(inv);
        }
      });
}

template <typename T>
void LayerNormBackwardCpu(const T* x, const T* gamma, const T* dy,
                          const T* mean, const T* rstd, T* dx, T* xhat,
                          int64_t rows, int64_t cols) {
  ParallelFor(
      rows, RowsPerChunk(cols, 1 << 14), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * cols;
          const T* gr = dy + r * cols;
          const double m = mean[r], inv = rstd[r];
          const double s1 = LaneSum<double>(cols, [&](int64_t c) {
            return static_cast<double>(gr[c]) * gamma[c];
          });
          const double s2 = LaneSum<double>(cols, [&](int64_t c) {
            return static_cast<double>(gr[c]) * gamma[c] * ((xr[c] - m) * inv);
          });
          const double mean_gg = s1 / cols, mean_ggx = s2 / cols;
          for (int64_t c = 0; c < cols; ++c) {
            const double xh = (xr[c] - m) * inv;
            const double gg = static_cast<double>(gr[c]) * gamma[c];
            dx[r * cols + c] =
                static_cast<T>(inv * (gg - mean_gg - xh * mean_ggx));
            if (xhat != nullptr) xhat[r * cols + c] = static_cast<T>(xh);
          }
        }
      });
}

}  // namespace

absl::StatusOr<ChannelSumsResult> ChannelSums(const Tensor& x) {
  constexpr const char* kOp = "ChannelSums";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&x}));
  if (x.rank() < 1) return OpError(kOp, "needs rank >= 1", {&x});
  MT_ASSIGN_OR_RETURN(ChannelSumsResult r,
                      Sums(kOp, x, x, nullptr, /*double_sums=*/true));
  tape::RecordOperation(kChannelSumsOp, {x}, {r.sum, r.sum_sq});
  return r;
}

absl::StatusOr<MomentsResult> MomentsFromSums(const ChannelSumsResult& sums,
                                              int64_t count, DType dtype) {
  constexpr const char* kOp = "MomentsFromSums";
  const Tensor& sum = sums.sum;
  const Tensor& sum_sq = sums.sum_sq;
  if (sum.dtype() != DType::kF64 || sum_sq.dtype() != DType::kF64 ||
      sum.rank() != 1 || sum_sq.shape() != sum.shape() ||
      sum_sq.device() != sum.device() || !IsFloating(dtype) || count < 0) {
    return OpError(kOp,
                   "needs float64 [C] sums on one device, a floating dtype "
                   "and a count >= 0",
                   {&sum, &sum_sq});
  }
  const int64_t cols = sum.dim(0);
  // divide_no_nan: a shard of no rows has statistics 0.
  const double inv_n = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  MomentsResult r;
  MT_ASSIGN_OR_RETURN(r.mean, Tensor::Empty(dtype, {cols}, sum.device()));
  MT_ASSIGN_OR_RETURN(r.variance, Tensor::Empty(dtype, {cols}, sum.device()));
  if (sum.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        kOp,
        cuda::MomentsFromSums(dtype, sum.raw_data(), sum_sq.raw_data(), inv_n,
                              r.mean.raw_data(), r.variance.raw_data(), cols,
                              sum.device().index),
        {&sum, &sum_sq}));
  } else {
    MT_DISPATCH_FLOAT(dtype, T, {
      const double* s = sum.data<double>();
      const double* ss = sum_sq.data<double>();
      for (int64_t c = 0; c < cols; ++c) {
        const double m = s[c] * inv_n;
        r.mean.data<T>()[c] = static_cast<T>(m);
        r.variance.data<T>()[c] =
            static_cast<T>(std::max(ss[c] * inv_n - m * m, 0.0));
      }
    });
  }
  tape::RecordOperation(kMomentsFromSumsOp, {sum, sum_sq}, {r.mean, r.variance},
                        inv_n);
  return r;
}

absl::StatusOr<Tensor> BatchNormalization(const Tensor& x, const Tensor& mean,
                                          const Tensor& variance,
                                          const Tensor& offset,
                                          const Tensor& scale, double epsilon) {
  constexpr const char* kOp = "BatchNormalization";
  MT_RETURN_IF_ERROR(
      CheckFloatingSame(kOp, {&x, &mean, &variance, &offset, &scale}));
  if (x.rank() < 1) return OpError(kOp, "needs rank >= 1", {&x});
  const Shape channels = {x.dim(x.rank() - 1)};
  for (const Tensor* t : {&mean, &variance, &offset, &scale}) {
    if (t->shape() != channels) {
      return OpError(kOp,
                     "mean, variance, offset and scale must be [channels] "
                     "(the last dimension of x)",
                     {&x, &mean, &variance, &offset, &scale});
    }
  }
  MT_ASSIGN_OR_RETURN(Coefficients co,
                      MakeCoefficients(variance, scale, epsilon));
  MT_ASSIGN_OR_RETURN(Tensor mk, Mul(Detached(mean), co.k));
  MT_ASSIGN_OR_RETURN(Tensor b, Sub(Detached(offset), mk));
  MT_ASSIGN_OR_RETURN(Tensor y, ChannelAffine(kOp, x, co.k, &b));
  tape::RecordOperation(kBatchNormalizationOp,
                        {x, mean, variance, offset, scale}, {y}, std::move(co));
  return y;
}

absl::StatusOr<Tensor> LayerNormalization(const Tensor& x, const Tensor& gamma,
                                          const Tensor& beta, double epsilon) {
  constexpr const char* kOp = "LayerNormalization";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&x, &gamma, &beta}));
  if (x.rank() < 1) return OpError(kOp, "needs rank >= 1", {&x});
  const Shape channels = {x.dim(x.rank() - 1)};
  if (gamma.shape() != channels || beta.shape() != channels) {
    return OpError(kOp,
                   "gamma and beta must be [channels] (the last dimension "
                   "of x)",
                   {&x, &gamma, &beta});
  }
  int64_t rows, cols;
  RowsCols(x, &rows, &cols);
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  LayerNormSaved saved;
  MT_ASSIGN_OR_RETURN(saved.mean, Tensor::Empty(x.dtype(), {rows}, x.device()));
  MT_ASSIGN_OR_RETURN(saved.rstd, Tensor::Empty(x.dtype(), {rows}, x.device()));
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        kOp,
        cuda::LayerNormForward(x.dtype(), x.raw_data(), gamma.raw_data(),
                               beta.raw_data(), y.raw_data(),
                               saved.mean.raw_data(), saved.rstd.raw_data(),
                               rows, cols, epsilon, x.device().index),
        {&x, &gamma, &beta}));
  } else {
    MT_DISPATCH_FLOAT(x.dtype(), T, {
      LayerNormForwardCpu<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(),
                             y.data<T>(), saved.mean.data<T>(),
                             saved.rstd.data<T>(), rows, cols, epsilon);
    });
  }
  tape::RecordOperation(kLayerNormalizationOp, {x, gamma, beta}, {y},
                        std::move(saved));
  return y;
}

// ---------------------------------------------------------------- gradients

namespace {

// d/dx of (sum, sum_sq) = g_sum + 2 x g_sq, per channel (the float64
// gradients of the float64 sums, applied in x's dtype).
MT_OP(kChannelSumsOp, "ChannelSums",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const Tensor& x = op.inputs[0];
        MT_ASSIGN_OR_RETURN(Tensor two_g_sq, Scale(g[1], 2.0));
        MT_ASSIGN_OR_RETURN(two_g_sq, Cast(two_g_sq, x.dtype()));
        MT_ASSIGN_OR_RETURN(Tensor g_sum, Cast(g[0], x.dtype()));
        MT_ASSIGN_OR_RETURN(
            (*grads)[0], ChannelAffine("ChannelSumsGrad", x, two_g_sq, &g_sum));
        return absl::OkStatus();
      });

// With m = sum / n and g_var' = g_var where the variance before its max
// with 0 was positive (else 0): d sum = (g_mean - 2 m g_var') / n and
// d sum_sq = g_var' / n, in float64 as the sums.
MT_OP(kMomentsFromSumsOp, "MomentsFromSums",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const Tensor& sum = op.inputs[0];
        const Tensor& sum_sq = op.inputs[1];
        const Tensor& g_mean = g[0];
        const Tensor& g_var = g[1];
        const double inv_n = std::any_cast<double>(op.attrs);
        const int64_t cols = sum.dim(0);
        MT_ASSIGN_OR_RETURN(Tensor g_sum,
                            Tensor::Empty(DType::kF64, {cols}, sum.device()));
        MT_ASSIGN_OR_RETURN(Tensor g_sq,
                            Tensor::Empty(DType::kF64, {cols}, sum.device()));
        if (sum.device().is_cuda()) {
          MT_RETURN_IF_ERROR(KernelError(
              "MomentsFromSumsGrad",
              cuda::MomentsFromSumsGrad(
                  g_mean.dtype(), sum.raw_data(), sum_sq.raw_data(), inv_n,
                  g_mean.raw_data(), g_var.raw_data(), g_sum.raw_data(),
                  g_sq.raw_data(), cols, sum.device().index),
              {&g_mean, &g_var}));
        } else {
          MT_DISPATCH_FLOAT(g_mean.dtype(), T, {
            const double* s = sum.data<double>();
            const double* ss = sum_sq.data<double>();
            for (int64_t c = 0; c < cols; ++c) {
              const double m = s[c] * inv_n;
              const double gv = ss[c] * inv_n - m * m > 0
                                    ? static_cast<double>(g_var.data<T>()[c])
                                    : 0.0;
              g_sq.data<double>()[c] = gv * inv_n;
              g_sum.data<double>()[c] =
                  (static_cast<double>(g_mean.data<T>()[c]) - 2 * m * gv) *
                  inv_n;
            }
          });
        }
        (*grads)[0] = std::move(g_sum);
        (*grads)[1] = std::move(g_sq);
        return absl::OkStatus();
      });

// With inv = rsqrt(variance + eps), k = scale * inv, s1 = sum(dy) and
// s2 = sum(dy * (x - mean)) per channel: dx = dy * k; d offset = s1;
// d scale = s2 * inv; d mean = -s1 * k; d variance = -s2 * k * inv^2 / 2.
MT_OP(kBatchNormalizationOp, "BatchNormalization",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        const Tensor& x = op.inputs[0];
        const Tensor& mean = op.inputs[1];
        const Coefficients& co = std::any_cast<const Coefficients&>(op.attrs);
        if (needs[0]) {
          MT_ASSIGN_OR_RETURN(
              (*grads)[0],
              ChannelAffine("BatchNormalizationGrad", g[0], co.k, nullptr));
        }
        if (!needs[1] && !needs[2] && !needs[3] && !needs[4]) {
          return absl::OkStatus();
        }
        MT_ASSIGN_OR_RETURN(ChannelSumsResult s,
                            Sums("BatchNormalizationGrad", x, g[0], &mean));
        if (needs[1]) {
          MT_ASSIGN_OR_RETURN(Tensor t, Mul(s.sum, co.k));
          MT_ASSIGN_OR_RETURN((*grads)[1], Neg(t));
        }
        if (needs[2]) {
          MT_ASSIGN_OR_RETURN(Tensor t, Mul(s.sum_sq, co.k));
          MT_ASSIGN_OR_RETURN(Tensor inv2, Mul(co.inv, co.inv));
          MT_ASSIGN_OR_RETURN(t, Mul(t, inv2));
          MT_ASSIGN_OR_RETURN((*grads)[2], Scale(t, -0.5));
        }
        if (needs[3]) (*grads)[3] = s.sum;
        if (needs[4]) {
          MT_ASSIGN_OR_RETURN((*grads)[4], Mul(s.sum_sq, co.inv));
        }
        return absl::OkStatus();
      });

// dx per row from the kernels; with xhat = (x - mean) * rstd:
// d gamma = sum over rows of dy * xhat, d beta = sum of dy (the column sums
// of BatchNormalization's gradient).
MT_OP(kLayerNormalizationOp, "LayerNormalization",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        constexpr const char* kGrad = "LayerNormalizationGrad";
        const Tensor& x = op.inputs[0];
        const Tensor& gamma = op.inputs[1];
        const Tensor& dy = g[0];
        const auto& saved = std::any_cast<const LayerNormSaved&>(op.attrs);
        int64_t rows, cols;
        RowsCols(x, &rows, &cols);
        const bool want_params = needs[1] || needs[2];
        MT_ASSIGN_OR_RETURN(Tensor dx,
                            Tensor::Empty(x.dtype(), x.shape(), x.device()));
        Tensor xhat;
        if (want_params) {
          MT_ASSIGN_OR_RETURN(xhat,
                              Tensor::Empty(x.dtype(), x.shape(), x.device()));
        }
        if (x.device().is_cuda()) {
          MT_RETURN_IF_ERROR(KernelError(
              kGrad,
              cuda::LayerNormBackward(x.dtype(), x.raw_data(), gamma.raw_data(),
                                      dy.raw_data(), saved.mean.raw_data(),
                                      saved.rstd.raw_data(), dx.raw_data(),
                                      want_params ? xhat.raw_data() : nullptr,
                                      rows, cols, x.device().index),
              {&x, &dy}));
        } else {
          MT_DISPATCH_FLOAT(x.dtype(), T, {
            LayerNormBackwardCpu<T>(
                x.data<T>(), gamma.data<T>(), dy.data<T>(),
                saved.mean.data<T>(), saved.rstd.data<T>(), dx.data<T>(),
                want_params ? xhat.data<T>() : nullptr, rows, cols);
          });
        }
        if (needs[0]) (*grads)[0] = std::move(dx);
        if (want_params) {
          MT_ASSIGN_OR_RETURN(ChannelSumsResult s,
                              Sums(kGrad, xhat, dy, nullptr));
          if (needs[1]) (*grads)[1] = std::move(s.sum_sq);
          if (needs[2]) (*grads)[2] = std::move(s.sum);
        }
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
