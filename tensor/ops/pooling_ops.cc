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
MT_DECLARE_OP(kAvgPool2DOp);
}  // namespace
namespace {

// The kernels' geometry (cuda_kernels.h) is the CPU's too: one struct, no
// field-by-field copy between the two.
using PoolGeometry = cuda::Pool2DGeometry;

// Input rows [y0, y1) and columns [x0, x1) of output (oy, ox): its window
// clipped to the image.
struct PoolWindow {
  int64_t y0, y1, x0, x1;
  int64_t cells() const { return (y1 - y0) * (x1 - x0); }
};
PoolWindow WindowOf(const PoolGeometry& g, int64_t oy, int64_t ox) {
  const int64_t top = oy * g.sh - g.pt;
  const int64_t left = ox * g.sw - g.pl;
  return {std::max<int64_t>(top, 0), std::min(top + g.kh, g.h),
          std::max<int64_t>(left, 0), std::min(left + g.kw, g.w)};
}

// `argmax` (int32, shaped like the output) holds, per output, the offset
// within its image of the input cell that won; recorded only under a tape.
struct PoolAttrs {
  PoolGeometry geo;
  Tensor argmax;
};

// Calls fn(image, out, win) for every output position: `image` the offset
// of its image in the input, `out` the offset of its first channel in the
// output, `win` its window. Rows of outputs are split over threads.
template <typename F>
void ForEachWindow(const PoolGeometry& g, F fn) {
  ParallelFor(g.n * g.oh, 1, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t i = row / g.oh, oy = row % g.oh;
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        fn(i * g.h * g.w * g.c, ((i * g.oh + oy) * g.ow + ox) * g.c,
           WindowOf(g, oy, ox));
      }
    }
  });
}

// Channels innermost: each window cell is a contiguous run of c values,
// folded into the running maxima in one vectorisable loop. The first
// maximum in row-major order wins (TensorFlow's CPU rule); a NaN beats
// every number and the first NaN then stays, so NaNs propagate. With
// `argmax` non-null the winner's offset within the image is kept too.
template <typename T>
void MaxPoolForward(const PoolGeometry& g, const T* x, T* y, int32_t* argmax) {
  ForEachWindow(g, [&](int64_t image, int64_t out, const PoolWindow& win) {
    const T* img = x + image;
    T* best = y + out;
    int32_t* arg = argmax != nullptr ? argmax + out : nullptr;
    // Windows always hold at least one real cell: start from the first.
    const int64_t first = (win.y0 * g.w + win.x0) * g.c;
    std::copy_n(img + first, g.c, best);
    if (arg != nullptr) {
      for (int64_t ch = 0; ch < g.c; ++ch) {
        arg[ch] = static_cast<int32_t>(first + ch);
      }
    }
    for (int64_t yy = win.y0; yy < win.y1; ++yy) {
      for (int64_t xx = win.x0; xx < win.x1; ++xx) {
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
  });
}

// Scatters each output's gradient to its recorded winner; windows of image
// i lie in image i, so images split over threads (dx zeroed by the caller;
// overlapping windows add up).
template <typename T>
void MaxPoolBackward(const PoolGeometry& g, const int32_t* argmax, const T* dy,
                     T* dx) {
  const int64_t outputs = g.oh * g.ow * g.c;
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

// Mean of each window's cells inside the image.
template <typename T>
void AvgPoolForward(const PoolGeometry& g, const T* x, T* y) {
  ForEachWindow(g, [&](int64_t image, int64_t offset, const PoolWindow& win) {
    const T* img = x + image;
    T* out = y + offset;
    std::fill_n(out, g.c, T(0));
    for (int64_t yy = win.y0; yy < win.y1; ++yy) {
      for (int64_t xx = win.x0; xx < win.x1; ++xx) {
        const T* cell = img + (yy * g.w + xx) * g.c;
        for (int64_t ch = 0; ch < g.c; ++ch) out[ch] += cell[ch];
      }
    }
    const T n = static_cast<T>(win.cells());
    for (int64_t ch = 0; ch < g.c; ++ch) out[ch] /= n;
  });
}

// Spreads each output's gradient evenly over its window, outputs in
// increasing order (the GPU gathers in the same order: the same bits).
template <typename T>
void AvgPoolBackward(const PoolGeometry& g, const T* dy, T* dx) {
  const int64_t image = g.h * g.w * g.c;
  ParallelFor(g.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T* d = dx + i * image;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const T* grad = dy + ((i * g.oh + oy) * g.ow + ox) * g.c;
          const PoolWindow win = WindowOf(g, oy, ox);
          const T n = static_cast<T>(win.cells());
          for (int64_t yy = win.y0; yy < win.y1; ++yy) {
            for (int64_t xx = win.x0; xx < win.x1; ++xx) {
              T* cell = d + (yy * g.w + xx) * g.c;
              for (int64_t ch = 0; ch < g.c; ++ch) cell[ch] += grad[ch] / n;
            }
          }
        }
      }
    }
  });
}

absl::StatusOr<PoolGeometry> MakeGeometry(const char* op, const Tensor& x,
                                          const Pool2DOptions& opt) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, {&x}));
  MT_RETURN_IF_ERROR(internal::CheckRank(op, x, 4, "input (NHWC)"));
  if (opt.ksize_h < 1 || opt.ksize_w < 1 || opt.stride_h < 1 ||
      opt.stride_w < 1) {
    return internal::OpError(op, "window sizes and strides must be >= 1", {&x});
  }
  const PoolGeometry g =
      MakeImageWindow(x.shape(), opt.ksize_h, opt.ksize_w, opt.stride_h,
                      opt.stride_w, opt.padding);
  if (g.h * g.w * g.c > std::numeric_limits<int32_t>::max()) {
    return internal::OpError(op, "an image holds more than 2^31-1 values",
                             {&x});
  }
  return g;
}

}  // namespace

absl::StatusOr<Tensor> MaxPool2D(const Tensor& x, const Pool2DOptions& opt) {
  constexpr const char* kOp = "MaxPool2D";
  MT_ASSIGN_OR_RETURN(const PoolGeometry g, MakeGeometry(kOp, x, opt));
  const Shape out_shape{g.n, g.oh, g.ow, g.c};
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
        cuda::MaxPool2DForward(x.dtype(), x.raw_data(), g, y.raw_data(),
                               record ? argmax.data<int32_t>() : nullptr,
                               x.device().index),
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

absl::StatusOr<Tensor> AvgPool2D(const Tensor& x, const Pool2DOptions& opt) {
  constexpr const char* kOp = "AvgPool2D";
  MT_ASSIGN_OR_RETURN(const PoolGeometry g, MakeGeometry(kOp, x, opt));
  MT_ASSIGN_OR_RETURN(
      Tensor y, Tensor::Empty(x.dtype(), {g.n, g.oh, g.ow, g.c}, x.device()));
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(internal::KernelError(
        kOp,
        cuda::AvgPool2DForward(x.dtype(), x.raw_data(), g, y.raw_data(),
                               x.device().index),
        {&x}));
  } else {
    MT_DISPATCH_FLOAT(x.dtype(), T,
                      AvgPoolForward<T>(g, x.data<T>(), y.data<T>()));
  }
  tape::RecordOperation(kAvgPool2DOp, {x}, {y}, g);
  return y;
}

namespace internal {

absl::StatusOr<Tensor> MaxPool2DGrad(const ImageWindow& window,
                                     const Tensor& argmax, const Tensor& dy,
                                     const Shape& x_shape) {
  if (dy.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor dx,
                        Tensor::Empty(dy.dtype(), x_shape, dy.device()));
    MT_RETURN_IF_ERROR(internal::KernelError(
        "MaxPool2DGrad",
        cuda::MaxPool2DBackward(dy.dtype(), argmax.data<int32_t>(),
                                dy.raw_data(), window, dx.raw_data(),
                                dy.device().index),
        {&dy}));
    return dx;
  }
  MT_RETURN_IF_ERROR(internal::CheckHost("MaxPool2DGrad", {&dy}));
  Tensor dx = Tensor::HostZeros(dy.dtype(), x_shape);
  MT_DISPATCH_FLOAT(dy.dtype(), T,
                    MaxPoolBackward<T>(window, argmax.data<int32_t>(),
                                       dy.data<T>(), dx.data<T>()));
  return dx;
}

}  // namespace internal

namespace {

MT_OP(kMaxPool2DOp, "MaxPool2D",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const PoolAttrs& attrs = std::any_cast<const PoolAttrs&>(op.attrs);
        MT_ASSIGN_OR_RETURN(
            Tensor dx, internal::MaxPool2DGrad(attrs.geo, attrs.argmax, g[0],
                                               op.inputs[0].shape()));
        (*grads)[0] = std::move(dx);
        return absl::OkStatus();
      });

MT_OP(kAvgPool2DOp, "AvgPool2D",
      [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
        const PoolGeometry& geo = std::any_cast<const PoolGeometry&>(op.attrs);
        const Tensor& dy = g[0];
        const Shape& shape = op.inputs[0].shape();
        if (dy.device().is_cuda()) {
          MT_ASSIGN_OR_RETURN(Tensor dx,
                              Tensor::Empty(dy.dtype(), shape, dy.device()));
          MT_RETURN_IF_ERROR(internal::KernelError(
              "AvgPool2DGrad",
              cuda::AvgPool2DBackward(dy.dtype(), dy.raw_data(), geo,
                                      dx.raw_data(), dy.device().index),
              {&dy}));
          (*grads)[0] = std::move(dx);
          return absl::OkStatus();
        }
        Tensor dx = Tensor::HostZeros(dy.dtype(), shape);
        MT_DISPATCH_FLOAT(dy.dtype(), T,
                          AvgPoolBackward<T>(geo, dy.data<T>(), dx.data<T>()));
        (*grads)[0] = std::move(dx);
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
