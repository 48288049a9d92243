// im2col and col2im for Conv2D on GPU (NHWC input, HWIO filter); the
// products themselves run on cuBLAS (ops/conv_ops.cc). Index arithmetic is
// 32-bit whenever the buffers allow. Im2Col: threads along column-buffer
// rows, writes coalesced. Col2Im is written as a gather:
// one thread per input element adds the entries Im2Col copied from it, in
// the order the CPU's scatter adds them (output position ascending), so it
// needs no atomics and its result is deterministic and equal to the CPU's
// for equal columns.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/channels.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Column-buffer rows (i * oh + oy) * ow + ox, blockDim.y of them per block
// and blockDim.x threads along each row's kh * kw * c entries (ky, kx, ch
// order, consecutive in memory): writes are coalesced, and the row index
// is split once per row rather than once per entry. O is T, or bfloat16.
template <typename T, typename O, typename I, int kVec>
__global__ void Im2ColKernel(ImageWindowOn<I> g, const T* x, O* cols, I rows,
                             I row_stride) {
  const I c = g.c.value(), w = g.w.value(), h = g.h.value();
  const I patch = g.kh * g.kw.value() * c;
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.y);
  for (I row = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.y) +
               static_cast<I>(threadIdx.y);
       row < rows; row += step) {
    const I rest = g.ow.Div(row), ox = row - rest * g.ow.value();
    const I i = g.oh.Div(rest), oy = rest - i * g.oh.value();
    const I iy0 = oy * g.sh.value() - g.pt, ix0 = ox * g.sw.value() - g.pl;
    const T* image = x + i * h * w * c;
    O* out = cols + row * row_stride;
    for (I k = threadIdx.x * kVec; k < patch; k += blockDim.x * kVec) {
      const I cell = g.c.Div(k), ch = k - cell * c;
      const I ky = g.kw.Div(cell), kx = cell - ky * g.kw.value();
      const I iy = iy0 + ky * g.dh, ix = ix0 + kx * g.dw;
      Channels<T, kVec> v{};
      if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
        v = LoadChannels<kVec>(image + (iy * w + ix) * c + ch);
      }
      StoreChannels<O>(v, out + k);
    }
  }
}

// Input element idx of [images, h, w, c]. Kernel row ky covers input row
// iy from output row oy = (iy + pt - ky * dh) / sh when that divides
// exactly and lies in [0, oh). ky runs downwards so that oy, and likewise
// ox, run upwards: the CPU's order.
template <typename T, typename I, int kVec>
__device__ Channels<T, kVec> Col2ImAt(const ImageWindowOn<I>& g, const T* cols,
                                      I idx) {
  const I c = g.c.value(), kw = g.kw.value();
  const I oh = g.oh.value(), ow = g.ow.value();
  const I patch = g.kh * kw * c;
  const NhwcIndex<I> at = SplitNhwc(idx, g.h, g.w, g.c);
  const I i = at.i, iy = at.y, ix = at.x, ch = at.ch;
  Channels<T, kVec> acc{};
  for (I ky = g.kh - 1; ky >= 0; --ky) {
    const I ty = iy + g.pt - ky * g.dh;
    if (ty < 0) continue;
    const I oy = g.sh.Div(ty);
    if (ty - oy * g.sh.value() != 0 || oy >= oh) continue;
    for (I kx = kw - 1; kx >= 0; --kx) {
      const I tx = ix + g.pl - kx * g.dw;
      if (tx < 0) continue;
      const I ox = g.sw.Div(tx);
      if (tx - ox * g.sw.value() != 0 || ox >= ow) continue;
      const Channels<T, kVec> v = LoadChannels<kVec>(
          cols + ((i * oh + oy) * ow + ox) * patch + (ky * kw + kx) * c + ch);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc.v[j] += v.v[j];
    }
  }
  return acc;
}

// One thread per kVec channels of an input cell (idx is a multiple of kVec).
template <typename T, typename I, int kVec>
__global__ void Col2ImKernel(ImageWindowOn<I> g, const T* cols, T* dx,
                             I total) {
  for (I idx = GridStart<I>() * kVec; idx < total;
       idx += GridStep<I>() * kVec) {
    StoreChannels<T>(Col2ImAt<T, I, kVec>(g, cols, idx), dx + idx);
  }
}

}  // namespace

absl::Status Im2ColOnGpu(DType dtype, const void* x, const Conv2DGeometry& g,
                         int64_t images, void* cols, int64_t row_stride,
                         bool bf16_cols, int device) {
  MT_RETURN_IF_ERROR(CheckImageWindow("Im2Col", g));
  if (bf16_cols && dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("Im2Col: bfloat16 columns come from f32 images, got ",
                     DTypeName(dtype)));
  }
  const int64_t rows = images * g.oh * g.ow;
  const int64_t patch = g.kh * g.kw * g.c;
  if (row_stride < patch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Im2Col: row stride ", row_stride, " is less than the patch ", patch));
  }
  if (rows * patch == 0) return absl::OkStatus();
  // Rows start on 16-byte boundaries too when the stride keeps them there.
  const bool four =
      FourChannelsAtOnce(dtype, g.c, {x, cols}) && row_stride % 4 == 0;
  const int64_t units = four ? patch / 4 : patch;
  // A warp or more along the row, up to kLaunchThreads; the rest of the
  // block takes further rows.
  const int along = static_cast<int>(
      std::min<int64_t>(kLaunchThreads, (units + 31) / 32 * 32));
  const dim3 threads(along, kLaunchThreads / along);
  const int blocks = static_cast<int>(
      std::min<int64_t>((rows + threads.y - 1) / threads.y, kMaxGridBlocks));
  return LaunchFloatIndexWidthOn(
      "Im2Col", dtype, device,
      std::max({rows * row_stride, images * g.h * g.w * g.c, WindowReach(g)}),
      [&](auto zero, auto index, cudaStream_t stream) {
        using T = decltype(zero);
        using I = decltype(index);
        auto run = [&](auto* out) {
          using O = std::remove_pointer_t<decltype(out)>;
          auto kernel =
              four ? Im2ColKernel<T, O, I, 4> : Im2ColKernel<T, O, I, 1>;
          kernel<<<blocks, threads, 0, stream>>>(
              ImageWindowOn<I>(g), static_cast<const T*>(x), out,
              static_cast<I>(rows), static_cast<I>(row_stride));
        };
        if constexpr (std::is_same_v<T, float>) {
          if (bf16_cols) {
            run(static_cast<__nv_bfloat16*>(cols));
            return;
          }
        }
        run(static_cast<T*>(cols));
      });
}

absl::Status Col2ImOnGpu(DType dtype, const void* cols, const Conv2DGeometry& g,
                         int64_t images, void* dx, int device) {
  MT_RETURN_IF_ERROR(CheckImageWindow("Col2Im", g));
  const int64_t total = images * g.h * g.w * g.c;
  if (total == 0) return absl::OkStatus();
  return LaunchFloatIndexWidthOn(
      "Col2Im", dtype, device,
      std::max(
          {total, images * g.oh * g.ow * g.kh * g.kw * g.c, WindowReach(g)}),
      [&](auto zero, auto index, cudaStream_t stream) {
        using T = decltype(zero);
        using I = decltype(index);
        const bool four = FourChannelsAtOnce(dtype, g.c, {cols, dx});
        auto kernel = four ? Col2ImKernel<T, I, 4> : Col2ImKernel<T, I, 1>;
        kernel<<<LaunchBlocks(four ? total / 4 : total), kLaunchThreads, 0,
                 stream>>>(ImageWindowOn<I>(g), static_cast<const T*>(cols),
                           static_cast<T*>(dx), static_cast<I>(total));
      });
}

MT_DEFINE_CUDA_KERNEL(Im2Col, Im2ColOnGpu);
MT_DEFINE_CUDA_KERNEL(Col2Im, Col2ImOnGpu);

}  // namespace mirrortrain::cuda
