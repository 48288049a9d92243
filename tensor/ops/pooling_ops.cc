#include "tensor/ops/pooling_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/gradient_tape.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

struct PoolGeometry {
  int64_t n, h, w, c;
  Window1D wy, wx;
  Pool2DOptions opt;
  // Input rows [y0, y1) and columns [x0, x1) of output (oy, ox).
  int64_t y0(int64_t oy) const {
    return std::max<int64_t>(oy * opt.stride_h - wy.pad_before, 0);
  }
  int64_t y1(int64_t oy) const {
    return std::min<int64_t>(oy * opt.stride_h - wy.pad_before + opt.ksize_h,
                             h);
  }
  int64_t x0(int64_t ox) const {
    return std::max<int64_t>(ox * opt.stride_w - wx.pad_before, 0);
  }
  int64_t x1(int64_t ox) const {
    return std::min<int64_t>(ox * opt.stride_w - wx.pad_before + opt.ksize_w,
                             w);
  }
};

struct PoolAttrs {
  PoolGeometry geo;
};

// Channels innermost: each window cell is a contiguous run of c values,
// folded into the running maxima in one vectorisable loop. A NaN wins and
// then stays, so it propagates as in TensorFlow.
template <typename T>
void MaxPoolForward(const PoolGeometry& g, const T* x, T* y) {
  ParallelFor(g.n * g.wy.out, 1, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t i = row / g.wy.out, oy = row % g.wy.out;
      for (int64_t ox = 0; ox < g.wx.out; ++ox) {
        T* best = y + ((i * g.wy.out + oy) * g.wx.out + ox) * g.c;
        std::fill_n(best, g.c, -std::numeric_limits<T>::infinity());
        for (int64_t yy = g.y0(oy); yy < g.y1(oy); ++yy) {
          for (int64_t xx = g.x0(ox); xx < g.x1(ox); ++xx) {
            const T* cell = x + ((i * g.h + yy) * g.w + xx) * g.c;
            for (int64_t ch = 0; ch < g.c; ++ch) {
              const T v = cell[ch];
              best[ch] = (v > best[ch] || v != v) ? v : best[ch];
            }
          }
        }
      }
    }
  });
}

// Each output's gradient goes to the first cell of its window (row-major)
// holding the maximum, TensorFlow's CPU rule; windows of image i lie in
// image i, so images split over threads.
template <typename T>
void MaxPoolBackward(const PoolGeometry& g, const T* x, const T* y, const T* dy,
                     T* dx) {
  ParallelFor(g.n, 1, [&](int64_t begin, int64_t end) {
    // Per channel: has this window's gradient been routed yet. Cells are
    // visited in row-major order with channels innermost (contiguous).
    std::vector<uint8_t> routed(g.c);
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t oy = 0; oy < g.wy.out; ++oy) {
        for (int64_t ox = 0; ox < g.wx.out; ++ox) {
          const int64_t out = ((i * g.wy.out + oy) * g.wx.out + ox) * g.c;
          const T* m = y + out;
          const T* grad = dy + out;
          std::fill(routed.begin(), routed.end(), 0);
          for (int64_t yy = g.y0(oy); yy < g.y1(oy); ++yy) {
            for (int64_t xx = g.x0(ox); xx < g.x1(ox); ++xx) {
              const int64_t base = ((i * g.h + yy) * g.w + xx) * g.c;
              const T* cell = x + base;
              T* d = dx + base;
              for (int64_t ch = 0; ch < g.c; ++ch) {
                const bool hit =
                    !routed[ch] && (cell[ch] == m[ch] ||
                                    (cell[ch] != cell[ch] && m[ch] != m[ch]));
                d[ch] += hit ? grad[ch] : T(0);
                routed[ch] |= hit;
              }
            }
          }
        }
      }
    }
  });
}

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
  PoolGeometry g{x.dim(0), x.dim(1), x.dim(2), x.dim(3), {}, {}, opt};
  g.wy = ComputeWindow(g.h, opt.ksize_h, opt.stride_h, opt.padding);
  g.wx = ComputeWindow(g.w, opt.ksize_w, opt.stride_w, opt.padding);
  Tensor y = Tensor::HostEmpty(x.dtype(), {g.n, g.wy.out, g.wx.out, g.c});
  MT_DISPATCH_FLOAT(x.dtype(), T,
                    MaxPoolForward<T>(g, x.data<T>(), y.data<T>()));
  tape::RecordOperation(kOp, {x}, {y}, PoolAttrs{g});
  return y;
}

namespace {

using Grads = std::vector<std::optional<Tensor>>;

MT_REGISTER_GRADIENT(
    "MaxPool2D",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      const PoolGeometry& geo = std::any_cast<const PoolAttrs&>(op.attrs).geo;
      const Tensor& dy = g[0];
      MT_RETURN_IF_ERROR(internal::CheckHost("MaxPool2DGrad", {&dy}));
      const Tensor& x = op.inputs[0];
      Tensor dx = Tensor::HostZeros(dy.dtype(), x.shape());
      MT_DISPATCH_FLOAT(
          dy.dtype(), T,
          MaxPoolBackward<T>(geo, x.data<T>(), op.outputs[0].template data<T>(),
                             dy.data<T>(), dx.data<T>()));
      (*grads)[0] = std::move(dx);
      return absl::OkStatus();
    });

}  // namespace
}  // namespace mirrortrain::ops
