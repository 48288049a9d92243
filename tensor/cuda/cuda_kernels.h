// CUDA kernels for ops beyond elementwise math and GEMM, as seen from plain
// C++: like cuda_backend.h, no CUDA types cross this header, every call
// returns a FailedPrecondition error in builds without CUDA, and kernels go
// on the calling thread's current stream. Pointers are device memory of
// gpu:`device`; shapes and strides count elements.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_KERNELS_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_KERNELS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/cuda/cuda_kernel.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_kind.h"
#include "tensor/image_window.h"
#include "tensor/winograd.h"

namespace mirrortrain::cuda {

// Most dimensions a strided kernel indexes, after size-1 dimensions are
// dropped and contiguous neighbours merged.
inline constexpr int kMaxRank = 8;

// out[i] = f(a[offset_a(i)], b[offset_b(i)]) over the row-major index space
// `out_shape`; a_strides/b_strides (one per output dimension) are 0 where
// that operand is broadcast. Floating dtypes.
MT_CUDA_KERNEL(BroadcastBinary,
               absl::Status(BinaryKind kind, DType dtype, const void* a,
                            absl::Span<const int64_t> a_strides, const void* b,
                            absl::Span<const int64_t> b_strides, void* out,
                            absl::Span<const int64_t> out_shape, int device));

// For every multi-index i of `shape`:
//   dst[dst_offset + sum i_d * dst_strides[d]] =
//       src[src_offset + sum i_d * src_strides[d]]
// for elements of `elem_bytes` (1, 2, 4 or 8) bytes. Transpose, broadcast,
// concat and slicing are all such copies. Destinations must not overlap.
MT_CUDA_KERNEL(StridedCopy,
               absl::Status(size_t elem_bytes, absl::Span<const int64_t> shape,
                            const void* src, int64_t src_offset,
                            absl::Span<const int64_t> src_strides, void* dst,
                            int64_t dst_offset,
                            absl::Span<const int64_t> dst_strides, int device));

// A copy of `bytes` bytes between device memory and pinned host memory
// (PinnedHostAllocator's: mapped, so the kernel reads or writes it over the
// bus, as a copy engine would): device to device, host to device (staged
// scalars) or device to host (a step's loss read back).
struct CopySegment {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t bytes = 0;
};
// Every segment's copy, in one kernel per 16 segments on the current stream:
// the small copies at a step's start (staged scalars, the batch into a
// graph's inputs, the last step's scalars back) without a copy launch each
// (tensor/batched_copy.h). A host destination holds the bytes once the
// kernel is complete (an event after it has been waited for). No
// destination may overlap another segment's source or destination.
MT_CUDA_KERNEL(CopySegments,
               absl::Status(absl::Span<const CopySegment> segments,
                            int device));

enum class ReduceKind : uint8_t {
  kSum,           // sum of x
  kSumOfSquares,  // sum of x * x
};

// out[o] = scale * sum over r of f(x[kept(o) + reduced(r)]), where o runs
// row-major over `kept_shape` (the output, contiguous) and r over
// `reduced_shape`, each with its own strides into x. Accumulates in double,
// in a fixed order (deterministic). An empty reduction gives 0. x is f32 or
// f64; `out_dtype` is x's dtype or f64.
MT_CUDA_KERNEL(Reduce, absl::Status(ReduceKind kind, DType dtype, const void* x,
                                    absl::Span<const int64_t> kept_shape,
                                    absl::Span<const int64_t> kept_strides,
                                    absl::Span<const int64_t> reduced_shape,
                                    absl::Span<const int64_t> reduced_strides,
                                    double scale, DType out_dtype, void* out,
                                    int device));

// dst[i] = static_cast<dst type>(value) for i < n, any dtype: fills on the
// current stream without a host copy (no wait); other streams must be
// ordered after it before reading dst.
MT_CUDA_KERNEL(Fill, absl::Status(DType dtype, void* dst, double value,
                                  int64_t n, int device));

// A deferred check (ops::ScopedIndexChecks): an invalid index or value
// gives 0 and min-updates record[0] with (site << kSiteShift) | position.
// `record` null: the caller checked on the host.
struct DeviceIndexCheck {
  int64_t* record = nullptr;
  uint64_t site = 0;
};

// dst[i] = static_cast<dst type>(src[i]) between any two dtypes.
// Float-to-integer conversion of values out of the integer's range
// saturates here (undefined behaviour on the CPU side), unless `check`
// records them (NaN, or a truncation outside the integer's range).
MT_CUDA_KERNEL(Cast, absl::Status(DType src_dtype, const void* src,
                                  DType dst_dtype, void* dst, int64_t n,
                                  DeviceIndexCheck check, int device));

// out[i, k] = params[indices[i], k] for rows of `row` elements of a table
// of `rows`; indices (i32 or i64) must already be known to be in range,
// unless `check` records those that are not (their rows are zeros).
MT_CUDA_KERNEL(Gather,
               absl::Status(DType dtype, const void* params, int64_t row,
                            int64_t rows, DType index_dtype,
                            const void* indices, int64_t num_indices, void* out,
                            DeviceIndexCheck check, int device));

// After a checked Gather or Cast (one thread): when record[0] holds a
// failure of `check.site`, stores the offending element of `values` (an
// index, or a float's value as double bits), `bound` and `op` in record[1..3].
MT_CUDA_KERNEL(FinishIndexCheck,
               absl::Status(DeviceIndexCheck check, DType values_dtype,
                            const void* values, int64_t bound, int64_t op,
                            int device));
// out[indices[i], k] += updates[i, k] (Gather's gradient, floating dtypes)
// for out of `rows` rows; an index out of range adds to no row (memory
// safe: each output row scans the indices for its own). Deterministic:
// each output element adds its updates in increasing i, as the CPU does, so
// both give the same bits (no atomics).
MT_CUDA_KERNEL(ScatterAdd,
               absl::Status(DType dtype, const void* updates, int64_t row,
                            DType index_dtype, const void* indices,
                            int64_t num_indices, int64_t rows, void* out,
                            int device));

// out[i, d] = indices[i] == d ? on : off, for n indices and `depth` columns.
MT_CUDA_KERNEL(OneHot,
               absl::Status(DType index_dtype, const void* indices, int64_t n,
                            int64_t depth, DType dtype, double on, double off,
                            void* out, int device));

// x viewed as [outer, n, inner]: out[o, i] = the first k maximising
// x[o, k, i] (ties and NaNs as the CPU ArgMax). n must be >= 1.
MT_CUDA_KERNEL(ArgMax, absl::Status(DType dtype, const void* x, int64_t outer,
                                    int64_t n, int64_t inner, int64_t* out,
                                    int device));

// y[i] = f32 x[i] rounded to the nearest bfloat16 (ties to even, as
// tensor/bfloat16.h); y may be x. When `halves` is not null it also gets
// the values as 2-byte bfloat16 (a product's operand, as ToBFloat16).
MT_CUDA_KERNEL(RoundToBFloat16,
               absl::Status(const void* x, void* y, void* halves, int64_t n,
                            int device));
// y[i] = f32 x[i] as bfloat16 (2-byte values, rounded as above): a
// product's operand under precision bf16 (ops/gemm_operand.h).
MT_CUDA_KERNEL(ToBFloat16,
               absl::Status(const void* x, void* y, int64_t n, int device));

// y[i] = min(max(x[i], lo), hi), NaN passing through.
MT_CUDA_KERNEL(ClipByValue,
               absl::Status(DType dtype, const void* x, double lo, double hi,
                            void* y, int64_t n, int device));
// dx[i] = lo <= x[i] <= hi ? g[i] : 0.
MT_CUDA_KERNEL(ClipByValueGrad,
               absl::Status(DType dtype, const void* x, const void* g,
                            double lo, double hi, void* dx, int64_t n,
                            int device));

// One thread: *norm = sqrt(squares[0] + ... + squares[n-1]), added in
// order in double, and *scale (dtype, one element) = clip / max(*norm,
// clip), NaN instead for a non-finite norm when nan_if_not_finite: the
// host's arithmetic of ClipByNorm / ClipByGlobalNorm, on the device.
MT_CUDA_KERNEL(ClipScale,
               absl::Status(const double* squares, int64_t n, double clip,
                            bool nan_if_not_finite, DType dtype, void* scale,
                            double* norm, int device));

// A 2-D pooling window over NHWC images: input [n, h, w, c], output
// [n, oh, ow, c]; output (oy, ox) covers input rows [oy * sh - pt, + kh)
// and the columns likewise, clipped to the image.
using Pool2DGeometry = ImageWindow;

// y = the maximum of each window (the first maximum in row-major order
// wins; a NaN beats every number and the first NaN stays). With `argmax`
// non-null (int32, shaped like y) also the winner's offset within its
// image, (row * w + col) * c + channel.
MT_CUDA_KERNEL(MaxPool2DForward,
               absl::Status(DType dtype, const void* x,
                            const Pool2DGeometry& geometry, void* y,
                            int32_t* argmax, int device));
// dx (every element written) = for each input cell, the sum of dy over the
// outputs whose argmax names it. Deterministic: no atomics.
MT_CUDA_KERNEL(MaxPool2DBackward,
               absl::Status(DType dtype, const int32_t* argmax, const void* dy,
                            const Pool2DGeometry& geometry, void* dx,
                            int device));

// y = the mean of each window's cells inside the image (padding is not
// counted, as tf.nn.avg_pool).
MT_CUDA_KERNEL(AvgPool2DForward, absl::Status(DType dtype, const void* x,
                                              const Pool2DGeometry& geometry,
                                              void* y, int device));
// dx (every element written) = for each input cell, the sum over the
// windows that cover it of dy / (the window's cell count), in increasing
// output order (the CPU's order: the same bits).
MT_CUDA_KERNEL(AvgPool2DBackward, absl::Status(DType dtype, const void* dy,
                                               const Pool2DGeometry& geometry,
                                               void* dx, int device));

// ---- depthwise convolution (depthwise_conv_kernels.cu).

// Input [n, h, w, c] under `window`, `m` filters per input channel (filter
// [kh, kw, c, m]), output [n, oh, ow, c * m], channel c * m + k from input
// channel c and filter [:, :, c, k].
struct DepthwiseGeometry {
  ImageWindow window;
  int64_t m = 1;
};
// y = each output's taps summed in row-major window order (the CPU's).
MT_CUDA_KERNEL(DepthwiseConv2DForward,
               absl::Status(DType dtype, const void* x, const void* filter,
                            const DepthwiseGeometry& geometry, void* y,
                            int device));
// dx (every element written) = for each input cell, the sum over the
// outputs whose windows cover it of dy times the tap. No atomics.
MT_CUDA_KERNEL(DepthwiseConv2DInputGrad,
               absl::Status(DType dtype, const void* dy, const void* filter,
                            const DepthwiseGeometry& geometry, void* dx,
                            int device));
// The filter gradient sums over the n * oh * ow output pixels in this many
// segments, each into its own row of a scratch buffer, which a second
// kernel adds in segment order: deterministic, fixed by the shape alone.
// Enough segments for about 256K threads (one per filter value and
// segment), each of at least 256 pixels.
inline int64_t DepthwiseFilterGradSegments(const DepthwiseGeometry& g) {
  const int64_t pixels = g.window.n * g.window.oh * g.window.ow;
  const int64_t values =
      std::max<int64_t>(1, g.window.kh * g.window.kw * g.window.c * g.m);
  const int64_t wanted = ((int64_t{1} << 18) + values - 1) / values;
  return std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, pixels / 256));
}
// dw [kh, kw, c, m]; `partial` holds DepthwiseFilterGradSegments(geometry)
// rows of kh * kw * c * m elements of scratch.
MT_CUDA_KERNEL(DepthwiseConv2DFilterGrad,
               absl::Status(DType dtype, const void* x, const void* dy,
                            const DepthwiseGeometry& geometry, void* partial,
                            void* dw, int device));

// ---- Winograd convolution (winograd_kernels.cu): one pass between the
// batched products of F(2x2, r x r), a thread per winograd::Units unit
// running winograd::RunUnit (the CPU loops' function). f32 or f64; r 3 or
// 5.
MT_CUDA_KERNEL(WinogradTransform,
               absl::Status(winograd::Pass pass, DType dtype,
                            const winograd::Geometry& geometry,
                            const winograd::Buffers& buffers, int device));

// ---- nn ops (nn_kernels.cu), over row-major [rows, cols] matrices.

// y[r, c] = x[r, c] + bias[c].
MT_CUDA_KERNEL(BiasAdd,
               absl::Status(DType dtype, const void* x, const void* bias,
                            void* y, int64_t rows, int64_t cols, int device));
// out[c] = the sum over r of x[r, c] (zeros when rows == 0). Fixed chunks
// of rows summed in double, then the chunks in order: deterministic, and
// the same on every GPU. Floating dtypes.
MT_CUDA_KERNEL(ColumnSum, absl::Status(DType dtype, const void* x, int64_t rows,
                                       int64_t cols, void* out, int device));
// Softmax (log: log-softmax) of each row, max-shifted as on the CPU.
MT_CUDA_KERNEL(Softmax,
               absl::Status(DType dtype, const void* x, void* y, int64_t rows,
                            int64_t cols, bool log, int device));
// For each row r: softmax[r, :] and loss[r] = log(sum exp(x[r] - max)) -
// (x[r, label] - max) with labels (i32 or i64) in [0, cols). A row whose
// label is out of range gets NaN loss and a NaN softmax row (hence a NaN
// gradient row), as TensorFlow's GPU kernel does; checking on the host
// would make it wait for the forward pass every step.
MT_CUDA_KERNEL(SparseSoftmaxXent,
               absl::Status(DType dtype, const void* logits, DType label_dtype,
                            const void* labels, int64_t rows, int64_t cols,
                            void* loss, void* softmax, int device));
// d[r, c] = g[r] * softmax[r, c], minus g[r] where c == labels[r].
MT_CUDA_KERNEL(SparseSoftmaxXentGrad,
               absl::Status(DType dtype, const void* softmax, DType label_dtype,
                            const void* labels, const void* g, int64_t rows,
                            int64_t cols, void* d, int device));
// mask[i] = DropoutKeep(salt, i + element_offset, rate) ? keep_scale : 0
// (tensor/dropout_mask.h, the CPU's rule) and y[i] = x[i] * mask[i], with
// salt = DropoutSalt(seed): seed = `seed` when step_seed is null, else
// DropoutStepSeed(*step_seed, seed, step_salt) with *step_seed (one int64
// in device memory) read when the kernel runs.
MT_CUDA_KERNEL(Dropout, absl::Status(DType dtype, const void* x, double rate,
                                     double keep_scale, const void* step_seed,
                                     uint64_t seed, uint64_t step_salt,
                                     int64_t element_offset, void* mask,
                                     void* y, int64_t n, int device));
// out[i] = DropoutNormal(salt, i + element_offset), salt as Dropout's.
MT_CUDA_KERNEL(StandardNormal,
               absl::Status(DType dtype, const void* step_seed, uint64_t seed,
                            uint64_t step_salt, int64_t element_offset,
                            void* out, int64_t n, int device));

// ---- Per-channel kernels of batch normalization (normalization_kernels.cu),
// over row-major [rows, cols] with cols the channels.

// y[r, c] = x[r, c] * a[c] + b[c] (b null: + 0).
MT_CUDA_KERNEL(ChannelAffine,
               absl::Status(DType dtype, const void* x, const void* a,
                            const void* b, void* y, int64_t rows, int64_t cols,
                            int device));
// sum[c] = the sum over r of w[r, c]; dot[c] = the sum over r of
// w[r, c] * (x[r, c] - shift[c]) (shift null: 0). With w == x: the sum and
// the sum of squares. Summed in double in fixed chunks, as ColumnSum;
// `double_sums`: the products too, and sum and dot are double, not dtype.
MT_CUDA_KERNEL(ChannelSums,
               absl::Status(DType dtype, const void* x, const void* w,
                            const void* shift, int64_t rows, int64_t cols,
                            void* sum, void* dot, bool double_sums,
                            int device));
// From float64 per-channel sums over n elements (inv_n = 1 / n, or 0):
// mean = sum * inv_n and variance = max(sum_sq * inv_n - mean^2, 0), in
// double, stored as dtype.
MT_CUDA_KERNEL(MomentsFromSums,
               absl::Status(DType dtype, const void* sum, const void* sum_sq,
                            double inv_n, void* mean, void* variance,
                            int64_t cols, int device));
// Their gradient: g_sq = g_var' * inv_n and g_sum = (g_mean - 2 mean
// g_var') * inv_n (float64), with g_var' = g_var where the variance before
// the max was positive, else 0; g_mean, g_var of dtype.
MT_CUDA_KERNEL(MomentsFromSumsGrad,
               absl::Status(DType dtype, const void* sum, const void* sum_sq,
                            double inv_n, const void* g_mean, const void* g_var,
                            void* g_sum, void* g_sq, int64_t cols, int device));
// Layer normalization over rows of `cols` elements (one block per row,
// each row's sums in double over a fixed tree, so deterministic):
// mean[r], rstd[r] = 1 / sqrt(var[r] + epsilon) (var the mean squared
// deviation) and y = (x - mean) * rstd * gamma + beta.
MT_CUDA_KERNEL(LayerNormForward,
               absl::Status(DType dtype, const void* x, const void* gamma,
                            const void* beta, void* y, void* mean, void* rstd,
                            int64_t rows, int64_t cols, double epsilon,
                            int device));
// Its input gradient with xhat = (x - mean) * rstd and gg = dy * gamma:
// dx = rstd * (gg - mean(gg) - xhat * mean(gg * xhat)) per row; xhat is
// also written when non-null (for the gamma gradient).
MT_CUDA_KERNEL(LayerNormBackward,
               absl::Status(DType dtype, const void* x, const void* gamma,
                            const void* dy, const void* mean, const void* rstd,
                            void* dx, void* xhat, int64_t rows, int64_t cols,
                            int device));

// ---- Fused ops (fused_kernels.cu), over row-major [rows, cols].

// y = max(x + bias[c], 0) (NaN gives 0, as Relu).
MT_CUDA_KERNEL(BiasAddRelu,
               absl::Status(DType dtype, const void* x, const void* bias,
                            void* y, int64_t rows, int64_t cols, int device));
// dz = y > 0 ? dy : 0 and, when db is non-null, db = ColumnSum(dz) in the
// same pass; with `dz_bf16` (f32 only) dz is stored as 2-byte bfloat16 (a
// bf16 product's operand; db sums the unrounded values). With `y_bf16`
// (f32 only) y is read as 2-byte bfloat16 (a rounded output's halves, the
// same signs in half the bytes).
MT_CUDA_KERNEL(BiasAddReluGrad,
               absl::Status(DType dtype, const void* y, bool y_bf16,
                            const void* dy, void* dz, bool dz_bf16, void* db,
                            int64_t rows, int64_t cols, int device));

// ---- Conv2D (conv_kernels.cu): NHWC input [n, h, w, c], HWIO filter
// [kh, kw, c, o], output [n, oh, ow, o]; output (oy, ox) reads input rows
// oy * sh - pt + ky * dh for ky in [0, kh) and columns likewise (outside:
// zeros): the image window and the filter's output channels.
struct Conv2DGeometry : ImageWindow {
  int64_t o = 0;
  int64_t patch() const { return kh * kw * c; }  // One column-buffer row.
};

// The column buffer of `images` images starting at x, row-major
// [images * oh * ow, kh * kw * c] with rows `row_stride` (>= kh * kw * c)
// values apart, the values between a row's end and the next row untouched:
//   cols[(i * oh + oy) * ow + ox][(ky * kw + kx) * c + ch] =
//       x[i][oy * sh - pt + ky * dh][ox * sw - pl + kx * dw][ch], 0 outside
//       the image;
// with `bf16_cols` (f32 x only) cols holds the entries rounded to 2-byte
// bfloat16: a bf16 product's operand (ops/gemm_operand.h).
MT_CUDA_KERNEL(Im2Col,
               absl::Status(DType dtype, const void* x,
                            const Conv2DGeometry& geometry, int64_t images,
                            void* cols, int64_t row_stride, bool bf16_cols,
                            int device));
// Im2Col's adjoint: every element of the `images` images at dx is written
// with the sum of the column entries Im2Col copies from it (deterministic,
// in the CPU's order).
MT_CUDA_KERNEL(Col2Im, absl::Status(DType dtype, const void* cols,
                                    const Conv2DGeometry& geometry,
                                    int64_t images, void* dx, int device));

// ---- Direct Conv2D (direct_conv_kernels.cu): a convolution whose patch is
// a few taps (a first layer: 5x5 over one channel, 3x3 over RGB) as its
// own loops instead of im2col and a GEMM whose inner dimension is the
// patch. Such a GEMM moves the column buffer (patch values per output
// pixel) through memory for a handful of multiply-adds per value: the
// cnn's first conv took 56 us forward and 55 us for the filter gradient
// of a 0.98 ms H100 step (2026-11-27 trace) for 0.3 GFLOP each.

// Patches of at most this many values (kh * kw * c) go direct.
inline constexpr int64_t kDirectConvMaxPatch = 32;

// Whether the direct kernels take `g`: undilated square 3x3 or 5x5 filters,
// column stride 1 and a row stride of at most the filter's height (any
// padding), a patch of at most kDirectConvMaxPatch values, at most 8192 filters
// (the filter gradient's grid), and every index within 32 bits.
inline bool DirectConvTakes(const Conv2DGeometry& g) {
  const int64_t limit = int64_t{1} << 30;
  return !g.dilated() && g.kh == g.kw && (g.kw == 3 || g.kw == 5) &&
         g.sw == 1 && g.sh <= g.kh && g.patch() <= kDirectConvMaxPatch &&
         g.o <= 8192 && g.n * g.h * g.w * g.c < limit &&
         g.n * g.oh * g.ow * g.o < limit;
}

// y [n, oh, ow, o] = Conv2D(x, filter), every element written; with
// `relu_bias` (may be null) max(conv + relu_bias[o], 0), NaN giving 0 as
// BiasAddRelu. With `bf16` (f32 only) x and the filter are read rounded
// to bfloat16 and the exact products summed in f32: a bf16 product's
// numbers; without, full f32 (also under tf32, which permits rounding and
// does not require it). Padding is multiplied as zeros, as im2col's zero
// columns are (an Inf or NaN filter value gives NaN there too).
// InvalidArgument unless DirectConvTakes(g).
MT_CUDA_KERNEL(DirectConv2D,
               absl::Status(DType dtype, const void* x, const void* filter,
                            const void* relu_bias,
                            const Conv2DGeometry& geometry, bool bf16, void* y,
                            int device));
// dfilter [kh, kw, c, o] = the sum over every output pixel of x's window
// times dy [n, oh, ow, o], every element written; `bf16` and padding as
// above (x and dy rounded; zeros times an Inf or NaN in dy give NaN).
// Partial sums in a fixed split of the pixels, added in a fixed order
// (ColumnSum's): deterministic, the same on every GPU.
MT_CUDA_KERNEL(DirectConv2DFilterGrad,
               absl::Status(DType dtype, const void* x, const void* dy,
                            const Conv2DGeometry& geometry, bool bf16,
                            void* dfilter, int device));
// The 2x2, stride-2 VALID max pool of DirectConv2D(x, filter) in one pass
// (the convolution's output never stored): y [n, oh / 2, ow / 2, o] and,
// when `argmax` is non-null (int32, shaped like y), MaxPool2DForward's
// winners over the convolution's output [n, oh, ow, o]: the same values
// and winners as DirectConv2D then MaxPool2DForward. With `relu_bias`
// ([o], non-null) y is relu(maximum + bias), as BiasAddRelu then computes
// it (the winners are the maximum's).
MT_CUDA_KERNEL(DirectConv2DMaxPool,
               absl::Status(DType dtype, const void* x, const void* filter,
                            const void* relu_bias,
                            const Conv2DGeometry& geometry, bool bf16, void* y,
                            int32_t* argmax, int device));
// DirectConv2DFilterGrad of the pooled convolution: dy is the pool
// output's gradient [n, oh / 2, ow / 2, o], `argmax` the forward's; each
// window's gradient reaches its winner alone (MaxPool2DBackward's rule).
// Outputs of a row or column the pool drops (an odd last one) are left
// out, not multiplied by a zero gradient: an Inf or NaN input that only
// they read gives no NaN.
MT_CUDA_KERNEL(DirectConv2DMaxPoolFilterGrad,
               absl::Status(DType dtype, const void* x, const void* dy,
                            const int32_t* argmax,
                            const Conv2DGeometry& geometry, bool bf16,
                            void* dfilter, int device));

// ---- Conv2D's input gradient as one implicit GEMM
// (conv_input_grad_kernels.cu): dy times the filter summed straight into
// dx, no column buffer written and read back by col2im. FMAs in the
// input's type (exact f32 or f64 products; the GEMM path serves tf32 and
// bf16 on tensor cores).

// Filters a step of the kernel's sum takes: its dy rows are read in
// 16-value pieces, so the filter count is a multiple of it.
inline constexpr int64_t kConvInputGradChannelStep = 16;

// Whether ConvInputGrad takes `g`: undilated, filters a positive multiple of
// kConvInputGradChannelStep, input channels within the grid's 65535
// blocks of 32, every index within 32 bits.
inline bool ConvInputGradTakes(const Conv2DGeometry& g) {
  const int64_t limit = int64_t{1} << 30;
  return !g.dilated() && g.o > 0 && g.o % kConvInputGradChannelStep == 0 &&
         g.c <= int64_t{65535} * 32 && g.n * g.h * g.w * g.c < limit &&
         g.n * g.oh * g.ow * g.o < limit && g.patch() * g.o < limit;
}

// dx [n, h, w, c] = the gradient of Conv2D(x, filter) for the output
// gradient dy [n, oh, ow, o]: every element written, each the sum over the
// filter taps and output channels that read it, in a fixed order
// (deterministic). dy and filter must be 16-byte aligned (f32; 32-byte
// for f64). InvalidArgument unless ConvInputGradTakes(g).
MT_CUDA_KERNEL(ConvInputGrad,
               absl::Status(DType dtype, const void* dy, const void* filter,
                            const Conv2DGeometry& geometry, void* dx,
                            int device));

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_KERNELS_H_
