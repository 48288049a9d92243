// Conv2D's input gradient as one implicit GEMM (cuda_kernels.h):
//   dx [n * h * w, c] = A [n * h * w, kh * kw * o] @ B [kh * kw * o, c],
// where row m of A holds, tap by tap, dy at the output pixel that reads
// input pixel m through that tap (zeros where none does), and
// B [(tap, oc)][ch] = filter [tap][ch][oc]. A is never stored: each block
// gathers its tiles of it from dy as it goes. The GEMM path instead writes
// dy @ filter^T as columns, kh * kw * c values per output pixel (160 MB for
// the cnn's second conv at batch 256), for col2im to read back.
//
// A block computes kTileM input pixels by kTileN input channels, stepping
// through K kTileK output channels of one tap at a time: its threads load
// the next step's tiles into registers while they multiply the current
// ones from shared memory (one barrier pair per step), each thread
// kThreadM x kThreadN outputs. Every output is one thread's sum, in a
// fixed order: deterministic.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

constexpr int kTileM = 128;                        // Input pixels per block.
constexpr int kTileN = 32;                         // Input channels per block.
constexpr int kTileK = kConvInputGradChannelStep;  // dy channels per step.
constexpr int kThreadM = 8;                        // Pixels per thread.
constexpr int kThreadN = 4;                        // Channels per thread.
constexpr int kGemmThreads = (kTileM / kThreadM) * (kTileN / kThreadN);
static_assert(kGemmThreads == kTileM, "a thread gathers one pixel's row");
static_assert(kTileN * kTileK == 4 * kGemmThreads,
              "a thread loads four filter values a step");

// Four values, aligned for one (f32) or two (f64) 16-byte accesses.
template <typename T>
struct alignas(sizeof(T) * 4) Quad {
  T v[4];
};

// The geometry in 32-bit ints (ConvInputGradTakes bounds every index).
struct GradGeometry {
  explicit GradGeometry(const Conv2DGeometry& g)
      : n(static_cast<int>(g.n)),
        h(static_cast<int>(g.h)),
        w(static_cast<int>(g.w)),
        c(static_cast<int>(g.c)),
        oh(static_cast<int>(g.oh)),
        ow(static_cast<int>(g.ow)),
        o(static_cast<int>(g.o)),
        kw(static_cast<int>(g.kw)),
        sh(static_cast<int>(g.sh)),
        sw(static_cast<int>(g.sw)),
        pt(static_cast<int>(g.pt)),
        pl(static_cast<int>(g.pl)),
        pixels(n * h * w),
        steps(static_cast<int>(g.kh * g.kw) * (o / kTileK)) {}
  int n, h, w, c, oh, ow, o, kw, sh, sw, pt, pl;
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

// The registers a thread carries from global memory to shared memory for
// one step: its pixel's kTileK values of A and four of B.
template <typename T>
struct StepValues {
  T a[kTileK];
  Quad<T> b;
};

// Loads step `at` for thread t of the block whose channels start at c0;
// the thread's pixel is (image, iy, ix), inside dx when pixel_in.
template <typename T>
__device__ inline void LoadStep(const GradGeometry& g, const T* dy,
                                const T* filter, const Step& at, int t, int iy,
                                int ix, int image, bool pixel_in, int c0,
                                StepValues<T>& s) {
  const int oy = pixel_in ? OutputAt(iy, g.pt, at.ky, g.sh, g.oh) : -1;
  const int ox = oy >= 0 ? OutputAt(ix, g.pl, at.kx, g.sw, g.ow) : -1;
  if (ox >= 0) {
    const Quad<T>* row = reinterpret_cast<const Quad<T>*>(
        dy + ((image * g.oh + oy) * g.ow + ox) * g.o + at.oc0);
#pragma unroll
    for (int q = 0; q < kTileK / 4; ++q) {
      const Quad<T> v = row[q];
#pragma unroll
      for (int j = 0; j < 4; ++j) s.a[q * 4 + j] = v.v[j];
    }
  } else {
#pragma unroll
    for (int k = 0; k < kTileK; ++k) s.a[k] = T(0);
  }
  // Thread t: channel c0 + t / 4, dy channels oc0 + t % 4 * 4 .. + 3.
  const int ch = c0 + t / 4;
  if (ch < g.c) {
    const int tap = at.ky * g.kw + at.kx;
    s.b = *reinterpret_cast<const Quad<T>*>(filter + (tap * g.c + ch) * g.o +
                                            at.oc0 + t % 4 * 4);
  } else {
    s.b = Quad<T>{};
  }
}

// Block (mb, nb): dx rows [mb * kTileM, + kTileM) and channels
// [nb * kTileN, + kTileN), every one of them inside dx written.
template <typename T>
__global__ void __launch_bounds__(kGemmThreads)
    ConvInputGradKernel(GradGeometry g, const T* dy, const T* filter, T* dx) {
  // a_tile[k][m / 4].v[m % 4] = A [m0 + m][step's k];
  // b_tile[k][n / 4].v[n % 4] = B [step's k][c0 + n].
  __shared__ Quad<T> a_tile[kTileK][kTileM / 4];
  __shared__ Quad<T> b_tile[kTileK][kTileN / 4];
  const int t = threadIdx.x;
  const int m0 = blockIdx.x * kTileM, c0 = blockIdx.y * kTileN;
  // The pixel this thread gathers A's row for.
  const int m = m0 + t;
  const bool pixel_in = m < g.pixels;
  const int ix = m % g.w, iy = m / g.w % g.h, image = m / (g.w * g.h);
  // The outputs this thread sums: pixels m0 + tm * kThreadM + i, channels
  // c0 + tn * kThreadN + j.
  const int tn = t % (kTileN / kThreadN), tm = t / (kTileN / kThreadN);
  T acc[kThreadM][kThreadN] = {};
  StepValues<T> next;
  Step at;
  LoadStep(g, dy, filter, at, t, iy, ix, image, pixel_in, c0, next);
  for (int step = 0; step < g.steps; ++step) {
#pragma unroll
    for (int k = 0; k < kTileK; ++k) a_tile[k][t / 4].v[t % 4] = next.a[k];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      b_tile[t % 4 * 4 + j][t / 16].v[t / 4 % 4] = next.b.v[j];
    __syncthreads();
    // The next step's loads are in flight while this one multiplies.
    if (step + 1 < g.steps) {
      at.Advance(g.kw, g.o);
      LoadStep(g, dy, filter, at, t, iy, ix, image, pixel_in, c0, next);
    }
#pragma unroll
    for (int k = 0; k < kTileK; ++k) {
      const Quad<T> a0 = a_tile[k][tm * 2], a1 = a_tile[k][tm * 2 + 1];
      const Quad<T> b = b_tile[k][tn];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) {
          acc[i][j] += a0.v[i] * b.v[j];
          acc[4 + i][j] += a1.v[i] * b.v[j];
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kThreadM; ++i) {
    const int row = m0 + tm * kThreadM + i;
    if (row >= g.pixels) break;
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) {
      const int ch = c0 + tn * kThreadN + j;
      if (ch < g.c) dx[row * g.c + ch] = acc[i][j];
    }
  }
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
  const dim3 grid(static_cast<unsigned>((d.pixels + kTileM - 1) / kTileM),
                  static_cast<unsigned>((d.c + kTileN - 1) / kTileN));
  return LaunchFloatOn(
      kWhat, dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        ConvInputGradKernel<T><<<grid, kGemmThreads, 0, stream>>>(
            d, static_cast<const T*>(dy), static_cast<const T*>(filter),
            static_cast<T*>(dx));
      });
}

}  // namespace

MT_DEFINE_CUDA_KERNEL(ConvInputGrad, ConvInputGradOnGpu);

}  // namespace mirrortrain::cuda
