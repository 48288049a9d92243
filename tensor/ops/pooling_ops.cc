#include "tensor/ops/pooling_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/gradient_tape.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

struct PoolAttrs {
  // Flat input index of each output's winning cell; the gradient's routes.
  Tensor argmax;
};

}  // namespace

absl::StatusOr<Tensor> MaxPool2D(const Tensor& x, const Pool2DOptions& opt) {
  constexpr const char* kOp = "MaxPool2D";
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x}));
  MT_RETURN_IF_ERROR(internal::CheckHost(kOp, {&x}));
  MT_RETURN_IF_ERROR(internal::CheckRank(kOp, x, 4, "input (NHWC)"));
  if (opt.ksize_h < 1 || opt.ksize_w < 1 || opt.stride_h < 1 ||
      opt.stride_w < 1) {
    return internal::OpError(kOp, "window sizes and strides must be >= 1",
                             {&x});
  }
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const Window1D wy = ComputeWindow(h, opt.ksize_h, opt.stride_h, opt.padding);
  const Window1D wx = ComputeWindow(w, opt.ksize_w, opt.stride_w, opt.padding);
  Tensor y = Tensor::HostEmpty(x.dtype(), {n, wy.out, wx.out, c});
  Tensor argmax = Tensor::HostEmpty(DType::kI64, y.shape());
  int64_t* am = argmax.data<int64_t>();
  MT_DISPATCH_FLOAT(x.dtype(), T, {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t oy = 0; oy < wy.out; ++oy) {
        const int64_t y0 =
            std::max<int64_t>(oy * opt.stride_h - wy.pad_before, 0);
        const int64_t y1 = std::min<int64_t>(
            oy * opt.stride_h - wy.pad_before + opt.ksize_h, h);
        for (int64_t ox = 0; ox < wx.out; ++ox) {
          const int64_t x0 =
              std::max<int64_t>(ox * opt.stride_w - wx.pad_before, 0);
          const int64_t x1 = std::min<int64_t>(
              ox * opt.stride_w - wx.pad_before + opt.ksize_w, w);
          const int64_t out = ((i * wy.out + oy) * wx.out + ox) * c;
          for (int64_t ch = 0; ch < c; ++ch) {
            T best = -std::numeric_limits<T>::infinity();
            int64_t best_idx = -1;
            for (int64_t yy = y0; yy < y1; ++yy) {
              for (int64_t xx = x0; xx < x1; ++xx) {
                const int64_t idx = ((i * h + yy) * w + xx) * c + ch;
                // NaN wins, as in TensorFlow, so it propagates.
                if (best_idx < 0 || px[idx] > best || std::isnan(px[idx])) {
                  best = px[idx];
                  best_idx = idx;
                  if (std::isnan(best)) break;
                }
              }
            }
            py[out + ch] = best;
            am[out + ch] = best_idx;
          }
        }
      }
    }
  });
  tape::RecordOperation(kOp, {x}, {y}, PoolAttrs{argmax});
  return y;
}

namespace {

using Grads = std::vector<std::optional<Tensor>>;

MT_REGISTER_GRADIENT(
    "MaxPool2D",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      const Tensor& argmax = std::any_cast<const PoolAttrs&>(op.attrs).argmax;
      const Tensor& dy = g[0];
      MT_RETURN_IF_ERROR(internal::CheckHost("MaxPool2DGrad", {&dy}));
      Tensor dx = Tensor::HostZeros(dy.dtype(), op.inputs[0].shape());
      const int64_t* am = argmax.data<int64_t>();
      MT_DISPATCH_FLOAT(dy.dtype(), T, {
        const T* pg = dy.data<T>();
        T* pd = dx.data<T>();
        for (int64_t i = 0; i < dy.num_elements(); ++i) {
          if (am[i] >= 0) pd[am[i]] += pg[i];
        }
      });
      (*grads)[0] = std::move(dx);
      return absl::OkStatus();
    });

}  // namespace
}  // namespace mirrortrain::ops
