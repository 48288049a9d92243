// Direct Conv2D for patches of a few taps (cuda_kernels.h): no column
// buffer. A warp takes a unit of kUnitRows x kUnitCols output pixels, its
// lanes 32 output channels (coalesced loads and stores of dy and y). Per
// input channel the warp's lanes copy the input rows under the unit into
// the warp's shared memory once, zeros outside the image, so the
// multiply-adds read them as whole rows (two 16-byte broadcast loads in
// f32) at fixed offsets, with no bounds checks: each value loaded feeds
// up to k * kUnitCols multiply-adds. Under a 2x2 max pool a unit is 2x2
// pool windows; the kernel writes each window's maximum and winner instead
// of the outputs. The filter gradient keeps one sum per tap in each lane
// (under a pool, the pool's gradient goes to each window's winner as it is
// read), adds the warps of a block in a fixed tree in shared memory and
// writes one partial per block; ColumnSum's two passes add the partials.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/column_sum.cuh"
#include "tensor/cuda/conv_geometry.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/device_scratch.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// A unit's output rows and columns: 4 x 4 keeps the multiply-adds (16 per
// tap) well above the shared loads (two per staged row) and the unit
// small enough that 28- and 32-wide images split into whole units.
constexpr int kUnitRows = 4;
constexpr int kUnitCols = 4;
// Values of a staged input row: the kUnitCols + k - 1 <= 8 that a unit
// reads along one input row, padded to 8 so that a row is one aligned
// 32-byte (f32) load.
constexpr int kRowValues = 8;
// Staged rows a unit reads at most: (kUnitRows - 1) * sh + k with the row
// stride at most k (DirectConvTakes) and k <= 5.
constexpr int kMaxStagedRows = kUnitRows * 5;
constexpr int kWarps = kLaunchThreads / 32;
// Units per warp the filter gradient aims at: enough blocks to fill the
// GPU, few enough partials to add.
constexpr int64_t kUnitsPerWarp = 4;

static_assert(kUnitRows % 2 == 0 && kUnitCols % 2 == 0,
              "a unit holds whole 2x2 pool windows");
static_assert(kUnitCols + 5 - 1 <= kRowValues, "a staged row holds 5x5's");

// What a direct convolution writes: its output (kStore), relu(output +
// bias) (kReluBias), the 2x2 stride-2 VALID max pool of its output and
// the pool's winners (kMaxPool), or relu(the pool + bias) and the winners
// (kMaxPoolReluBias).
enum class Epilogue { kStore, kReluBias, kMaxPool, kMaxPoolReluBias };

__host__ __device__ constexpr bool Pools(Epilogue e) {
  return e == Epilogue::kMaxPool || e == Epilogue::kMaxPoolReluBias;
}

// relu(v + bias[oc]), the formula of BiasAddRelu's kernel (NaN -> 0).
template <typename T>
__device__ inline T ReluBias(T v, const T* bias, int oc) {
  v += __ldg(bias + oc);
  return v > T(0) ? v : T(0);
}

// The geometry in 32-bit ints (DirectConvTakes bounds every index), and
// the work units: kUnitRows x kUnitCols outputs, of those the units cover
// (under a pool, the outputs its windows read).
struct DirectGeometry : Conv2DGeometry32 {
  DirectGeometry(const Conv2DGeometry& g, bool pooled)
      : Conv2DGeometry32(g),
        ph(oh / 2),
        pw(ow / 2),
        out_rows(pooled ? 2 * ph : oh),
        cols(pooled ? 2 * pw : ow),
        rows((out_rows + kUnitRows - 1) / kUnitRows),
        groups((cols + kUnitCols - 1) / kUnitCols),
        tiles((o + 31) / 32),
        staged_rows((kUnitRows - 1) * sh + kh) {}
  int ph, pw;       // The pool's output rows and columns.
  int out_rows;     // Output rows the units cover.
  int cols;         // Output columns the units cover.
  int rows;         // Unit rows per image.
  int groups;       // Units along a unit row.
  int tiles;        // 32-channel tiles of the output channels.
  int staged_rows;  // Input rows under a unit.
};

// A staged input row, aligned for vector loads.
template <typename T>
struct alignas(sizeof(T) * kRowValues) StagedRow {
  T v[kRowValues];
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

// The calling warp copies channel ch of the input under the unit at output
// (oy0, ox0) of `image` into its rows: rows[r].v[j] = x[oy0 * sh - pt + r]
// [ox0 - pl + j][ch], zero outside the image, rounded as a product reads
// it. Every lane of the warp calls it; on return every lane sees the rows
// (and none still reads the previous ones when they are overwritten).
template <bool kBf16, typename T>
__device__ inline void StageRows(const DirectGeometry& g, const T* image,
                                 int oy0, int ox0, int ch, int lane,
                                 StagedRow<T>* rows) {
  const int iy0 = oy0 * g.sh - g.pt, ix0 = ox0 - g.pl;
  __syncwarp();
  for (int e = lane; e < g.staged_rows * kRowValues; e += 32) {
    const int iy = iy0 + e / kRowValues, ix = ix0 + e % kRowValues;
    rows[e / kRowValues].v[e % kRowValues] =
        iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
            ? Operand<kBf16>(__ldg(image + (iy * g.w + ix) * g.c + ch))
            : T(0);
  }
  __syncwarp();
}

// Calls f(q, ky, kx, p, v) for every output (q, p) of a unit whose rows are
// staged at `rows`, and every filter tap (ky, kx), with v the staged input
// value the output reads through the tap; all unrolled, so f's indices
// are constants. kEdge: only outputs q < q_end, p < p_end.
template <int kK, bool kEdge, typename T, typename F>
__device__ inline void ForEachProduct(const StagedRow<T>* rows, int sh,
                                      int q_end, int p_end, F f) {
#pragma unroll
  for (int q = 0; q < kUnitRows; ++q) {
    if (kEdge && q >= q_end) break;  // The same in every lane.
    const StagedRow<T>* under = rows + q * sh;
#pragma unroll
    for (int ky = 0; ky < kK; ++ky) {
      const StagedRow<T> row = under[ky];
#pragma unroll
      for (int kx = 0; kx < kK; ++kx) {
#pragma unroll
        for (int p = 0; p < kUnitCols; ++p) {
          if (!kEdge || p < p_end) f(q, ky, kx, p, row.v[p + kx]);
        }
      }
    }
  }
}

// acc[q][p] += the convolution at output (oy0 + q, ox0 + p) for channel oc
// (garbage past the covered outputs; zero filter taps in dead lanes).
template <int kK, bool kBf16, typename T>
__device__ inline void ConvUnit(const DirectGeometry& g, const T* image,
                                const T* filter, int oy0, int ox0, int oc,
                                bool live, int lane, StagedRow<T>* rows,
                                T (&acc)[kUnitRows][kUnitCols]) {
  for (int ch = 0; ch < g.c; ++ch) {
    T taps[kK * kK];
#pragma unroll
    for (int t = 0; t < kK * kK; ++t) {
      taps[t] = live ? Operand<kBf16>(__ldg(filter + (t * g.c + ch) * g.o + oc))
                     : T(0);
    }
    StageRows<kBf16>(g, image, oy0, ox0, ch, lane, rows);
    ForEachProduct<kK, false>(rows, g.sh, kUnitRows, kUnitCols,
                              [&](int q, int ky, int kx, int p, T v) {
                                acc[q][p] += v * taps[ky * kK + kx];
                              });
  }
}

// Offset of output (oy, ox, oc) within its image: MaxPool2DForward's
// argmax of a pool over the convolution's output.
__device__ inline int32_t CellOf(const DirectGeometry& g, int oy, int ox,
                                 int oc) {
  return (oy * g.ow + ox) * g.o + oc;
}

// A unit's place: image i, output (oy0, ox0).
struct UnitAt {
  int i, oy0, ox0;
};
__device__ inline UnitAt UnitOf(const DirectGeometry& g, int u) {
  const int rest = u / g.groups;
  return {rest / g.rows, rest % g.rows * kUnitRows, u % g.groups * kUnitCols};
}

// One warp per (image, unit row, unit, channel tile), the tile innermost
// so that a block's warps read the same inputs.
template <typename T, int kK, bool kBf16, Epilogue kEpilogue>
__global__ void __launch_bounds__(kLaunchThreads)
    DirectConvKernel(DirectGeometry g, const T* x, const T* filter,
                     const T* bias, T* y, int32_t* argmax) {
  __shared__ StagedRow<T> staged[kWarps][kMaxStagedRows];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = gridDim.x * kWarps;
  const int units = g.n * g.rows * g.groups * g.tiles;
  for (int u = blockIdx.x * kWarps + warp; u < units; u += warps) {
    const int tile = u % g.tiles;
    const UnitAt at = UnitOf(g, u / g.tiles);
    const int oc = tile * 32 + lane;
    const bool live = oc < g.o;
    T acc[kUnitRows][kUnitCols] = {};
    ConvUnit<kK, kBf16>(g, x + static_cast<int64_t>(at.i) * g.h * g.w * g.c,
                        filter, at.oy0, at.ox0, oc, live, lane, staged[warp],
                        acc);
    // Dead lanes still stage rows: every lane runs the same units.
    if (!live) continue;
    if constexpr (Pools(kEpilogue)) {
      // Cells in row-major order; the first maximum wins, a NaN beats
      // every number and the first NaN stays (MaxPool2DForward's rule).
#pragma unroll
      for (int a = 0; a < kUnitRows / 2; ++a) {
#pragma unroll
        for (int b = 0; b < kUnitCols / 2; ++b) {
          const int py = at.oy0 / 2 + a, px = at.ox0 / 2 + b;
          if (py >= g.ph || px >= g.pw) continue;
          T best = acc[2 * a][2 * b];
          int32_t winner = CellOf(g, 2 * py, 2 * px, oc);
#pragma unroll
          for (int k = 1; k < 4; ++k) {
            const T v = acc[2 * a + k / 2][2 * b + k % 2];
            if (v > best || (v != v && best == best)) {
              best = v;
              winner = CellOf(g, 2 * py + k / 2, 2 * px + k % 2, oc);
            }
          }
          const int64_t out =
              ((static_cast<int64_t>(at.i) * g.ph + py) * g.pw + px) * g.o + oc;
          if constexpr (kEpilogue == Epilogue::kMaxPoolReluBias) {
            best = ReluBias(best, bias, oc);
          }
          y[out] = best;
          if (argmax != nullptr) argmax[out] = winner;
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < kUnitRows; ++q) {
        const int oy = at.oy0 + q;
        if (oy >= g.oh) break;
        T* out = y + (static_cast<int64_t>(at.i) * g.oh + oy) * g.ow * g.o + oc;
#pragma unroll
        for (int p = 0; p < kUnitCols; ++p) {
          if (at.ox0 + p >= g.ow) break;
          T r = acc[q][p];
          if constexpr (kEpilogue == Epilogue::kReluBias) {
            r = ReluBias(r, bias, oc);
          }
          out[(at.ox0 + p) * g.o] = r;
        }
      }
    }
  }
}

// d[q][p]: the output gradient at (oy0 + q, ox0 + p), channel oc, rounded
// as a product reads it, zero past the covered outputs. Under a pool
// (argmax non-null) dy is the pool output's gradient and reaches only
// each window's winner.
template <bool kPooled, bool kBf16, typename T>
__device__ inline void OutputGradients(const DirectGeometry& g, const T* dy,
                                       const int32_t* argmax, const UnitAt& at,
                                       int oc, bool live,
                                       T (&d)[kUnitRows][kUnitCols]) {
  if constexpr (!kPooled) {
#pragma unroll
    for (int q = 0; q < kUnitRows; ++q) {
#pragma unroll
      for (int p = 0; p < kUnitCols; ++p) {
        const int oy = at.oy0 + q, ox = at.ox0 + p;
        const bool in = live && oy < g.out_rows && ox < g.cols;
        const int64_t cell =
            ((static_cast<int64_t>(at.i) * g.oh + oy) * g.ow + ox) * g.o + oc;
        d[q][p] = in ? Operand<kBf16>(__ldg(dy + cell)) : T(0);
      }
    }
  } else {
#pragma unroll
    for (int a = 0; a < kUnitRows / 2; ++a) {
#pragma unroll
      for (int b = 0; b < kUnitCols / 2; ++b) {
        const int py = at.oy0 / 2 + a, px = at.ox0 / 2 + b;
        const bool in = live && py < g.ph && px < g.pw;
        const int64_t window =
            ((static_cast<int64_t>(at.i) * g.ph + py) * g.pw + px) * g.o + oc;
        const int32_t winner = in ? __ldg(argmax + window) : -1;
        const T grad = in ? Operand<kBf16>(__ldg(dy + window)) : T(0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          d[2 * a + k / 2][2 * b + k % 2] =
              winner == CellOf(g, 2 * py + k / 2, 2 * px + k % 2, oc) ? grad
                                                                      : T(0);
        }
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
  __shared__ StagedRow<T> staged[kWarps][kMaxStagedRows];
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
    const UnitAt at = UnitOf(g, u);
    T d[kUnitRows][kUnitCols];
    OutputGradients<kPooled, kBf16>(g, dy, argmax, at, oc, live, d);
    StageRows<kBf16>(g, x + static_cast<int64_t>(at.i) * g.h * g.w * g.c,
                     at.oy0, at.ox0, ch, lane, staged[warp]);
    const int q_end = min(kUnitRows, g.out_rows - at.oy0);
    const int p_end = min(kUnitCols, g.cols - at.ox0);
    // acc[tap] += the staged input at each output's tap times the output's
    // gradient. Outputs past the covered ones (a unit's edge) are left out
    // rather than multiplied by a zero gradient: an Inf or NaN input that
    // only they read gives no NaN.
    auto add = [&](int q, int ky, int kx, int p, T v) {
      acc[ky * kK + kx] += v * d[q][p];
    };
    if (q_end == kUnitRows && p_end == kUnitCols) {
      ForEachProduct<kK, false>(staged[warp], g.sh, q_end, p_end, add);
    } else {
      ForEachProduct<kK, true>(staged[warp], g.sh, q_end, p_end, add);
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
  const DirectGeometry d(g, Pools(epilogue));
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
                epilogue == Epilogue::kMaxPoolReluBias
                    ? DirectConvKernel<T, kK, kBf16, Epilogue::kMaxPoolReluBias>
                : epilogue == Epilogue::kMaxPool
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
      (units + kWarps * kUnitsPerWarp - 1) / (kWarps * kUnitsPerWarp), 1,
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
                                      const void* filter, const void* relu_bias,
                                      const Conv2DGeometry& g, bool bf16,
                                      void* y, int32_t* argmax, int device) {
  return LaunchForward(
      "DirectConv2DMaxPool", dtype, x, filter, relu_bias, g, bf16,
      relu_bias != nullptr ? Epilogue::kMaxPoolReluBias : Epilogue::kMaxPool, y,
      argmax, device);
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
