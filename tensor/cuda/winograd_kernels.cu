// The passes of Winograd's F(2x2, r x r) convolution (tensor/winograd.h) as
// one grid-stride kernel per (pass, r, dtype): a thread per unit, each
// running the function the CPU loops run. The matrices go as a kernel
// argument (uniform values in the constant bank). This file is built
// without fused multiply-adds (tensor/CMakeLists.txt), so the transforms
// round as the CPU's do.
// Written without a GPU at hand: one thread per tile and channel, no
// shared memory; the batched products between the passes are cuBLAS's.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"
#include "tensor/winograd.h"

namespace mirrortrain::cuda {
namespace {

// The matrices of r in T, built once per process.
template <typename T>
const winograd::Matrices<T>& MatricesOf(int r) {
  static const winograd::Matrices<T> r3 = winograd::MatricesFor<T>(3);
  static const winograd::Matrices<T> r5 = winograd::MatricesFor<T>(5);
  return r == 3 ? r3 : r5;
}

// One kernel per pass: each gets the registers its own arrays need (the
// input pass's 2 a x a tiles are the most) instead of the largest pass's.
template <int R, typename T, winograd::Pass kPass>
__global__ void WinogradKernel(winograd::Geometry g, winograd::Matrices<T> mx,
                               winograd::Buffers io, int64_t units) {
  for (int64_t u = GridStart(); u < units; u += GridStep()) {
    winograd::RunUnit<R, T>(kPass, g, mx, io, u);
  }
}

template <int R, typename T>
void LaunchPass(winograd::Pass pass, const winograd::Geometry& g,
                const winograd::Buffers& io, int64_t units,
                cudaStream_t stream) {
  using winograd::Pass;
  const int blocks = LaunchBlocks(units);
  const winograd::Matrices<T>& mx = MatricesOf<T>(R);
  switch (pass) {
    case Pass::kInput:
      WinogradKernel<R, T, Pass::kInput>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
    case Pass::kFilter:
      WinogradKernel<R, T, Pass::kFilter>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
    case Pass::kFilterRotated:
      WinogradKernel<R, T, Pass::kFilterRotated>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
    case Pass::kOutput:
      WinogradKernel<R, T, Pass::kOutput>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
    case Pass::kOutputMaxPool:
      WinogradKernel<R, T, Pass::kOutputMaxPool>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
    case Pass::kOutputAdjoint:
      WinogradKernel<R, T, Pass::kOutputAdjoint>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
    case Pass::kFilterAdjoint:
      WinogradKernel<R, T, Pass::kFilterAdjoint>
          <<<blocks, kLaunchThreads, 0, stream>>>(g, mx, io, units);
      return;
  }
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
  return LaunchFloatOn("WinogradTransform", dtype, device,
                       [&](auto zero, cudaStream_t stream) {
                         using T = decltype(zero);
                         if (g.r == 3) {
                           LaunchPass<3, T>(pass, g, io, units, stream);
                         } else {
                           LaunchPass<5, T>(pass, g, io, units, stream);
                         }
                       });
}

}  // namespace

MT_DEFINE_CUDA_KERNEL(WinogradTransform, WinogradTransformOnGpu);

}  // namespace mirrortrain::cuda
