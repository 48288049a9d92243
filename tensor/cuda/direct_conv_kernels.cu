// Direct Conv2D for patches of a few taps (cuda_kernels.h): no column
// buffer. A warp takes kPx neighbouring output pixels of one output row,
// its lanes 32 output channels (coalesced writes of dy and y rows). For
// each filter row and input channel it loads the kPx + k - 1 input values
// under those pixels once (the same address in every lane: one broadcast
// load through L1) and reuses each for k taps, so loads stay a fraction of
// the multiply-adds. The filter gradient keeps one sum per tap in each
// lane, adds the warps of a block in a fixed tree in shared memory and
// writes one partial per block; ColumnSum's two passes add the partials.
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

// The geometry in 32-bit ints (DirectConvTakes bounds every index).
struct DirectGeometry {
  explicit DirectGeometry(const Conv2DGeometry& g)
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
        groups((ow + kPx - 1) / kPx),
        tiles((o + 31) / 32) {}
  int n, h, w, c, oh, ow, o, sh, pt, pl;
  int groups;  // Pixel groups per output row.
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

// One warp per (image, output row, pixel group, channel tile), the tile
// innermost so that a block's warps read the same inputs.
template <typename T, int kK, bool kBf16, bool kReluBias>
__global__ void __launch_bounds__(kLaunchThreads)
    DirectConvKernel(DirectGeometry g, const T* x, const T* filter,
                     const T* bias, T* y) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * kWarps;
  const int units = g.n * g.oh * g.groups * g.tiles;
  for (int u = blockIdx.x * kWarps + threadIdx.x / 32; u < units; u += warps) {
    int rest = u;
    const int tile = rest % g.tiles;
    rest /= g.tiles;
    const int ox0 = rest % g.groups * kPx;
    rest /= g.groups;
    const int oy = rest % g.oh, i = rest / g.oh;
    const int oc = tile * 32 + lane;
    const bool live = oc < g.o;
    T acc[kPx] = {};
    const T* image = x + static_cast<int64_t>(i) * g.h * g.w * g.c;
    for (int ky = 0; ky < kK; ++ky) {
      const int iy = oy * g.sh - g.pt + ky;
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
          for (int p = 0; p < kPx; ++p) acc[p] += v[p + kx] * wv;
        }
      }
    }
    if (!live) continue;
    T* out = y + (static_cast<int64_t>(i) * g.oh + oy) * g.ow * g.o + oc;
#pragma unroll
    for (int p = 0; p < kPx; ++p) {
      if (ox0 + p >= g.ow) break;
      T r = acc[p];
      if constexpr (kReluBias) {
        r += __ldg(bias + oc);
        r = r > T(0) ? r : T(0);
      }
      out[(ox0 + p) * g.o] = r;
    }
  }
}

// Block (b, ch * tiles + tile) sums x's window times dy over the pixel
// groups [U * b / B, U * (b + 1) / B) of the U = n * oh * groups, its
// warps each over an eighth of them, and writes row b of `partial`
// [B, kK * kK * c * o] (the filter's layout) for its channel and tile.
template <typename T, int kK, bool kBf16>
__global__ void __launch_bounds__(kLaunchThreads)
    DirectConvFilterGradKernel(DirectGeometry g, const T* x, const T* dy,
                               T* partial) {
  __shared__ T halves[kWarps / 2][kK * kK][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int tile = blockIdx.y % g.tiles, ch = blockIdx.y / g.tiles;
  const int oc = tile * 32 + lane;
  const bool live = oc < g.o;
  // Fewer than 2^30 groups (DirectConvTakes): int, once split.
  const int64_t units = static_cast<int64_t>(g.n) * g.oh * g.groups;
  const int64_t b = blockIdx.x, blocks = gridDim.x;
  const int64_t begin = units * b / blocks,
                len = units * (b + 1) / blocks - begin;
  const int first = static_cast<int>(begin + len * warp / kWarps);
  const int last = static_cast<int>(begin + len * (warp + 1) / kWarps);
  T acc[kK * kK] = {};
  for (int u = first; u < last; ++u) {
    const int ox0 = u % g.groups * kPx;
    const int rest = u / g.groups;
    const int oy = rest % g.oh, i = rest / g.oh;
    const T* dy_row = dy + (static_cast<int64_t>(i) * g.oh + oy) * g.ow * g.o;
    T d[kPx];
#pragma unroll
    for (int p = 0; p < kPx; ++p) {
      d[p] = live && ox0 + p < g.ow
                 ? Operand<kBf16>(__ldg(dy_row + (ox0 + p) * g.o + oc))
                 : T(0);
    }
    const T* image = x + static_cast<int64_t>(i) * g.h * g.w * g.c;
#pragma unroll
    for (int ky = 0; ky < kK; ++ky) {
      const int iy = oy * g.sh - g.pt + ky;
      if (iy < 0 || iy >= g.h) continue;  // The same in every lane.
      T v[kPx + kK - 1];
      LoadInputRow<kK, kBf16>(g, image + iy * g.w * g.c, ox0, ch, v);
#pragma unroll
      for (int kx = 0; kx < kK; ++kx) {
#pragma unroll
        for (int p = 0; p < kPx; ++p) {
          // Past the row's end v may hold columns no pixel reads at this
          // tap: an Inf there times d[p] = 0 must not add a NaN.
          if (ox0 + p < g.ow) acc[ky * kK + kx] += v[p + kx] * d[p];
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
  T* row = partial + b * kK * kK * g.c * g.o;
#pragma unroll
  for (int t = 0; t < kK * kK; ++t) row[(t * g.c + ch) * g.o + oc] = acc[t];
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

absl::Status DirectConv2DOnGpu(DType dtype, const void* x, const void* filter,
                               const void* relu_bias, const Conv2DGeometry& g,
                               bool bf16, void* y, int device) {
  MT_RETURN_IF_ERROR(CheckDirect("DirectConv2D", dtype, g, bf16));
  const DirectGeometry d(g);
  const int64_t units = int64_t{d.n} * d.oh * d.groups * d.tiles;
  if (units == 0) return absl::OkStatus();
  const int blocks = GridBlocks((units + kWarps - 1) / kWarps);
  return LaunchFloatOn(
      "DirectConv2D", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DispatchDirect(g, bf16, [&](auto k, auto bf16_const) {
          constexpr bool kBf16 = decltype(bf16_const)::value;
          if constexpr (!kBf16 || std::is_same_v<T, float>) {
            auto kernel =
                relu_bias != nullptr
                    ? DirectConvKernel<T, decltype(k)::value, kBf16, true>
                    : DirectConvKernel<T, decltype(k)::value, kBf16, false>;
            kernel<<<blocks, kLaunchThreads, 0, stream>>>(
                d, static_cast<const T*>(x), static_cast<const T*>(filter),
                static_cast<const T*>(relu_bias), static_cast<T*>(y));
          }
        });
      });
}

absl::Status DirectConv2DFilterGradOnGpu(DType dtype, const void* x,
                                         const void* dy,
                                         const Conv2DGeometry& g, bool bf16,
                                         void* dfilter, int device) {
  MT_RETURN_IF_ERROR(CheckDirect("DirectConv2DFilterGrad", dtype, g, bf16));
  const DirectGeometry d(g);
  const int64_t size = g.patch() * g.o;
  if (size == 0) return absl::OkStatus();
  // Blocks along the pixel groups: from the shape alone, so the partials,
  // and with them the sums' rounding, are the same on every GPU; at most
  // 4096, and partials of at most 64 MiB.
  const int64_t units = int64_t{d.n} * d.oh * d.groups;
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
  MT_RETURN_IF_ERROR(LaunchFloatOn(
      "DirectConv2DFilterGrad", dtype, device,
      [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        DispatchDirect(g, bf16, [&](auto k, auto bf16_const) {
          constexpr bool kBf16 = decltype(bf16_const)::value;
          if constexpr (!kBf16 || std::is_same_v<T, float>) {
            const dim3 grid(static_cast<unsigned>(blocks),
                            static_cast<unsigned>(d.c * d.tiles));
            DirectConvFilterGradKernel<T, decltype(k)::value, kBf16>
                <<<grid, kLaunchThreads, 0, stream>>>(
                    d, static_cast<const T*>(x), static_cast<const T*>(dy),
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

}  // namespace

MT_DEFINE_CUDA_KERNEL(DirectConv2D, DirectConv2DOnGpu);
MT_DEFINE_CUDA_KERNEL(DirectConv2DFilterGrad, DirectConv2DFilterGradOnGpu);

}  // namespace mirrortrain::cuda
