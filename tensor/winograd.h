// Winograd's minimal filtering F(2x2, r x r) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2015) for stride-1
// convolutions with square r x r filters, r = 3 or 5. A 2x2 tile of outputs
// is computed from an a x a tile d of the input (a = r + 1) as
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A
// with g one filter slice and (.) the elementwise product; summed over
// the input channels, the elementwise products are a^2 matrix products
// (tiles x c times c x o), which the caller runs as one batched GEMM. That
// is 36 (r = 5) or 16 (r = 3) products per 4 outputs instead of 100 or 36.
//
// The matrices come from Toom-Cook interpolation at the points 0, 1, -1
// (and 2, -1/2 for r = 5) and infinity: G and A^T are Vandermonde
// matrices of the points and B^T the inverse transpose of the a x a one
// (MatricesFor builds them on the host in double). The gradients use the
// same pieces: the input gradient is the correlation of dy with the filter
// turned 180 degrees and its channels swapped (kFilterRotated), padded by
// r - 1 - pt; the filter gradient is G^T [ sum over tiles of
// (B^T d B) (.) (A dY A^T) ] G, the adjoints of the forward's output and
// filter transforms (kOutputAdjoint, kFilterAdjoint).
//
// RunUnit is one thread's work (one tile and channel, or one filter slice),
// shared by the CPU loops (ops/winograd_conv.cc) and the CUDA kernel
// (cuda/winograd_kernels.cu, built without fused multiply-adds), so both
// compute the same transforms, rounding alike; only the batched products
// between them may sum in other orders.
#ifndef MIRRORTRAIN_TENSOR_WINOGRAD_H_
#define MIRRORTRAIN_TENSOR_WINOGRAD_H_

#include <cstdint>

#include "tensor/host_device.h"

namespace mirrortrain::winograd {

inline constexpr int kTile = 2;  // Output pixels per tile side.
inline constexpr int kMaxR = 5;
inline constexpr int kMaxAlpha = kMaxR + 1;

// Whether F(2x2, r x r) is built for filters of r x r.
constexpr bool Supported(int64_t r) { return r == 3 || r == 5; }

// The transforms of one r, rounded to T: B^T [a][a], G [a][r], A^T [2][a].
template <typename T>
struct Matrices {
  T bt[kMaxAlpha][kMaxAlpha] = {};
  T g[kMaxAlpha][kMaxR] = {};
  T at[kTile][kMaxAlpha] = {};
};

// The matrices for r (Supported(r)), from the interpolation points in
// double. Host only; defined for float and double.
template <typename T>
Matrices<T> MatricesFor(int r);

// One stride-1 correlation: input [n, h, w, c] padded by pt rows on top
// and pl columns on the left (zeros; the bottom and right padding follow
// from the output size), an r x r filter of c -> o channels, output
// [n, oh, ow, o]. Tiles are 2x2 output pixels, ceil(oh / 2) x ceil(ow / 2)
// per image, numbered (image, tile row, tile column) row-major.
//
// `segments`: the filter gradient's sum over the tiles runs as that many
// products per transform point (each over a segment of the tiles, so
// there are enough of them to fill a GPU), then the segments' partial sums
// in order. V and dM then have rows() rows per point: the tiles, padded
// with zero rows to a multiple of the segments.
struct Geometry {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t oh = 0, ow = 0, o = 0;
  int64_t pt = 0, pl = 0;
  int r = 3;
  int64_t segments = 1;
  MT_HOST_DEVICE int alpha() const { return r + 1; }
  MT_HOST_DEVICE int64_t tiles_h() const { return (oh + 1) / kTile; }
  MT_HOST_DEVICE int64_t tiles_w() const { return (ow + 1) / kTile; }
  MT_HOST_DEVICE int64_t tiles() const { return n * tiles_h() * tiles_w(); }
  MT_HOST_DEVICE int64_t segment_rows() const {
    return (tiles() + segments - 1) / segments;
  }
  MT_HOST_DEVICE int64_t rows() const { return segment_rows() * segments; }
};

// The passes between the batched products. V, U and M are [a^2, rows,
// cols] (transform point first): V [a^2, rows(), c], U [a^2, c, o],
// M [a^2, rows(), o]; the filter gradient's dU is [a^2, segments, c, o].
enum class Pass {
  kInput,          // x [n, h, w, c] -> V: B^T d B per tile and channel.
  kFilter,         // filter [r, r, c, o] -> U: G g G^T per slice.
  kFilterRotated,  // filter [r, r, o, c] turned 180 degrees -> U [a^2, c, o].
  kOutput,         // M -> y [n, oh, ow, o]: A^T M A (+ bias, relu).
  kOutputMaxPool,  // M -> the 2x2 stride-2 VALID max pool of y (+ bias,
                   // relu after it) and the pool's winners.
  kOutputAdjoint,  // dy [n, oh, ow, o] -> dM: A dY A^T.
  kFilterAdjoint,  // dU -> dfilter [r, r, c, o]: G^T (sum of segments) G.
};

// Units (threads) of a pass: rows x channels (padding rows included, which
// write zeros), tiles x output channels, or filter slices.
MT_HOST_DEVICE inline int64_t Units(Pass pass, const Geometry& g) {
  switch (pass) {
    case Pass::kInput:
      return g.rows() * g.c;
    case Pass::kOutputAdjoint:
      return g.rows() * g.o;
    case Pass::kOutput:
    case Pass::kOutputMaxPool:
      return g.tiles() * g.o;
    default:
      return g.c * g.o;
  }
}

// What one pass reads and writes: memory of the pass's dtype on its
// device (`argmax` int32).
struct Buffers {
  const void* in = nullptr;
  const void* bias = nullptr;  // [o], kOutput and kOutputMaxPool; may be null.
  bool relu = false;           // With bias: relu(... + bias).
  void* out = nullptr;
  // kOutputMaxPool (may be null): per pooled output, its winner's offset
  // in its image of y, (oy * ow + ox) * o + channel (MaxPool2D's).
  int32_t* argmax = nullptr;
};

namespace detail {

// The tile of unit u = tile * channels + channel: its image and the first
// output row and column.
struct TileOf {
  int64_t image, y0, x0;
};
MT_HOST_DEVICE inline TileOf Locate(const Geometry& g, int64_t tile) {
  const int64_t tw = g.tiles_w(), th = g.tiles_h();
  const int64_t tx = tile % tw;
  const int64_t rest = tile / tw;
  return {rest / th, (rest % th) * kTile, tx * kTile};
}

template <int R, typename T>
MT_HOST_DEVICE void Input(const Geometry& g, const Matrices<T>& mx, const T* x,
                          T* v, int64_t u) {
  constexpr int A = R + 1;
  const int64_t ch = u % g.c;
  const int64_t tile = u / g.c;
  const TileOf t = Locate(g, tile);
  const bool padding = tile >= g.tiles();  // A zero row.
  T d[A][A];
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    const int64_t iy = t.y0 - g.pt + a;
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      const int64_t ix = t.x0 - g.pl + b;
      d[a][b] = !padding && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                    ? x[((t.image * g.h + iy) * g.w + ix) * g.c + ch]
                    : T(0);
    }
  }
  T bd[A][A];  // B^T d
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      T s = 0;
      MT_UNROLL
      for (int k = 0; k < A; ++k) s += mx.bt[a][k] * d[k][b];
      bd[a][b] = s;
    }
  }
  const int64_t plane = g.rows() * g.c;
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      T s = 0;
      MT_UNROLL
      for (int k = 0; k < A; ++k) s += bd[a][k] * mx.bt[b][k];
      v[(a * A + b) * plane + u] = s;
    }
  }
}

template <int R, typename T>
MT_HOST_DEVICE void Filter(const Geometry& g, const Matrices<T>& mx,
                           bool rotated, const T* f, T* uu, int64_t u) {
  constexpr int A = R + 1;
  const int64_t oo = u % g.o;
  const int64_t ch = u / g.o;
  T s[R][R];
  MT_UNROLL
  for (int ky = 0; ky < R; ++ky) {
    MT_UNROLL
    for (int kx = 0; kx < R; ++kx) {
      s[ky][kx] =
          rotated ? f[(((R - 1 - ky) * R + (R - 1 - kx)) * g.o + oo) * g.c + ch]
                  : f[((ky * R + kx) * g.c + ch) * g.o + oo];
    }
  }
  T gs[A][R];  // G s
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    MT_UNROLL
    for (int k = 0; k < R; ++k) {
      T sum = 0;
      MT_UNROLL
      for (int l = 0; l < R; ++l) sum += mx.g[a][l] * s[l][k];
      gs[a][k] = sum;
    }
  }
  const int64_t plane = g.c * g.o;
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      T sum = 0;
      MT_UNROLL
      for (int k = 0; k < R; ++k) sum += gs[a][k] * mx.g[b][k];
      uu[(a * A + b) * plane + u] = sum;
    }
  }
}

// As BiasAddRelu's pass after a convolution (or its pool): the value, then
// the bias, then relu's own formula (a NaN gives 0).
template <typename T>
MT_HOST_DEVICE T BiasRelu(T v, const Buffers& io, int64_t channel) {
  if (io.bias != nullptr) v += static_cast<const T*>(io.bias)[channel];
  if (io.relu) v = v > T(0) ? v : T(0);
  return v;
}

// kOutput, or with `pool` kOutputMaxPool: a tile is one pool window, and
// tiles past the last whole window (an odd last row or column, which VALID
// pooling drops) write nothing.
template <int R, typename T>
MT_HOST_DEVICE void Output(const Geometry& g, const Matrices<T>& mx,
                           const Buffers& io, bool pool, int64_t u) {
  constexpr int A = R + 1;
  const int64_t oo = u % g.o;
  const int64_t tile = u / g.o;
  const TileOf t = Locate(g, tile);
  if (pool && (t.y0 + 1 >= g.oh || t.x0 + 1 >= g.ow)) return;
  const T* m = static_cast<const T*>(io.in);
  T* y = static_cast<T*>(io.out);
  const int64_t plane = g.rows() * g.o;
  T am[kTile][A];  // A^T M
  MT_UNROLL
  for (int i = 0; i < kTile; ++i) {
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      T s = 0;
      MT_UNROLL
      for (int k = 0; k < A; ++k) s += mx.at[i][k] * m[(k * A + b) * plane + u];
      am[i][b] = s;
    }
  }
  T out[kTile][kTile];
  MT_UNROLL
  for (int i = 0; i < kTile; ++i) {
    MT_UNROLL
    for (int j = 0; j < kTile; ++j) {
      T s = 0;
      MT_UNROLL
      for (int k = 0; k < A; ++k) s += am[i][k] * mx.at[j][k];
      out[i][j] = s;
    }
  }
  if (!pool) {
    MT_UNROLL
    for (int i = 0; i < kTile; ++i) {
      const int64_t oy = t.y0 + i;
      if (oy >= g.oh) continue;
      MT_UNROLL
      for (int j = 0; j < kTile; ++j) {
        const int64_t ox = t.x0 + j;
        if (ox >= g.ow) continue;
        y[((t.image * g.oh + oy) * g.ow + ox) * g.o + oo] =
            BiasRelu(out[i][j], io, oo);
      }
    }
    return;
  }
  // Cells in row-major order; the first maximum wins, a NaN beats every
  // number and the first NaN stays (MaxPool2D's rule).
  T best = out[0][0];
  int winner = 0;
  MT_UNROLL
  for (int k = 1; k < kTile * kTile; ++k) {
    const T v = out[k / kTile][k % kTile];
    if (v > best || (v != v && best == best)) {
      best = v;
      winner = k;
    }
  }
  const int64_t ph = g.oh / kTile, pw = g.ow / kTile;
  const int64_t at =
      ((t.image * ph + t.y0 / kTile) * pw + t.x0 / kTile) * g.o + oo;
  y[at] = BiasRelu(best, io, oo);
  if (io.argmax != nullptr) {
    io.argmax[at] = static_cast<int32_t>(
        ((t.y0 + winner / kTile) * g.ow + t.x0 + winner % kTile) * g.o + oo);
  }
}

template <int R, typename T>
MT_HOST_DEVICE void OutputAdjoint(const Geometry& g, const Matrices<T>& mx,
                                  const T* dy, T* dm, int64_t u) {
  constexpr int A = R + 1;
  const int64_t oo = u % g.o;
  const int64_t tile = u / g.o;
  const TileOf t = Locate(g, tile);
  const bool padding = tile >= g.tiles();  // A zero row.
  T d[kTile][kTile];
  MT_UNROLL
  for (int i = 0; i < kTile; ++i) {
    const int64_t oy = t.y0 + i;
    MT_UNROLL
    for (int j = 0; j < kTile; ++j) {
      const int64_t ox = t.x0 + j;
      d[i][j] = !padding && oy < g.oh && ox < g.ow
                    ? dy[((t.image * g.oh + oy) * g.ow + ox) * g.o + oo]
                    : T(0);
    }
  }
  T ad[A][kTile];  // A dY
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    MT_UNROLL
    for (int j = 0; j < kTile; ++j) {
      T s = 0;
      MT_UNROLL
      for (int i = 0; i < kTile; ++i) s += mx.at[i][a] * d[i][j];
      ad[a][j] = s;
    }
  }
  const int64_t plane = g.rows() * g.o;
  MT_UNROLL
  for (int a = 0; a < A; ++a) {
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      T s = 0;
      MT_UNROLL
      for (int j = 0; j < kTile; ++j) s += ad[a][j] * mx.at[j][b];
      dm[(a * A + b) * plane + u] = s;
    }
  }
}

template <int R, typename T>
MT_HOST_DEVICE void FilterAdjoint(const Geometry& g, const Matrices<T>& mx,
                                  const T* du, T* df, int64_t u) {
  constexpr int A = R + 1;
  const int64_t oo = u % g.o;
  const int64_t ch = u / g.o;
  const int64_t plane = g.c * g.o;
  T sum[A][A];  // dU: the segments' partial sums, in order.
  MT_UNROLL
  for (int p = 0; p < A * A; ++p) {
    T s = 0;
    for (int64_t seg = 0; seg < g.segments; ++seg) {
      s += du[(p * g.segments + seg) * plane + u];
    }
    sum[p / A][p % A] = s;
  }
  T gd[R][A];  // G^T dU
  MT_UNROLL
  for (int k = 0; k < R; ++k) {
    MT_UNROLL
    for (int b = 0; b < A; ++b) {
      T s = 0;
      MT_UNROLL
      for (int a = 0; a < A; ++a) s += mx.g[a][k] * sum[a][b];
      gd[k][b] = s;
    }
  }
  MT_UNROLL
  for (int ky = 0; ky < R; ++ky) {
    MT_UNROLL
    for (int kx = 0; kx < R; ++kx) {
      T s = 0;
      MT_UNROLL
      for (int b = 0; b < A; ++b) s += gd[ky][b] * mx.g[b][kx];
      df[((ky * R + kx) * g.c + ch) * g.o + oo] = s;
    }
  }
}

}  // namespace detail

// Unit u of `pass` (u < Units(pass, g)) of T values: reads io.in (and
// the bias) and writes its values of io.out (and io.argmax). Units write
// disjoint values, so any order or split gives the same result.
template <int R, typename T>
MT_HOST_DEVICE void RunUnit(Pass pass, const Geometry& g, const Matrices<T>& mx,
                            const Buffers& io, int64_t u) {
  const T* in = static_cast<const T*>(io.in);
  T* out = static_cast<T*>(io.out);
  switch (pass) {
    case Pass::kInput:
      detail::Input<R>(g, mx, in, out, u);
      return;
    case Pass::kFilter:
    case Pass::kFilterRotated:
      detail::Filter<R>(g, mx, pass == Pass::kFilterRotated, in, out, u);
      return;
    case Pass::kOutput:
    case Pass::kOutputMaxPool:
      detail::Output<R, T>(g, mx, io, pass == Pass::kOutputMaxPool, u);
      return;
    case Pass::kOutputAdjoint:
      detail::OutputAdjoint<R>(g, mx, in, out, u);
      return;
    case Pass::kFilterAdjoint:
      detail::FilterAdjoint<R>(g, mx, in, out, u);
      return;
  }
}

}  // namespace mirrortrain::winograd

#endif  // MIRRORTRAIN_TENSOR_WINOGRAD_H_
