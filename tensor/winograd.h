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

// f(i, j) for i < I, j < J, unrolled in device code.
template <int I, int J, typename F>
MT_HOST_DEVICE void ForEach(const F& f) {
  MT_UNROLL
  for (int i = 0; i < I; ++i) {
    MT_UNROLL
    for (int j = 0; j < J; ++j) f(i, j);
  }
}

// out[i][j] = the sum over k < K of a(i, k) * b(k, j), k increasing: the
// transforms' small matrix products, whose arrays stay in registers.
template <int I, int J, int K, typename T, typename A, typename B>
MT_HOST_DEVICE void SmallProduct(const A& a, const B& b, T (&out)[I][J]) {
  ForEach<I, J>([&](int i, int j) {
    T s = 0;
    MT_UNROLL
    for (int k = 0; k < K; ++k) s += a(i, k) * b(k, j);
    out[i][j] = s;
  });
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
  ForEach<A, A>([&](int a, int b) {
    const int64_t iy = t.y0 - g.pt + a, ix = t.x0 - g.pl + b;
    d[a][b] = !padding && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                  ? x[((t.image * g.h + iy) * g.w + ix) * g.c + ch]
                  : T(0);
  });
  T bd[A][A], bdb[A][A];  // B^T d, then B^T d B.
  SmallProduct<A, A, A>([&](int i, int k) { return mx.bt[i][k]; },
                        [&](int k, int j) { return d[k][j]; }, bd);
  SmallProduct<A, A, A>([&](int i, int k) { return bd[i][k]; },
                        [&](int k, int j) { return mx.bt[j][k]; }, bdb);
  const int64_t plane = g.rows() * g.c;
  ForEach<A, A>([&](int a, int b) { v[(a * A + b) * plane + u] = bdb[a][b]; });
}

template <int R, typename T>
MT_HOST_DEVICE void Filter(const Geometry& g, const Matrices<T>& mx,
                           bool rotated, const T* f, T* uu, int64_t u) {
  constexpr int A = R + 1;
  const int64_t oo = u % g.o;
  const int64_t ch = u / g.o;
  T s[R][R];
  ForEach<R, R>([&](int ky, int kx) {
    s[ky][kx] =
        rotated ? f[(((R - 1 - ky) * R + (R - 1 - kx)) * g.o + oo) * g.c + ch]
                : f[((ky * R + kx) * g.c + ch) * g.o + oo];
  });
  T gs[A][R], gsg[A][A];  // G s, then G s G^T.
  SmallProduct<A, R, R>([&](int i, int k) { return mx.g[i][k]; },
                        [&](int k, int j) { return s[k][j]; }, gs);
  SmallProduct<A, A, R>([&](int i, int k) { return gs[i][k]; },
                        [&](int k, int j) { return mx.g[j][k]; }, gsg);
  const int64_t plane = g.c * g.o;
  ForEach<A, A>([&](int a, int b) { uu[(a * A + b) * plane + u] = gsg[a][b]; });
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
  T mm[A][A];
  ForEach<A, A>([&](int a, int b) { mm[a][b] = m[(a * A + b) * plane + u]; });
  T am[kTile][A], out[kTile][kTile];  // A^T M, then A^T M A.
  SmallProduct<kTile, A, A>([&](int i, int k) { return mx.at[i][k]; },
                            [&](int k, int j) { return mm[k][j]; }, am);
  SmallProduct<kTile, kTile, A>([&](int i, int k) { return am[i][k]; },
                                [&](int k, int j) { return mx.at[j][k]; }, out);
  if (!pool) {
    ForEach<kTile, kTile>([&](int i, int j) {
      const int64_t oy = t.y0 + i, ox = t.x0 + j;
      if (oy < g.oh && ox < g.ow) {
        y[((t.image * g.oh + oy) * g.ow + ox) * g.o + oo] =
            BiasRelu(out[i][j], io, oo);
      }
    });
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
  ForEach<kTile, kTile>([&](int i, int j) {
    const int64_t oy = t.y0 + i, ox = t.x0 + j;
    d[i][j] = !padding && oy < g.oh && ox < g.ow
                  ? dy[((t.image * g.oh + oy) * g.ow + ox) * g.o + oo]
                  : T(0);
  });
  T ad[A][kTile], ada[A][A];  // A dY, then A dY A^T.
  SmallProduct<A, kTile, kTile>([&](int a, int i) { return mx.at[i][a]; },
                                [&](int i, int j) { return d[i][j]; }, ad);
  SmallProduct<A, A, kTile>([&](int a, int j) { return ad[a][j]; },
                            [&](int j, int b) { return mx.at[j][b]; }, ada);
  const int64_t plane = g.rows() * g.o;
  ForEach<A, A>([&](int a, int b) { dm[(a * A + b) * plane + u] = ada[a][b]; });
}

template <int R, typename T>
MT_HOST_DEVICE void FilterAdjoint(const Geometry& g, const Matrices<T>& mx,
                                  const T* du, T* df, int64_t u) {
  constexpr int A = R + 1;
  const int64_t oo = u % g.o;
  const int64_t ch = u / g.o;
  const int64_t plane = g.c * g.o;
  T sum[A][A];  // dU: the segments' partial sums, in order.
  ForEach<A, A>([&](int a, int b) {
    T s = 0;
    for (int64_t seg = 0; seg < g.segments; ++seg) {
      s += du[((a * A + b) * g.segments + seg) * plane + u];
    }
    sum[a][b] = s;
  });
  T gd[R][A], gdg[R][R];  // G^T dU, then G^T dU G.
  SmallProduct<R, A, A>([&](int k, int a) { return mx.g[a][k]; },
                        [&](int a, int b) { return sum[a][b]; }, gd);
  SmallProduct<R, R, A>([&](int k, int b) { return gd[k][b]; },
                        [&](int b, int l) { return mx.g[b][l]; }, gdg);
  ForEach<R, R>([&](int ky, int kx) {
    df[((ky * R + kx) * g.c + ch) * g.o + oo] = gdg[ky][kx];
  });
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
