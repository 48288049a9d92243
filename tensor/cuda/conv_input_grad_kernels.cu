// Conv2D's input gradient as one implicit GEMM (cuda_kernels.h):
//   dx [n * h * w, c] = A [n * h * w, kh * kw * o] @ B [kh * kw * o, c],
// where row m of A holds, tap by tap, dy at the output pixel that reads
// input pixel m through that tap (zeros where none does), and
// B [(tap, oc)][ch] = filter [tap][ch][oc]. A is never stored: each block
// gathers its tiles of it from dy as it goes. The GEMM path instead writes
// dy @ filter^T as columns, kh * kw * c values per output pixel (160 MB for
// the cnn's second conv at batch 256), for col2im to read back.
//
// A block computes 128 input pixels by 32 input channels, stepping through
// K 16 output channels of one tap at a time: its threads load the next
// step's tiles into registers while they multiply the current ones from
// shared memory (one barrier pair per step), each thread 8 x 4 outputs.
// Every output is one thread's sum, in a fixed order: deterministic. (8 x 8
// outputs a thread, 64 threads, measured 1% slower on the H200's cnn.)
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/conv_geometry.cuh"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

constexpr int kTileN = 32;                         // Input channels per block.
constexpr int kTileK = kConvInputGradChannelStep;  // dy channels per step.

// A block's kTileM input pixels (by kTileN channels) and each thread's
// kThreadM x kThreadN outputs of them. Each thread gathers kTileM / kThreads
// pixels' rows of A and loads kTileN * kTileK / 4 / kThreads quads of B.
template <int kTileM_, int kThreadM_, int kThreadN_>
struct TileShape {
  static constexpr int kTileM = kTileM_;
  static constexpr int kThreadM = kThreadM_;
  static constexpr int kThreadN = kThreadN_;
  static constexpr int kThreads = (kTileM / kThreadM) * (kTileN / kThreadN);
  static constexpr int kRows = kTileM / kThreads;
  static constexpr int kQuads = kTileN * kTileK / 4 / kThreads;
  static_assert(kTileM % kThreads == 0 && kRows >= 1, "whole pixel rows");
  static_assert(kQuads >= 1 && kTileN * kTileK % (4 * kThreads) == 0,
                "whole filter quads");
  static_assert(kThreadM % 4 == 0 && kThreadN % 4 == 0, "whole quads");
};
// 8 x 4 outputs a thread, 128 threads.
using Tiles = TileShape<128, 8, 4>;

// Four values, aligned for one (f32) or two (f64) 16-byte accesses.
template <typename T>
struct alignas(sizeof(T) * 4) Quad {
  T v[4];
};

// The geometry in 32-bit ints (ConvInputGradTakes bounds every index).
struct GradGeometry : Conv2DGeometry32 {
  explicit GradGeometry(const Conv2DGeometry& g)
      : Conv2DGeometry32(g), pixels(n * h * w), steps(kh * kw * (o / kTileK)) {}
  int pixels;  // Rows of dx.
  int steps;   // K / kTileK.
};

// Output coordinate that reads input coordinate `in` through filter offset
// k, or -1: (in + pad - k) / stride when that divides and lies in [0, out).
__device__ inline int OutputAt(int in, int pad, int k, int stride, int out) {
  const int t = in + pad - k;
  if (t < 0) return -1;
  if (stride == 1) return t < out ? t : -1;  // No division (the usual case).
  if (t % stride != 0) return -1;
  const int at = t / stride;
  return at < out ? at : -1;
}

// Where a step reads: filter tap (ky, kx), dy channels oc0 .. + kTileK.
struct Step {
  int ky = 0, kx = 0, oc0 = 0;
  // The next step: channels first, then taps in the filter's order.
  __device__ void Advance(int kw, int o) {
    oc0 += kTileK;
    if (oc0 < o) return;
    oc0 = 0;
    if (++kx < kw) return;
    kx = 0;
    ++ky;
  }
};

// An input pixel whose row of A a thread gathers.
struct Pixel {
  int image, iy, ix;
  bool in;  // Inside dx (the last block's tail is not).
};

// The registers a thread carries from global memory to shared memory for
// one step: its pixels' kTileK values of A and its quads of B.
template <typename T, typename S>
struct StepValues {
  T a[S::kRows][kTileK];
  Quad<T> b[S::kQuads];
};

// Loads step `at` for thread t of the block whose channels start at c0.
template <typename S, typename T>
__device__ inline void LoadStep(const GradGeometry& g, const T* dy,
                                const T* filter, const Step& at, int t,
                                const Pixel (&pixels)[S::kRows], int c0,
                                StepValues<T, S>& s) {
#pragma unroll
  for (int r = 0; r < S::kRows; ++r) {
    const Pixel& p = pixels[r];
    const int oy = p.in ? OutputAt(p.iy, g.pt, at.ky, g.sh, g.oh) : -1;
    const int ox = oy >= 0 ? OutputAt(p.ix, g.pl, at.kx, g.sw, g.ow) : -1;
    if (ox >= 0) {
      const Quad<T>* row = reinterpret_cast<const Quad<T>*>(
          dy + ((p.image * g.oh + oy) * g.ow + ox) * g.o + at.oc0);
#pragma unroll
      for (int q = 0; q < kTileK / 4; ++q) {
        const Quad<T> v = row[q];
#pragma unroll
        for (int j = 0; j < 4; ++j) s.a[r][q * 4 + j] = v.v[j];
      }
    } else {
#pragma unroll
      for (int k = 0; k < kTileK; ++k) s.a[r][k] = T(0);
    }
  }
  const int tap = at.ky * g.kw + at.kx;
#pragma unroll
  for (int r = 0; r < S::kQuads; ++r) {
    // Quad q: channel c0 + q / 4, dy channels oc0 + q % 4 * 4 .. + 3.
    const int q = t + r * S::kThreads, ch = c0 + q / 4;
    s.b[r] = ch < g.c
                 ? *reinterpret_cast<const Quad<T>*>(
                       filter + (tap * g.c + ch) * g.o + at.oc0 + q % 4 * 4)
                 : Quad<T>{};
  }
}

// Block (mb, nb): dx rows [mb * kTileM, + kTileM) and channels
// [nb * kTileN, + kTileN), every one of them inside dx written.
template <typename T, typename S>
__global__ void __launch_bounds__(S::kThreads)
    ConvInputGradKernel(GradGeometry g, const T* dy, const T* filter, T* dx) {
  // a_tile[k][m / 4].v[m % 4] = A [m0 + m][step's k];
  // b_tile[k][n / 4].v[n % 4] = B [step's k][c0 + n].
  __shared__ Quad<T> a_tile[kTileK][S::kTileM / 4];
  __shared__ Quad<T> b_tile[kTileK][kTileN / 4];
  const int t = threadIdx.x;
  const int m0 = blockIdx.x * S::kTileM, c0 = blockIdx.y * kTileN;
  // The pixels this thread gathers A's rows for: m0 + t + r * kThreads.
  Pixel pixels[S::kRows];
#pragma unroll
  for (int r = 0; r < S::kRows; ++r) {
    const int m = m0 + t + r * S::kThreads;
    pixels[r] = {m / (g.w * g.h), m / g.w % g.h, m % g.w, m < g.pixels};
  }
  // The outputs this thread sums: pixels m0 + tm * kThreadM + i, channels
  // c0 + tn * kThreadN + j.
  constexpr int kAcross = kTileN / S::kThreadN;
  const int tn = t % kAcross, tm = t / kAcross;
  T acc[S::kThreadM][S::kThreadN] = {};
  StepValues<T, S> next;
  Step at;
  LoadStep<S>(g, dy, filter, at, t, pixels, c0, next);
  for (int step = 0; step < g.steps; ++step) {
#pragma unroll
    for (int r = 0; r < S::kRows; ++r) {
      const int m = t + r * S::kThreads;
#pragma unroll
      for (int k = 0; k < kTileK; ++k) a_tile[k][m / 4].v[m % 4] = next.a[r][k];
    }
#pragma unroll
    for (int r = 0; r < S::kQuads; ++r) {
      const int q = t + r * S::kThreads, n = q / 4;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        b_tile[q % 4 * 4 + j][n / 4].v[n % 4] = next.b[r].v[j];
      }
    }
    __syncthreads();
    // The next step's loads are in flight while this one multiplies.
    if (step + 1 < g.steps) {
      at.Advance(g.kw, g.o);
      LoadStep<S>(g, dy, filter, at, t, pixels, c0, next);
    }
#pragma unroll
    for (int k = 0; k < kTileK; ++k) {
      Quad<T> a[S::kThreadM / 4], b[S::kThreadN / 4];
#pragma unroll
      for (int i = 0; i < S::kThreadM / 4; ++i) {
        a[i] = a_tile[k][tm * (S::kThreadM / 4) + i];
      }
#pragma unroll
      for (int j = 0; j < S::kThreadN / 4; ++j) {
        b[j] = b_tile[k][tn * (S::kThreadN / 4) + j];
      }
#pragma unroll
      for (int i = 0; i < S::kThreadM; ++i) {
#pragma unroll
        for (int j = 0; j < S::kThreadN; ++j) {
          acc[i][j] += a[i / 4].v[i % 4] * b[j / 4].v[j % 4];
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < S::kThreadM; ++i) {
    const int row = m0 + tm * S::kThreadM + i;
    if (row >= g.pixels) break;
#pragma unroll
    for (int j = 0; j < S::kThreadN; ++j) {
      const int ch = c0 + tn * S::kThreadN + j;
      if (ch < g.c) dx[row * g.c + ch] = acc[i][j];
    }
  }
}

// Launches the kernel for tile shape S on `stream`.
template <typename T, typename S>
void LaunchInputGrad(const GradGeometry& d, const void* dy, const void* filter,
                     void* dx, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((d.pixels + S::kTileM - 1) / S::kTileM),
                  static_cast<unsigned>((d.c + kTileN - 1) / kTileN));
  ConvInputGradKernel<T, S><<<grid, S::kThreads, 0, stream>>>(
      d, static_cast<const T*>(dy), static_cast<const T*>(filter),
      static_cast<T*>(dx));
}

absl::Status ConvInputGradOnGpu(DType dtype, const void* dy, const void* filter,
                                const Conv2DGeometry& g, void* dx, int device) {
  constexpr const char* kWhat = "ConvInputGrad";
  MT_RETURN_IF_ERROR(CheckImageWindow(kWhat, g));
  if (!ConvInputGradTakes(g)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": needs filters a positive multiple of ",
                     kConvInputGradChannelStep, " and 32-bit indices, got ",
                     g.o, " filters"));
  }
  const uintptr_t quad = 4 * DTypeSize(dtype);
  if (reinterpret_cast<uintptr_t>(dy) % quad != 0 ||
      reinterpret_cast<uintptr_t>(filter) % quad != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, ": dy and the filter must be ", quad, "-byte aligned"));
  }
  const GradGeometry d(g);
  if (d.pixels == 0 || d.c == 0) return absl::OkStatus();
  return LaunchFloatOn(kWhat, dtype, device,
                       [&](auto zero, cudaStream_t stream) {
                         using T = decltype(zero);
                         LaunchInputGrad<T, Tiles>(d, dy, filter, dx, stream);
                       });
}

}  // namespace

MT_DEFINE_CUDA_KERNEL(ConvInputGrad, ConvInputGradOnGpu);

}  // namespace mirrortrain::cuda
