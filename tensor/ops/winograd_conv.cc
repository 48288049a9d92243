#include "tensor/ops/winograd_conv.h"

#include <algorithm>
#include <atomic>

#include "tensor/internal_switches.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"
#include "tensor/winograd.h"

namespace mirrortrain::ops::internal {
namespace {

std::atomic<bool> gpu_winograd{false};
std::atomic<bool> cpu_winograd{false};
std::atomic<int64_t> winograd_calls{0};

using winograd::Pass;

// Tiles per segment of the filter gradient's sum, about: enough products
// (a^2 per segment) to spread over a GPU's SMs where the sum is long (the
// cnn's second conv: 12 544 tiles, 13 segments, 468 products of 965 tiles
// each, instead of 36 products 12 544 long).
constexpr int64_t kSegmentTiles = 1024;
constexpr int64_t kMaxSegments = 128;

// The most one transformed tensor may take (the cnn's second conv at batch
// 256: 116 MB).
constexpr int64_t kMaxTransformBytes = int64_t{1} << 30;

// The forward correlation of g, its tiles in the filter gradient's
// segments (so that the forward's transformed input is the one the filter
// gradient reads; the forward's product takes the padding rows along).
winograd::Geometry ForwardGeometry(const cuda::Conv2DGeometry& g) {
  winograd::Geometry wg{.n = g.n,
                        .h = g.h,
                        .w = g.w,
                        .c = g.c,
                        .oh = g.oh,
                        .ow = g.ow,
                        .o = g.o,
                        .pt = g.pt,
                        .pl = g.pl,
                        .r = static_cast<int>(g.kh)};
  wg.segments = std::clamp<int64_t>(
      (wg.tiles() + kSegmentTiles - 1) / kSegmentTiles, 1, kMaxSegments);
  return wg;
}

// The input gradient's: dy [n, oh, ow, o] correlated with the turned
// filter (o -> c channels) into [n, h, w, c], padded by r - 1 - pt.
winograd::Geometry InputGradGeometry(const cuda::Conv2DGeometry& g) {
  return {.n = g.n,
          .h = g.oh,
          .w = g.ow,
          .c = g.o,
          .oh = g.h,
          .ow = g.w,
          .o = g.c,
          .pt = g.kh - 1 - g.pt,
          .pl = g.kw - 1 - g.pl,
          .r = static_cast<int>(g.kh)};
}

template <int R, typename T>
void RunOnCpu(Pass pass, const winograd::Geometry& g,
              const winograd::Buffers& io) {
  static const winograd::Matrices<T> mx = winograd::MatricesFor<T>(R);
  ParallelFor(winograd::Units(pass, g), 256, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      winograd::RunUnit<R, T>(pass, g, mx, io, u);
    }
  });
}

// One pass from `in` into `out` on their device; `relu_bias` (the output
// passes, may be null): relu(... + bias); `argmax` (kOutputMaxPool, may be
// null): the pool's winners.
absl::Status Transform(Pass pass, const winograd::Geometry& g, const Tensor& in,
                       const Tensor* relu_bias, const Tensor& out,
                       const Tensor* argmax = nullptr) {
  const winograd::Buffers io{
      .in = in.raw_data(),
      .bias = relu_bias != nullptr ? relu_bias->raw_data() : nullptr,
      .relu = relu_bias != nullptr,
      .out = out.raw_data(),
      .argmax = argmax != nullptr ? argmax->data<int32_t>() : nullptr};
  if (in.device().is_cuda()) {
    return cuda::WinogradTransform(pass, in.dtype(), g, io, in.device().index);
  }
  MT_DISPATCH_FLOAT(in.dtype(), T, {
    if (g.r == 3) {
      RunOnCpu<3, T>(pass, g, io);
    } else {
      RunOnCpu<5, T>(pass, g, io);
    }
  });
  return absl::OkStatus();
}

// [a^2 * matrices, rows, cols] scratch of `like`'s dtype and device:
// `matrices` per transform point.
absl::StatusOr<Tensor> Points(const winograd::Geometry& g, const Tensor& like,
                              int64_t rows, int64_t cols,
                              int64_t matrices = 1) {
  const int64_t a = g.alpha();
  return Tensor::Empty(like.dtype(), {a * a * matrices, rows, cols},
                       like.device());
}

// The transform of `input` (kInput) for g: [a^2 * segments, segment rows,
// c], one matrix per point and segment, a point's segments adjacent (so
// also [a^2, rows, c]).
absl::StatusOr<Tensor> TransformInput(const winograd::Geometry& g,
                                      const Tensor& input) {
  MT_ASSIGN_OR_RETURN(Tensor v,
                      Points(g, input, g.segment_rows(), g.c, g.segments));
  MT_RETURN_IF_ERROR(Transform(Pass::kInput, g, input, nullptr, v));
  return v;
}

// The output pass of a correlation: kOutput or kOutputMaxPool, with
// relu(... + bias) (may be null), the pool's winners (may be null).
struct OutputPass {
  Pass pass = Pass::kOutput;
  const Tensor* relu_bias = nullptr;
  const Tensor* argmax = nullptr;
};

// out = the correlation g of `input` with `filter` (read by `filter_pass`),
// written by `output`; *transformed (if not null) gets the input's
// transform.
absl::Status Correlate(const winograd::Geometry& g, const Tensor& input,
                       const Tensor& filter, Pass filter_pass,
                       const OutputPass& output, Tensor& out,
                       Tensor* transformed = nullptr) {
  MT_ASSIGN_OR_RETURN(Tensor v, TransformInput(g, input));
  MT_ASSIGN_OR_RETURN(Tensor u, Points(g, input, g.c, g.o));
  MT_RETURN_IF_ERROR(Transform(filter_pass, g, filter, nullptr, u));
  // One product per point over all its rows (the padding rows' outputs are
  // never read).
  MT_ASSIGN_OR_RETURN(v, v.Reshaped({g.alpha() * g.alpha(), g.rows(), g.c}));
  MT_ASSIGN_OR_RETURN(Tensor m, Points(g, input, g.rows(), g.o));
  MT_RETURN_IF_ERROR(Gemm(v, u, false, false, 1.0, 0.0, m));
  if (transformed != nullptr) *transformed = v;
  MT_RETURN_IF_ERROR(
      Transform(output.pass, g, m, output.relu_bias, out, output.argmax));
  winograd_calls.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace

bool WinogradConvTakes(const cuda::Conv2DGeometry& g, const Tensor& x) {
  const bool on =
      x.device().is_cuda() ? gpu_winograd.load() : cpu_winograd.load();
  if (!on || g.sh != 1 || g.sw != 1 || g.dilated() || g.kh != g.kw ||
      !winograd::Supported(g.kh) || g.pt < 0 || g.pl < 0 || g.pt > g.kh - 1 ||
      g.pl > g.kw - 1) {
    return false;
  }
  if (g.n == 0 || g.c == 0 || g.o == 0 || g.oh == 0 || g.ow == 0) return false;
  // The transformed tensors (a^2 / 4 times an image's size, 9x for 5x5) are
  // made whole, not in chunks as im2col's columns: larger ones (and sizes
  // past cuBLAS's 32-bit dimensions) stay on im2col. The input gradient's
  // tiles cover the input, the others' the output.
  // The filter gradient's per-segment sums dU ([a^2, segments, c, o])
  // are bounded alike: with over a thousand output channels they can pass
  // the transforms.
  const int64_t a = g.kh + 1;
  const int64_t tiles = g.n * std::max((g.oh + 1) / 2 * ((g.ow + 1) / 2),
                                       (g.h + 1) / 2 * ((g.w + 1) / 2));
  const int64_t size = static_cast<int64_t>(DTypeSize(x.dtype()));
  if (a * a * tiles * std::max(g.c, g.o) * size > kMaxTransformBytes ||
      a * a * ForwardGeometry(g).segments * g.c * g.o * size >
          kMaxTransformBytes) {
    return false;
  }
  return x.dtype() == DType::kF64 ||
         (x.dtype() == DType::kF32 &&
          GetMatMulPrecision() == MatMulPrecision::kFp32);
}

absl::Status WinogradConv2D(const cuda::Conv2DGeometry& g, const Tensor& x,
                            const Tensor& filter, const Tensor* relu_bias,
                            Tensor& y, Tensor* transformed_input) {
  return Correlate(ForwardGeometry(g), x, filter, Pass::kFilter,
                   {.relu_bias = relu_bias}, y, transformed_input);
}

absl::Status WinogradConv2DMaxPool(const cuda::Conv2DGeometry& g,
                                   const Tensor& x, const Tensor& filter,
                                   const Tensor* relu_bias, Tensor& y,
                                   Tensor* argmax, Tensor* transformed_input) {
  return Correlate(
      ForwardGeometry(g), x, filter, Pass::kFilter,
      {.pass = Pass::kOutputMaxPool, .relu_bias = relu_bias, .argmax = argmax},
      y, transformed_input);
}

absl::Status WinogradConv2DInputGrad(const cuda::Conv2DGeometry& g,
                                     const Tensor& dy, const Tensor& filter,
                                     Tensor& dx) {
  return Correlate(InputGradGeometry(g), dy, filter, Pass::kFilterRotated, {},
                   dx);
}

absl::Status WinogradConv2DFilterGrad(const cuda::Conv2DGeometry& g,
                                      const Tensor& x, const Tensor& dy,
                                      Tensor& dfilter,
                                      const Tensor& transformed_input) {
  const winograd::Geometry wg = ForwardGeometry(g);
  const int64_t segment_rows = wg.segment_rows();
  Tensor v;
  if (transformed_input.defined()) {
    MT_ASSIGN_OR_RETURN(
        v, transformed_input.Reshaped(
               {wg.alpha() * wg.alpha() * wg.segments, segment_rows, wg.c}));
  } else {
    MT_ASSIGN_OR_RETURN(v, TransformInput(wg, x));
  }
  MT_ASSIGN_OR_RETURN(Tensor dm,
                      Points(wg, x, segment_rows, wg.o, wg.segments));
  MT_RETURN_IF_ERROR(Transform(Pass::kOutputAdjoint, wg, dy, nullptr, dm));
  // dU[p, s] = V[p, s]^T dM[p, s]: each point's [c, o] over one segment's
  // tiles; the adjoint pass adds the segments in order.
  MT_ASSIGN_OR_RETURN(Tensor du, Points(wg, x, wg.c, wg.o, wg.segments));
  MT_RETURN_IF_ERROR(Gemm(v, dm, true, false, 1.0, 0.0, du));
  MT_RETURN_IF_ERROR(Transform(Pass::kFilterAdjoint, wg, du, nullptr, dfilter));
  winograd_calls.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

void SetConvGpuWinograd(bool enabled) { gpu_winograd.store(enabled); }
void SetConvCpuWinograd(bool enabled) { cpu_winograd.store(enabled); }
int64_t WinogradConvCalls() {
  return winograd_calls.load(std::memory_order_relaxed);
}

MT_REGISTER(InternalSwitch,
            {.name = "conv_gpu_winograd",
             .doc = "stride-1 3x3 and 5x5 convolutions in full f32 as "
                    "Winograd F(2x2, rxr): transforms around one batched "
                    "GEMM; default off (on: instead of im2col, GEMMs and the "
                    "implicit input gradient)",
             .set = &SetConvGpuWinograd,
             .calls = &WinogradConvCalls});

}  // namespace mirrortrain::ops::internal
