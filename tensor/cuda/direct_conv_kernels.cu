// Direct Conv2D for patches of a few taps (cuda_kernels.h): no column
// buffer. A warp takes kPx neighbouring output pixels of one output row,
// its lanes 32 output channels (coalesced writes of dy and y rows). For
// each filter row and input channel it loads the kPx + k - 1 input values
// under those pixels once (the same address in every lane: one broadcast
// load through L1) and reuses each for k taps, so loads stay a fraction of
// the multiply-adds. Under a 2x2 max pool a warp takes two output rows and
// writes each window's maximum and winner instead of the outputs. The
// filter gradient keeps one sum per tap in each lane (under a pool, the
// pool's gradient goes to each window's winner as it is read), adds the
// warps of a block in a fixed tree in shared memory and writes one partial
// per block; ColumnSum's two passes add the partials.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/column_sum.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/device_scratch.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Output pixels along a row per warp: 8 keeps a 5x5 filter's loads at 17
// per 40 multiply-adds (12 inputs, 5 taps) per filter row.
constexpr int kPx = 8;
constexpr int kWarps = kLaunchThreads / 32;
// Pixel groups per warp the filter gradient aims at: enough work to hide
// the loads' latency, few enough partials (blocks) to add.
constexpr int64_t kGroupsPerWarp = 8;

// What a direct convolution writes: its output (kStore), relu(output +
// bias) (kReluBias), or the 2x2 stride-2 VALID max pool of its output and
// the pool's winners (kMaxPool).
enum class Epilogue { kStore, kReluBias, kMaxPool };

// The geometry in 32-bit ints (DirectConvTakes bounds every index), and
// the work units: a unit is `kRows` output rows (2 under a pool: one
// pooled row) by kPx output columns.
struct DirectGeometry {
  DirectGeometry(const Conv2DGeometry& g, bool pooled)
      : n(static_cast<int>(g.n)),
        h(static_cast<int>(g.h)),
        w(static_cast<int>(g.w)),
        c(static_cast<int>(g.c)),
        oh(static_cast<int>(g.oh)),
        ow(static_cast<int>(g.ow)),
        o(static_cast<int>(g.o)),
        sh(static_cast<int>(g.sh)),
        pt(static_cast<int>(g.pt)),
        pl(static_cast<int>(g.pl)),
        ph(oh / 2),
        pw(ow / 2),
        rows(pooled ? ph : oh),
        cols(pooled ? 2 * pw : ow),
        groups((cols + kPx - 1) / kPx),
        tiles((o + 31) / 32) {}
  int n, h, w, c, oh, ow, o, sh, pt, pl;
  int ph, pw;  // The pool's output rows and columns.
  int rows;    // Unit rows per image.
  int cols;    // Output columns the units cover (those a pool reads).
  int groups;  // Units along a unit row.
  int tiles;   // 32-channel tiles of the output channels.
};

// A value as a product reads it: rounded to bfloat16 with kBf16.
template <bool kBf16, typename T>
__device__ inline T Operand(T v) {
  if constexpr (kBf16) {
    return __bfloat162float(__float2bfloat16_rn(v));
  } else {
    return v;
  }
}

// The kPx + kK - 1 input values of channel ch, image row iy (inside the
// image), that output pixels ox0.. read with column offsets 0..kK-1
// (zeros left and right of the image).
template <int kK, bool kBf16, typename T>
__device__ inline void LoadInputRow(const DirectGeometry& g, const T* row,
                                    int ox0, int ch, T (&v)[kPx + kK - 1]) {
#pragma unroll
  for (int j = 0; j < kPx + kK - 1; ++j) {
    const int ix = ox0 - g.pl + j;
    v[j] =
        ix >= 0 && ix < g.w ? Operand<kBf16>(__ldg(row + ix * g.c + ch)) : T(0);
  }
}

// acc[q][p] = the convolution at output (oy0 + q, ox0 + p) for channel oc
// (garbage past the last column; zero filter taps in dead lanes).
template <int kK, int kRows, bool kBf16, typename T>
__device__ inline void ConvOutputs(const DirectGeometry& g, const T* image,
                                   const T* filter, int oy0, int ox0, int oc,
                                   bool live, T (&acc)[kRows][kPx]) {
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    for (int ky = 0; ky < kK; ++ky) {
      const int iy = (oy0 + q) * g.sh - g.pt + ky;
      if (iy < 0 || iy >= g.h) continue;  // The same in every lane.
      for (int ch = 0; ch < g.c; ++ch) {
        T v[kPx + kK - 1];
        LoadInputRow<kK, kBf16>(g, image + iy * g.w * g.c, ox0, ch, v);
#pragma unroll
        for (int kx = 0; kx < kK; ++kx) {
          const T wv =
              live ? Operand<kBf16>(
                         __ldg(filter + ((ky * kK + kx) * g.c + ch) * g.o + oc))
                   : T(0);
#pragma unroll
          for (int p = 0; p < kPx; ++p) acc[q][p] += v[p + kx] * wv;
        }
      }
    }
  }
}

// Offset of output (oy, ox, oc) within its image: MaxPool2DForward's
// argmax of a pool over the convolution's output.
__device__ inline int32_t CellOf(const DirectGeometry& g, int oy, int ox,
                                 int oc) {
  return (oy * g.ow + ox) * g.o + oc;
}

// One warp per (image, unit row, unit, channel tile), the tile innermost
// so that a block's warps read the same inputs.
template <typename T, int kK, bool kBf16, Epilogue kEpilogue>
__global__ void __launch_bounds__(kLaunchThreads)
    DirectConvKernel(DirectGeometry g, const T* x, const T* filter,
                     const T* bias, T* y, int32_t* argmax) {
  constexpr int kRows = kEpilogue == Epilogue::kMaxPool ? 2 : 1;
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * kWarps;
  const int units = g.n * g.rows * g.groups * g.tiles;
  for (int u = blockIdx.x * kWarps + threadIdx.x / 32; u < units; u += warps) {
    int rest = u;
    const int tile = rest % g.tiles;
    rest /= g.tiles;
    const int ox0 = rest % g.groups * kPx;
    rest /= g.groups;
    const int row = rest % g.rows, i = rest / g.rows;
    const int oc = tile * 32 + lane;
    const bool live = oc < g.o;
    T acc[kRows][kPx] = {};
    ConvOutputs<kK, kRows, kBf16>(g,
                                  x + static_cast<int64_t>(i) * g.h * g.w * g.c,
                                  filter, row * kRows, ox0, oc, live, acc);
    if (!live) continue;
    if constexpr (kEpilogue == Epilogue::kMaxPool) {
      // Cells in row-major order; the first maximum wins, a NaN beats
      // every number and the first NaN stays (MaxPool2DForward's rule).
      const int64_t out0 = (static_cast<int64_t>(i) * g.ph + row) * g.pw;
#pragma unroll
      for (int pp = 0; pp < kPx / 2; ++pp) {
        const int px = ox0 / 2 + pp;
        if (px >= g.pw) break;
        T best = acc[0][2 * pp];
        int32_t at = CellOf(g, 2 * row, 2 * px, oc);
#pragma unroll
        for (int k = 1; k < 4; ++k) {
          const T v = acc[k / 2][2 * pp + k % 2];
          if (v > best || (v != v && best == best)) {
            best = v;
            at = CellOf(g, 2 * row + k / 2, 2 * px + k % 2, oc);
          }
        }
        y[(out0 + px) * g.o + oc] = best;
        if (argmax != nullptr) argmax[(out0 + px) * g.o + oc] = at;
      }
    } else {
      T* out = y + (static_cast<int64_t>(i) * g.oh + row) * g.ow * g.o + oc;
#pragma unroll
      for (int p = 0; p < kPx; ++p) {
        if (ox0 + p >= g.ow) break;
        T r = acc[0][p];
        if constexpr (kEpilogue == Epilogue::kReluBias) {
          r += __ldg(bias + oc);
          r = r > T(0) ? r : T(0);
        }
        out[(ox0 + p) * g.o] = r;
      }
    }
  }
}

// d[q][p]: the output gradient at (oy0 + q, ox0 + p), channel oc, rounded
// as a product reads it. Under a pool (argmax non-null) dy is the pool
// output's gradient and reaches only each window's winner.
template <int kRows, bool kBf16, typename T>
__device__ inline void OutputGradients(const DirectGeometry& g, const T* dy,
                                       const int32_t* argmax, int i, int row,
                                       int ox0, int oc, bool live,
                                       T (&d)[kRows][kPx]) {
#pragma unroll
  for (int p = 0; p < kPx; ++p) {
    const bool in = live && ox0 + p < g.cols;
    if constexpr (kRows == 1) {
      const int64_t at =
          ((static_cast<int64_t>(i) * g.oh + row) * g.ow + ox0 + p) * g.o + oc;
      d[0][p] = in ? Operand<kBf16>(__ldg(dy + at)) : T(0);
    } else {
      const int64_t at =
          ((static_cast<int64_t>(i) * g.ph + row) * g.pw + (ox0 + p) / 2) *
              g.o +
          oc;
      const int32_t winner = in ? __ldg(argmax + at) : -1;
      const T grad = in ? Operand<kBf16>(__ldg(dy + at)) : T(0);
#pragma unroll
      for (int q = 0; q < kRows; ++q) {
        d[q][p] =
            winner == CellOf(g, kRows * row + q, ox0 + p, oc) ? grad : T(0);
      }
    }
  }
}

// Block (b, ch * tiles + tile) sums x's window times the output gradient
// over the units [U * b / B, U * (b + 1) / B) of the U = n * rows * groups,
// its warps each over an eighth of them, and writes row b of `partial`
// [B, kK * kK * c * o] (the filter's layout) for its channel and tile.
template <typename T, int kK, bool kBf16, bool kPooled>
__global__ void __launch_bounds__(kLaunchThreads)
    DirectConvFilterGradKernel(DirectGeometry g, const T* x, const T* dy,
                               const int32_t* argmax, T* partial) {
  constexpr int kRows = kPooled ? 2 : 1;
  __shared__ T halves[kWarps / 2][kK * kK][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int tile = blockIdx.y % g.tiles, ch = blockIdx.y / g.tiles;
  const int oc = tile * 32 + lane;
  const bool live = oc < g.o;
  // Fewer than 2^30 units (DirectConvTakes): int, once split.
  const int64_t units = static_cast<int64_t>(g.n) * g.rows * g.groups;
  const int64_t b = blockIdx.x, blocks = gridDim.x;
  const int64_t begin = units * b / blocks,
                len = units * (b + 1) / blocks - begin;
  const int first = static_cast<int>(begin + len * warp / kWarps);
  const int last = static_cast<int>(begin + len * (warp + 1) / kWarps);
  T acc[kK * kK] = {};
  for (int u = first; u < last; ++u) {
    const int ox0 = u % g.groups * kPx;
    const int rest = u / g.groups;
    const int row = rest % g.rows, i = rest / g.rows;
    T d[kRows][kPx];
    OutputGradients<kRows, kBf16>(g, dy, argmax, i, row, ox0, oc, live, d);
    const T* image = x + static_cast<int64_t>(i) * g.h * g.w * g.c;
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
#pragma unroll
      for (int ky = 0; ky < kK; ++ky) {
        const int iy = (row * kRows + q) * g.sh - g.pt + ky;
        if (iy < 0 || iy >= g.h) continue;  // The same in every lane.
        T v[kPx + kK - 1];
        LoadInputRow<kK, kBf16>(g, image + iy * g.w * g.c, ox0, ch, v);
#pragma unroll
        for (int kx = 0; kx < kK; ++kx) {
#pragma unroll
          for (int p = 0; p < kPx; ++p) {
            // Past the covered columns v may hold columns no output reads
            // at this tap: an Inf there times d = 0 must not add a NaN.
            if (ox0 + p < g.cols) acc[ky * kK + kx] += v[p + kx] * d[q][p];
          }
        }
      }
    }
  }
  // Warps [half, 2 * half) hand their sums to warps [0, half), halving
  // until warp 0 holds the block's: a fixed order.
  for (int half = kWarps / 2; half >= 1; half /= 2) {
    if (warp >= half && warp < 2 * half) {
#pragma unroll
      for (int t = 0; t < kK * kK; ++t) halves[warp - half][t][lane] = acc[t];
    }
    __syncthreads();
    if (warp < half) {
#pragma unroll
      for (int t = 0; t < kK * kK; ++t) acc[t] += halves[warp][t][lane];
    }
    __syncthreads();
  }
  if (warp != 0 || !live) return;
  T* out = partial + b * kK * kK * g.c * g.o;
#pragma unroll
  for (int t = 0; t < kK * kK; ++t) out[(t * g.c + ch) * g.o + oc] = acc[t];
}

absl::Status CheckDirect(const char* what, DType dtype, const Conv2DGeometry& g,
                         bool bf16) {
  MT_RETURN_IF_ERROR(CheckImageWindow(what, g));
  if (!DirectConvTakes(g)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": not a direct convolution (", g.kh, "x", g.kw, " filter over ",
        g.c, " channels, column stride ", g.sw, ")"));
  }
  if (bf16 && dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bfloat16 products take f32 values, got ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

// Calls f(std::integral_constant<int, k>, std::bool_constant<bf16>) for
// the filter size and precision (CheckDirect passed).
template <typename F>
void DispatchDirect(const Conv2DGeometry& g, bool bf16, F f) {
  auto with_size = [&](auto bf16_const) {
    if (g.kw == 3) {
      f(std::integral_constant<int, 3>{}, bf16_const);
    } else {
      f(std::integral_constant<int, 5>{}, bf16_const);
    }
  };
  if (bf16) {
    with_size(std::true_type{});
  } else {
    with_size(std::false_type{});
  }
}

// The forward kernel for `epilogue` on the current stream (checked).
absl::Status LaunchForward(const char* what, DType dtype, const void* x,
                           const void* filter, const void* bias,
                           const Conv2DGeometry& g, bool bf16,
                           Epilogue epilogue, void* y, int32_t* argmax,
                           int device) {
  MT_RETURN_IF_ERROR(CheckDirect(what, dtype, g, bf16));
  const DirectGeometry d(g, epilogue == Epilogue::kMaxPool);
  const int64_t units = int64_t{d.n} * d.rows * d.groups * d.tiles;
  if (units == 0) return absl::OkStatus();
  const int blocks = GridBlocks((units + kWarps - 1) / kWarps);
  return LaunchFloatOn(
      what, dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DispatchDirect(g, bf16, [&](auto k, auto bf16_const) {
          constexpr int kK = decltype(k)::value;
          constexpr bool kBf16 = decltype(bf16_const)::value;
          if constexpr (!kBf16 || std::is_same_v<T, float>) {
            auto kernel =
                epilogue == Epilogue::kMaxPool
                    ? DirectConvKernel<T, kK, kBf16, Epilogue::kMaxPool>
                : epilogue == Epilogue::kReluBias
                    ? DirectConvKernel<T, kK, kBf16, Epilogue::kReluBias>
                    : DirectConvKernel<T, kK, kBf16, Epilogue::kStore>;
            kernel<<<blocks, kLaunchThreads, 0, stream>>>(
                d, static_cast<const T*>(x), static_cast<const T*>(filter),
                static_cast<const T*>(bias), static_cast<T*>(y), argmax);
          }
        });
      });
}

// The filter-gradient kernel (pooled: dy and argmax the pool's) and the
// sum of its partials into dfilter, on the current stream (checked).
absl::Status LaunchFilterGrad(const char* what, DType dtype, const void* x,
                              const void* dy, const int32_t* argmax,
                              const Conv2DGeometry& g, bool bf16, void* dfilter,
                              int device) {
  MT_RETURN_IF_ERROR(CheckDirect(what, dtype, g, bf16));
  const bool pooled = argmax != nullptr;
  const DirectGeometry d(g, pooled);
  const int64_t size = g.patch() * g.o;
  if (size == 0) return absl::OkStatus();
  // Blocks along the units: from the shape alone, so the partials, and
  // with them the sums' rounding, are the same on every GPU; at most 4096,
  // and partials of at most 64 MiB. With no units one block writes zeros.
  const int64_t units = int64_t{d.n} * d.rows * d.groups;
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t blocks = std::clamp<int64_t>(
      (units + kWarps * kGroupsPerWarp - 1) / (kWarps * kGroupsPerWarp), 1,
      std::clamp<int64_t>((int64_t{64} << 20) / (size * elem), 1, 4096));
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  DeviceScratch partial;
  MT_RETURN_IF_ERROR(
      partial.Allocate(device, static_cast<size_t>(blocks * size * elem)));
  absl::Status status;
  MT_RETURN_IF_ERROR(
      LaunchFloatOn(what, dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DispatchDirect(g, bf16, [&](auto k, auto bf16_const) {
          constexpr int kK = decltype(k)::value;
          constexpr bool kBf16 = decltype(bf16_const)::value;
          if constexpr (!kBf16 || std::is_same_v<T, float>) {
            const dim3 grid(static_cast<unsigned>(blocks),
                            static_cast<unsigned>(d.c * d.tiles));
            auto kernel = pooled
                              ? DirectConvFilterGradKernel<T, kK, kBf16, true>
                              : DirectConvFilterGradKernel<T, kK, kBf16, false>;
            kernel<<<grid, kLaunchThreads, 0, stream>>>(
                d, static_cast<const T*>(x), static_cast<const T*>(dy), argmax,
                partial.get<T>());
            // Blamed on this kernel, and no sum of unwritten partials.
            if (const cudaError_t err = cudaGetLastError();
                err != cudaSuccess) {
              status.Update(CudaError(err, "DirectConvFilterGradKernel",
                                      __FILE__, __LINE__));
              return;
            }
            status.Update(column_sum::Run(
                column_sum::LoadPlain<T>{partial.get<T>()}, blocks, size,
                static_cast<T*>(dfilter), device));
          }
        });
      }));
  return status;
}

absl::Status DirectConv2DOnGpu(DType dtype, const void* x, const void* filter,
                               const void* relu_bias, const Conv2DGeometry& g,
                               bool bf16, void* y, int device) {
  return LaunchForward(
      "DirectConv2D", dtype, x, filter, relu_bias, g, bf16,
      relu_bias != nullptr ? Epilogue::kReluBias : Epilogue::kStore, y, nullptr,
      device);
}

absl::Status DirectConv2DFilterGradOnGpu(DType dtype, const void* x,
                                         const void* dy,
                                         const Conv2DGeometry& g, bool bf16,
                                         void* dfilter, int device) {
  return LaunchFilterGrad("DirectConv2DFilterGrad", dtype, x, dy, nullptr, g,
                          bf16, dfilter, device);
}

absl::Status DirectConv2DMaxPoolOnGpu(DType dtype, const void* x,
                                      const void* filter,
                                      const Conv2DGeometry& g, bool bf16,
                                      void* y, int32_t* argmax, int device) {
  return LaunchForward("DirectConv2DMaxPool", dtype, x, filter, nullptr, g,
                       bf16, Epilogue::kMaxPool, y, argmax, device);
}

absl::Status DirectConv2DMaxPoolFilterGradOnGpu(
    DType dtype, const void* x, const void* dy, const int32_t* argmax,
    const Conv2DGeometry& g, bool bf16, void* dfilter, int device) {
  if (argmax == nullptr) {
    return absl::InvalidArgumentError(
        "DirectConv2DMaxPoolFilterGrad: needs the forward's argmax");
  }
  return LaunchFilterGrad("DirectConv2DMaxPoolFilterGrad", dtype, x, dy, argmax,
                          g, bf16, dfilter, device);
}

}  // namespace

MT_DEFINE_CUDA_KERNEL(DirectConv2D, DirectConv2DOnGpu);
MT_DEFINE_CUDA_KERNEL(DirectConv2DFilterGrad, DirectConv2DFilterGradOnGpu);
MT_DEFINE_CUDA_KERNEL(DirectConv2DMaxPool, DirectConv2DMaxPoolOnGpu);
MT_DEFINE_CUDA_KERNEL(DirectConv2DMaxPoolFilterGrad,
                      DirectConv2DMaxPoolFilterGradOnGpu);

}  // namespace mirrortrain::cuda
