#include "tensor/ops/depthwise_conv_ops.h"

#include <algorithm>
#include <utility>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/ops/window.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kDepthwiseConv2DOp);
}  // namespace
namespace {

constexpr const char* kOp = "DepthwiseConv2D";
using Geometry = cuda::DepthwiseGeometry;

// What the gradient needs: the geometry and the operands as the forward
// pass read them (rounded to bfloat16 under mixed precision).
struct Attrs {
  Geometry geo;
  Tensor x, filter;
  bool bf16 = false;
};

// `t` as a product reads it under bf16: itself when its values are
// bfloat16 already (a layer output the containers rounded), else a
// rounded copy.
absl::StatusOr<Tensor> ReadAsBf16(const Tensor& t) {
  const Bf16Rendering* r = t.bf16_rendering();
  if (r != nullptr && r->values_rounded) return t;
  return RoundedToBFloat16(t);
}

absl::StatusOr<Geometry> MakeGeometry(const Tensor& x, const Tensor& f,
                                      const Conv2DOptions& opt) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x, &f}));
  if (x.rank() != 4 || f.rank() != 4) {
    return internal::OpError(
        kOp, "need input NHWC and filter [KH, KW, C, M] (rank 4)", {&x, &f});
  }
  if (x.dim(3) != f.dim(2)) {
    return internal::OpError(kOp, "input channels differ from the filter's",
                             {&x, &f});
  }
  if (opt.stride_h < 1 || opt.stride_w < 1) {
    return internal::OpError(kOp, "strides must be >= 1", {&x, &f});
  }
  if (opt.dilation_h < 1 || opt.dilation_w < 1) {
    return internal::OpError(kOp, "dilations must be >= 1", {&x, &f});
  }
  if (f.dim(0) < 1 || f.dim(1) < 1 || f.dim(3) < 1) {
    // As the GPU kernels refuse them: no window, or no filters.
    return internal::OpError(
        kOp, "the filter's window and multiplier must be >= 1", {&x, &f});
  }
  return Geometry{
      MakeImageWindow(x.shape(), f.dim(0), f.dim(1), opt.stride_h, opt.stride_w,
                      opt.padding, opt.dilation_h, opt.dilation_w),
      f.dim(3)};
}

// Calls fn(pixel, in, tap) for every output pixel of output rows [r0, r1)
// (row n * oh + oy) in order (image, row, column) and every tap of its
// window inside the image in row-major order: `pixel` the output pixel's
// index (n * oh + oy) * ow + ox, `in` the offset of its input cell's first
// channel, `tap` the index kh * kw_size + kw.
template <typename F>
void ForEachTap(const ImageWindow& g, int64_t r0, int64_t r1, F fn) {
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t i = row / g.oh, oy = row % g.oh;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t pixel = row * g.ow + ox;
      for (int64_t kh = 0; kh < g.kh; ++kh) {
        const int64_t iy = oy * g.sh - g.pt + kh * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kw = 0; kw < g.kw; ++kw) {
          const int64_t ix = ox * g.sw - g.pl + kw * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          fn(pixel, ((i * g.h + iy) * g.w + ix) * g.c, kh * g.kw + kw);
        }
      }
    }
  }
}

// y[n, oy, ox, c*M + m] = sum over taps (kh, kw), in row-major order, of
// x[n, iy, ix, c] * f[kh, kw, c, m]. Output rows split over threads (a
// batch of one still uses them all).
template <typename T>
void Forward(const Geometry& geo, const T* x, const T* f, T* y) {
  const ImageWindow& g = geo.window;
  const int64_t cm = g.c * geo.m;
  ParallelFor(g.n * g.oh, 1, [&](int64_t begin, int64_t end) {
    std::fill(y + begin * g.ow * cm, y + end * g.ow * cm, T(0));
    ForEachTap(g, begin, end, [&](int64_t pixel, int64_t in, int64_t tap) {
      T* out = y + pixel * cm;
      const T* w = f + tap * cm;
      for (int64_t c = 0; c < g.c; ++c) {
        for (int64_t m = 0; m < geo.m; ++m) {
          out[c * geo.m + m] += x[in + c] * w[c * geo.m + m];
        }
      }
    });
  });
}

// dx (zeroed by the caller) += each output's gradient times its taps,
// outputs in increasing order; images split over threads.
template <typename T>
void InputGrad(const Geometry& geo, const T* dy, const T* f, T* dx) {
  const ImageWindow& g = geo.window;
  const int64_t cm = g.c * geo.m;
  ParallelFor(g.n, 1, [&](int64_t begin, int64_t end) {
    ForEachTap(g, begin * g.oh, end * g.oh,
               [&](int64_t pixel, int64_t in, int64_t tap) {
                 const T* grad = dy + pixel * cm;
                 const T* w = f + tap * cm;
                 for (int64_t c = 0; c < g.c; ++c) {
                   T sum = 0;
                   for (int64_t m = 0; m < geo.m; ++m) {
                     sum += grad[c * geo.m + m] * w[c * geo.m + m];
                   }
                   dx[in + c] += sum;
                 }
               });
  });
}

// dw[kh, kw, c, m] = sum over (image, row, column) in that order of
// x[n, iy, ix, c] * dy[n, oy, ox, c*M + m]. Channels split over threads, so
// each sum's order does not depend on the thread count.
template <typename T>
void FilterGrad(const Geometry& geo, const T* x, const T* dy, T* dw) {
  const ImageWindow& g = geo.window;
  const int64_t cm = g.c * geo.m;
  std::fill_n(dw, g.kh * g.kw * cm, T(0));
  // Blocks of channels large enough to amortise the walk over the images.
  const int64_t grain = std::max<int64_t>(1, 16 / geo.m);
  ParallelFor(g.c, grain, [&](int64_t c0, int64_t c1) {
    ForEachTap(g, 0, g.n * g.oh, [&](int64_t pixel, int64_t in, int64_t tap) {
      const T* grad = dy + pixel * cm;
      T* w = dw + tap * cm;
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t m = 0; m < geo.m; ++m) {
          w[c * geo.m + m] += x[in + c] * grad[c * geo.m + m];
        }
      }
    });
  });
}

absl::Status DepthwiseGrads(const Attrs& a, const Tensor& dy_in,
                            absl::Span<const bool> needs, Grads* grads) {
  Tensor dy = dy_in;
  if (a.bf16) {
    MT_ASSIGN_OR_RETURN(dy, RoundedToBFloat16(dy_in));
  }
  const Geometry& geo = a.geo;
  const Device device = dy.device();
  if (needs[0]) {
    Tensor dx;
    if (device.is_cuda()) {
      MT_ASSIGN_OR_RETURN(dx, Tensor::Empty(dy.dtype(), a.x.shape(), device));
      MT_RETURN_IF_ERROR(internal::KernelError(
          "DepthwiseConv2DBackpropInput",
          cuda::DepthwiseConv2DInputGrad(dy.dtype(), dy.raw_data(),
                                         a.filter.raw_data(), geo,
                                         dx.raw_data(), device.index),
          {&dy}));
    } else {
      MT_RETURN_IF_ERROR(
          internal::CheckHost("DepthwiseConv2DBackpropInput", {&dy}));
      dx = Tensor::HostZeros(dy.dtype(), a.x.shape());
      MT_DISPATCH_FLOAT(
          dy.dtype(), T,
          InputGrad<T>(geo, dy.data<T>(), a.filter.data<T>(), dx.data<T>()));
    }
    (*grads)[0] = std::move(dx);
  }
  if (needs[1]) {
    MT_ASSIGN_OR_RETURN(Tensor dw,
                        Tensor::Empty(dy.dtype(), a.filter.shape(), device));
    if (device.is_cuda()) {
      MT_ASSIGN_OR_RETURN(Tensor partial,
                          Tensor::Empty(dy.dtype(),
                                        {cuda::DepthwiseFilterGradSegments(geo),
                                         a.filter.num_elements()},
                                        device));
      MT_RETURN_IF_ERROR(internal::KernelError(
          "DepthwiseConv2DBackpropFilter",
          cuda::DepthwiseConv2DFilterGrad(
              dy.dtype(), a.x.raw_data(), dy.raw_data(), geo,
              partial.raw_data(), dw.raw_data(), device.index),
          {&dy}));
    } else {
      MT_RETURN_IF_ERROR(
          internal::CheckHost("DepthwiseConv2DBackpropFilter", {&dy}));
      MT_DISPATCH_FLOAT(
          dy.dtype(), T,
          FilterGrad<T>(geo, a.x.data<T>(), dy.data<T>(), dw.data<T>()));
    }
    (*grads)[1] = std::move(dw);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> DepthwiseConv2D(const Tensor& x, const Tensor& filter,
                                       const Conv2DOptions& options) {
  MT_ASSIGN_OR_RETURN(const Geometry geo, MakeGeometry(x, filter, options));
  if (x.device() != filter.device()) {
    return internal::OpError(kOp, "input and filter on different devices",
                             {&x, &filter});
  }
  Attrs a{geo, x, filter, internal::ProductsReadBf16(x)};
  if (a.bf16) {
    MT_ASSIGN_OR_RETURN(a.x, ReadAsBf16(x));
    MT_ASSIGN_OR_RETURN(a.filter, ReadAsBf16(filter));
  }
  const ImageWindow& g = geo.window;
  MT_ASSIGN_OR_RETURN(
      Tensor y,
      Tensor::Empty(x.dtype(), {g.n, g.oh, g.ow, g.c * geo.m}, x.device()));
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(internal::KernelError(
        kOp,
        cuda::DepthwiseConv2DForward(x.dtype(), a.x.raw_data(),
                                     a.filter.raw_data(), geo, y.raw_data(),
                                     x.device().index),
        {&x, &filter}));
  } else {
    MT_RETURN_IF_ERROR(internal::CheckHost(kOp, {&x, &filter}));
    MT_DISPATCH_FLOAT(
        x.dtype(), T,
        Forward<T>(geo, a.x.data<T>(), a.filter.data<T>(), y.data<T>()));
  }
  if (tape::AnyTapeActive()) {
    tape::RecordOperation(kDepthwiseConv2DOp, {x, filter}, {y}, std::move(a));
  }
  return y;
}

namespace {

MT_OP(kDepthwiseConv2DOp, "DepthwiseConv2D",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) {
        return DepthwiseGrads(std::any_cast<const Attrs&>(op.attrs), g[0],
                              needs, grads);
      });

}  // namespace
}  // namespace mirrortrain::ops
