// Strided kernels: broadcasting binary arithmetic and strided copies, one
// thread per output element in a grid-stride loop.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/strided_layout.h"
#include "tensor/elementwise_kind.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Layout operands: 0 = a, 1 = b (the output is row-major over the layout).
template <typename T>
__global__ void BroadcastBinaryKernel(BinaryKind kind, StridedLayout<2> layout,
                                      const T* a, const T* b, T* out) {
  for (int64_t i = GridStart(); i < layout.num_elements; i += GridStep()) {
    int64_t off[2];
    layout.Offsets(i, off);
    out[i] = ApplyBinary(kind, a[off[0]], b[off[1]]);
  }
}

// Layout operands: 0 = src, 1 = dst. U is an unsigned type of the element
// size: a copy needs no arithmetic on the values.
template <typename U>
__global__ void StridedCopyKernel(StridedLayout<2> layout, const U* src,
                                  U* dst) {
  for (int64_t i = GridStart(); i < layout.num_elements; i += GridStep()) {
    int64_t off[2];
    layout.Offsets(i, off);
    dst[off[1]] = src[off[0]];
  }
}

absl::Status CheckStrides(const char* what, absl::Span<const int64_t> shape,
                          absl::Span<const int64_t> a,
                          absl::Span<const int64_t> b) {
  if (a.size() != shape.size() || b.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": stride lists of lengths ", a.size(), " and ",
                     b.size(), " for a rank-", shape.size(), " index space"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BroadcastBinaryOnGpu(BinaryKind kind, DType dtype, const void* a,
                                  absl::Span<const int64_t> a_strides,
                                  const void* b,
                                  absl::Span<const int64_t> b_strides,
                                  void* out,
                                  absl::Span<const int64_t> out_shape,
                                  int device) {
  constexpr const char* kWhat = "BroadcastBinary";
  MT_RETURN_IF_ERROR(CheckStrides(kWhat, out_shape, a_strides, b_strides));
  MT_ASSIGN_OR_RETURN(
      StridedLayout<2> layout,
      MakeStridedLayout<2>(kWhat, out_shape, {a_strides, b_strides}));
  if (layout.num_elements == 0) return absl::OkStatus();
  return LaunchFloatOn(
      kWhat, dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        BroadcastBinaryKernel<T>
            <<<LaunchBlocks(layout.num_elements), kLaunchThreads, 0, stream>>>(
                kind, layout, static_cast<const T*>(a),
                static_cast<const T*>(b), static_cast<T*>(out));
      });
}

absl::Status StridedCopyOnGpu(
    size_t elem_bytes, absl::Span<const int64_t> shape, const void* src,
    int64_t src_offset, absl::Span<const int64_t> src_strides, void* dst,
    int64_t dst_offset, absl::Span<const int64_t> dst_strides, int device) {
  constexpr const char* kWhat = "StridedCopy";
  MT_RETURN_IF_ERROR(CheckStrides(kWhat, shape, src_strides, dst_strides));
  MT_ASSIGN_OR_RETURN(
      StridedLayout<2> layout,
      MakeStridedLayout<2>(kWhat, shape, {src_strides, dst_strides}));
  if (layout.num_elements == 0) return absl::OkStatus();
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t stream = LaunchStream();
  const int blocks = LaunchBlocks(layout.num_elements);
  auto launch = [&](auto zero) {
    using U = decltype(zero);
    StridedCopyKernel<U><<<blocks, kLaunchThreads, 0, stream>>>(
        layout, static_cast<const U*>(src) + src_offset,
        static_cast<U*>(dst) + dst_offset);
  };
  switch (elem_bytes) {
    case 1:
      launch(uint8_t{});
      break;
    case 2:
      launch(uint16_t{});
      break;
    case 4:
      launch(uint32_t{});
      break;
    case 8:
      launch(uint64_t{});
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(kWhat, ": elements of ", elem_bytes,
                       " bytes (expected 1, 2, 4 or 8)"));
  }
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("StridedCopyKernel");
  return absl::OkStatus();
}

MT_DEFINE_CUDA_KERNEL(BroadcastBinary, BroadcastBinaryOnGpu);
MT_DEFINE_CUDA_KERNEL(StridedCopy, StridedCopyOnGpu);

}  // namespace mirrortrain::cuda
