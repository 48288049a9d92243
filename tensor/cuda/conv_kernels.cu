// im2col and col2im for Conv2D on GPU (NHWC input, HWIO filter); the
// products themselves run on cuBLAS (ops/conv_ops.cc). Im2Col: one thread
// per column-buffer entry, writes coalesced. Col2Im is written as a gather:
// one thread per input element adds the entries Im2Col copied from it, in
// the order the CPU's scatter adds them (output position ascending), so it
// needs no atomics and its result is deterministic and equal to the CPU's
// for equal columns.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Column-buffer entry idx (row (i * oh + oy) * ow + ox, column
// (ky * kw + kx) * c + ch).
template <typename T>
__host__ __device__ T Im2ColAt(const Conv2DGeometry& g, const T* x,
                               int64_t idx) {
  const int64_t patch = g.kh * g.kw * g.c;
  const int64_t row = idx / patch, k = idx % patch;
  const int64_t ch = k % g.c, kx = (k / g.c) % g.kw, ky = k / (g.c * g.kw);
  const int64_t ox = row % g.ow, oy = (row / g.ow) % g.oh;
  const int64_t i = row / (g.ow * g.oh);
  const int64_t iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
  const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
  return inside ? x[((i * g.h + iy) * g.w + ix) * g.c + ch] : T(0);
}

// Input element idx of [images, h, w, c]. Kernel row ky covers input row
// iy from output row oy = (iy + pt - ky) / sh when that divides exactly
// and lies in [0, oh). ky runs downwards so that oy, and likewise ox, run
// upwards: the CPU's order.
template <typename T>
__host__ __device__ T Col2ImAt(const Conv2DGeometry& g, const T* cols,
                               int64_t idx) {
  const int64_t patch = g.kh * g.kw * g.c;
  const int64_t ch = idx % g.c, ix = (idx / g.c) % g.w;
  const int64_t iy = (idx / (g.c * g.w)) % g.h, i = idx / (g.c * g.w * g.h);
  T acc = T(0);
  for (int64_t ky = g.kh - 1; ky >= 0; --ky) {
    const int64_t ty = iy + g.pt - ky;
    if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
    const int64_t oy = ty / g.sh;
    for (int64_t kx = g.kw - 1; kx >= 0; --kx) {
      const int64_t tx = ix + g.pl - kx;
      if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
      const int64_t ox = tx / g.sw;
      acc += cols[((i * g.oh + oy) * g.ow + ox) * patch +
                  (ky * g.kw + kx) * g.c + ch];
    }
  }
  return acc;
}

template <typename T>
__global__ void Im2ColKernel(Conv2DGeometry g, const T* x, T* cols,
                             int64_t total) {
  for (int64_t idx = GridStart(); idx < total; idx += GridStep()) {
    cols[idx] = Im2ColAt(g, x, idx);
  }
}

template <typename T>
__global__ void Col2ImKernel(Conv2DGeometry g, const T* cols, T* dx,
                             int64_t total) {
  for (int64_t idx = GridStart(); idx < total; idx += GridStep()) {
    dx[idx] = Col2ImAt(g, cols, idx);
  }
}

absl::Status CheckGeometry(const char* what, const Conv2DGeometry& g) {
  if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.pt < 0 || g.pl < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": kernel sizes and strides must be >= 1 and padding >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Im2Col(DType dtype, const void* x, const Conv2DGeometry& g,
                    int64_t images, void* cols, int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("Im2Col", g));
  const int64_t total = images * g.oh * g.ow * g.kh * g.kw * g.c;
  if (total == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "Im2Col", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        Im2ColKernel<T><<<LaunchBlocks(total), kLaunchThreads, 0, stream>>>(
            g, static_cast<const T*>(x), static_cast<T*>(cols), total);
      });
}

absl::Status Col2Im(DType dtype, const void* cols, const Conv2DGeometry& g,
                    int64_t images, void* dx, int device) {
  MT_RETURN_IF_ERROR(CheckGeometry("Col2Im", g));
  const int64_t total = images * g.h * g.w * g.c;
  if (total == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "Col2Im", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        Col2ImKernel<T><<<LaunchBlocks(total), kLaunchThreads, 0, stream>>>(
            g, static_cast<const T*>(cols), static_cast<T*>(dx), total);
      });
}

}  // namespace mirrortrain::cuda
