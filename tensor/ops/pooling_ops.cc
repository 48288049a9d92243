#include "tensor/ops/pooling_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kMaxPool2DOp);
}  // namespace
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

cuda::Pool2DGeometry CudaGeometry(const PoolGeometry& g) {
  cuda::Pool2DGeometry c;
  c.n = g.n;
  c.h = g.h;
  c.w = g.w;
  c.c = g.c;
  c.out_h = g.wy.out;
  c.out_w = g.wx.out;
  c.ksize_h = g.opt.ksize_h;
  c.ksize_w = g.opt.ksize_w;
  c.stride_h = g.opt.stride_h;
  c.stride_w = g.opt.stride_w;
  c.pad_top = g.wy.pad_before;
  c.pad_left = g.wx.pad_before;
  return c;
}

// `argmax` (int32, shaped like the output) holds, per output, the offset
// within its image of the input cell that won; recorded only under a tape.
struct PoolAttrs {
  PoolGeometry geo;
  Tensor argmax;
};

// Channels innermost: each window cell is a contiguous run of c values,
// folded into the running maxima in one vectorisable loop. The first
// maximum in row-major order wins (TensorFlow's CPU rule); a NaN beats
// every number and the first NaN then stays, so NaNs propagate. With
// `argmax` non-null the winner's offset within the image is kept too.
template <typename T>
void MaxPoolForward(const PoolGeometry& g, const T* x, T* y, int32_t* argmax) {
  const int64_t image = g.h * g.w * g.c;
  ParallelFor(g.n * g.wy.out, 1, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t i = row / g.wy.out, oy = row % g.wy.out;
      const T* img = x + i * image;
      for (int64_t ox = 0; ox < g.wx.out; ++ox) {
        const int64_t out = ((i * g.wy.out + oy) * g.wx.out + ox) * g.c;
        T* best = y + out;
        int32_t* arg = argmax != nullptr ? argmax + out : nullptr;
        // Windows always hold at least one real cell: start from the first.
        const int64_t first = (g.y0(oy) * g.w + g.x0(ox)) * g.c;
        std::copy_n(img + first, g.c, best);
        if (arg != nullptr) {
          for (int64_t ch = 0; ch < g.c; ++ch) {
            arg[ch] = static_cast<int32_t>(first + ch);
          }
        }
        for (int64_t yy = g.y0(oy); yy < g.y1(oy); ++yy) {
          for (int64_t xx = g.x0(ox); xx < g.x1(ox); ++xx) {
            const int64_t base = (yy * g.w + xx) * g.c;
            if (base == first) continue;
            const T* cell = img + base;
            if (arg == nullptr) {
              for (int64_t ch = 0; ch < g.c; ++ch) {
                const T v = cell[ch], b = best[ch];
                best[ch] = (v > b || (v != v && b == b)) ? v : b;
              }
              continue;
            }
            // Bitwise, branch-free and with int32 lanes: vectorises.
            const int32_t base32 = static_cast<int32_t>(base);
            const int32_t channels = static_cast<int32_t>(g.c);
            for (int32_t ch = 0; ch < channels; ++ch) {
              const T v = cell[ch], b = best[ch];
              const bool take = (v > b) | ((v != v) & (b == b));
              best[ch] = take ? v : b;
              arg[ch] = take ? base32 + ch : arg[ch];
            }
          }
        }
      }
    }
  });
}

// Scatters each output's gradient to its recorded winner; windows of image
// i lie in image i, so images split over threads (dx zeroed by the caller;
// overlapping windows add up).
template <typename T>
void MaxPoolBackward(const PoolGeometry& g, const int32_t* argmax, const T* dy,
                     T* dx) {
  const int64_t outputs = g.wy.out * g.wx.out * g.c;
  const int64_t image = g.h * g.w * g.c;
  ParallelFor(g.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int32_t* arg = argmax + i * outputs;
      const T* grad = dy + i * outputs;
      T* d = dx + i * image;
      for (int64_t o = 0; o < outputs; ++o) d[arg[o]] += grad[o];
    }
  });
}

}  // namespace

absl::StatusOr<Tensor> MaxPool2D(const Tensor& x, const Pool2DOptions& opt) {
  constexpr const char* kOp = "MaxPool2D";
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x}));
  MT_RETURN_IF_ERROR(internal::CheckRank(kOp, x, 4, "input (NHWC)"));
  if (opt.ksize_h < 1 || opt.ksize_w < 1 || opt.stride_h < 1 ||
      opt.stride_w < 1) {
    return internal::OpError(kOp, "window sizes and strides must be >= 1",
                             {&x});
  }
  PoolGeometry g{x.dim(0), x.dim(1), x.dim(2), x.dim(3), {}, {}, opt};
  g.wy = ComputeWindow(g.h, opt.ksize_h, opt.stride_h, opt.padding);
  g.wx = ComputeWindow(g.w, opt.ksize_w, opt.stride_w, opt.padding);
  if (g.h * g.w * g.c > std::numeric_limits<int32_t>::max()) {
    return internal::OpError(kOp, "an image holds more than 2^31-1 values",
                             {&x});
  }
  const Shape out_shape{g.n, g.wy.out, g.wx.out, g.c};
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), out_shape, x.device()));
  // The winners are only needed for a gradient.
  Tensor argmax;
  const bool record = tape::AnyTapeActive();
  if (record) {
    MT_ASSIGN_OR_RETURN(argmax,
                        Tensor::Empty(DType::kI32, out_shape, x.device()));
  }
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(internal::KernelError(
        kOp,
        cuda::MaxPool2DForward(
            x.dtype(), x.raw_data(), CudaGeometry(g), y.raw_data(),
            record ? argmax.data<int32_t>() : nullptr, x.device().index),
        {&x}));
  } else {
    MT_DISPATCH_FLOAT(
        x.dtype(), T,
        MaxPoolForward<T>(g, x.data<T>(), y.data<T>(),
                          record ? argmax.data<int32_t>() : nullptr));
  }
  if (record)
    tape::RecordOperation(kMaxPool2DOp, {x}, {y}, PoolAttrs{g, argmax});
  return y;
}

namespace {

MT_OP(kMaxPool2DOp, "MaxPool2D",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const PoolAttrs& attrs = std::any_cast<const PoolAttrs&>(op.attrs);
        const Tensor& dy = g[0];
        const Tensor& x = op.inputs[0];
        if (dy.device().is_cuda()) {
          MT_ASSIGN_OR_RETURN(
              Tensor dx, Tensor::Empty(dy.dtype(), x.shape(), dy.device()));
          MT_RETURN_IF_ERROR(internal::KernelError(
              "MaxPool2DGrad",
              cuda::MaxPool2DBackward(dy.dtype(), attrs.argmax.data<int32_t>(),
                                      dy.raw_data(), CudaGeometry(attrs.geo),
                                      dx.raw_data(), dy.device().index),
              {&dy}));
          (*grads)[0] = std::move(dx);
          return absl::OkStatus();
        }
        MT_RETURN_IF_ERROR(internal::CheckHost("MaxPool2DGrad", {&dy}));
        Tensor dx = Tensor::HostZeros(dy.dtype(), x.shape());
        MT_DISPATCH_FLOAT(
            dy.dtype(), T,
            MaxPoolBackward<T>(attrs.geo, attrs.argmax.data<int32_t>(),
                               dy.data<T>(), dx.data<T>()));
        (*grads)[0] = std::move(dx);
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
