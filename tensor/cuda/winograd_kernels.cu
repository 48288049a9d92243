// The passes of Winograd's F(2x2, r x r) convolution (tensor/winograd.h) as
// one grid-stride kernel per (r, dtype): a thread per unit, each running
// the function the CPU loops run. The matrices go as a kernel argument
// (uniform values in the constant bank).
// Written without a GPU at hand: one thread per tile and channel, no
// shared memory; the batched products between the passes are cuBLAS's.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"
#include "tensor/winograd.h"

namespace mirrortrain::cuda {
namespace {

template <int R, typename T>
__global__ void WinogradKernel(winograd::Pass pass, winograd::Geometry g,
                               winograd::Matrices<T> mx, winograd::Buffers io,
                               int64_t units) {
  for (int64_t u = GridStart(); u < units; u += GridStep()) {
    winograd::RunUnit<R, T>(pass, g, mx, io, u);
  }
}

// The matrices of r in T, built once per process.
template <typename T>
const winograd::Matrices<T>& MatricesOf(int r) {
  static const winograd::Matrices<T> r3 = winograd::MatricesFor<T>(3);
  static const winograd::Matrices<T> r5 = winograd::MatricesFor<T>(5);
  return r == 3 ? r3 : r5;
}

absl::Status WinogradTransformOnGpu(winograd::Pass pass, DType dtype,
                                    const winograd::Geometry& g,
                                    const winograd::Buffers& io, int device) {
  if (!winograd::Supported(g.r)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WinogradTransform: no F(2x2, ", g.r, "x", g.r, ")"));
  }
  const int64_t units = winograd::Units(pass, g);
  if (units == 0) return absl::OkStatus();
  return LaunchFloatOn(
      "WinogradTransform", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        if (g.r == 3) {
          WinogradKernel<3, T>
              <<<LaunchBlocks(units), kLaunchThreads, 0, stream>>>(
                  pass, g, MatricesOf<T>(3), io, units);
        } else {
          WinogradKernel<5, T>
              <<<LaunchBlocks(units), kLaunchThreads, 0, stream>>>(
                  pass, g, MatricesOf<T>(5), io, units);
        }
      });
}

}  // namespace

MT_DEFINE_CUDA_KERNEL(WinogradTransform, WinogradTransformOnGpu);

}  // namespace mirrortrain::cuda
