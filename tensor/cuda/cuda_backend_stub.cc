// Stand-in for the CUDA backend in builds without CUDA.
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/not_built.h"

namespace mirrortrain::cuda {
namespace {

absl::Status NotBuilt() { return NotBuiltError(); }

}  // namespace

bool Built() { return false; }
int DeviceCount() { return 0; }
absl::Status CheckDevice(int device) {
  return absl::FailedPreconditionError(
      absl::StrCat("gpu:", device,
                   " requested but this mirrortrain was built without CUDA"));
}
absl::StatusOr<Allocator*> DeviceAllocator(int) { return NotBuilt(); }
absl::StatusOr<DeviceMemoryStats> GetDeviceMemoryStats(int) {
  return NotBuilt();
}
void SetCurrentStream(StreamHandle) {}
StreamHandle CurrentStream() { return nullptr; }
absl::Status Memset(void*, int, size_t, int) { return NotBuilt(); }
absl::Status Copy(void*, Device, const void*, Device, size_t) {
  return NotBuilt();
}
absl::Status Synchronize(int) { return NotBuilt(); }
absl::StatusOr<Allocator*> PinnedHostAllocator() { return NotBuilt(); }
absl::Status CopyAsync(void*, Device, const void*, Device, size_t) {
  return NotBuilt();
}
absl::Status Unary(UnaryKind, DType, const void*, void*, int64_t, int) {
  return NotBuilt();
}
absl::Status Binary(BinaryKind, DType, const void*, const void*, void*, int64_t,
                    int) {
  return NotBuilt();
}

absl::Status Gemm(DType, bool, bool, int64_t, int64_t, int64_t, double,
                  const void*, int64_t, const void*, int64_t, double, void*,
                  int, bool) {
  return NotBuilt();
}

absl::Status BroadcastBinary(BinaryKind, DType, const void*,
                             absl::Span<const int64_t>, const void*,
                             absl::Span<const int64_t>, void*,
                             absl::Span<const int64_t>, int) {
  return NotBuilt();
}
absl::Status StridedCopy(size_t, absl::Span<const int64_t>, const void*,
                         int64_t, absl::Span<const int64_t>, void*, int64_t,
                         absl::Span<const int64_t>, int) {
  return NotBuilt();
}
absl::Status Reduce(ReduceKind, DType, const void*, absl::Span<const int64_t>,
                    absl::Span<const int64_t>, absl::Span<const int64_t>,
                    absl::Span<const int64_t>, double, DType, void*, int) {
  return NotBuilt();
}
absl::Status Fill(DType, void*, double, int64_t, int) { return NotBuilt(); }
absl::Status Cast(DType, const void*, DType, void*, int64_t, int) {
  return NotBuilt();
}
absl::Status Gather(DType, const void*, int64_t, DType, const void*, int64_t,
                    void*, int) {
  return NotBuilt();
}
absl::Status ScatterAdd(DType, const void*, int64_t, DType, const void*,
                        int64_t, void*, int) {
  return NotBuilt();
}
absl::Status OneHot(DType, const void*, int64_t, int64_t, DType, double, double,
                    void*, int) {
  return NotBuilt();
}
absl::Status ArgMax(DType, const void*, int64_t, int64_t, int64_t, int64_t*,
                    int) {
  return NotBuilt();
}
absl::Status ClipByValue(DType, const void*, double, double, void*, int64_t,
                         int) {
  return NotBuilt();
}
absl::Status ClipByValueGrad(DType, const void*, const void*, double, double,
                             void*, int64_t, int) {
  return NotBuilt();
}
absl::Status MaxPool2DForward(DType, const void*, const Pool2DGeometry&, void*,
                              int32_t*, int) {
  return NotBuilt();
}
absl::Status MaxPool2DBackward(DType, const int32_t*, const void*,
                               const Pool2DGeometry&, void*, int) {
  return NotBuilt();
}

absl::Status BiasAdd(DType, const void*, const void*, void*, int64_t, int64_t,
                     int) {
  return NotBuilt();
}
absl::Status ColumnSum(DType, const void*, int64_t, int64_t, void*, int) {
  return NotBuilt();
}
absl::Status Softmax(DType, const void*, void*, int64_t, int64_t, bool, int) {
  return NotBuilt();
}
absl::Status SparseSoftmaxXent(DType, const void*, DType, const void*, int64_t,
                               int64_t, void*, void*, int) {
  return NotBuilt();
}
absl::Status SparseSoftmaxXentGrad(DType, const void*, DType, const void*,
                                   const void*, int64_t, int64_t, void*, int) {
  return NotBuilt();
}
absl::Status Dropout(DType, const void*, double, double, uint64_t, int64_t,
                     void*, void*, int64_t, int) {
  return NotBuilt();
}

absl::Status BiasAddRelu(DType, const void*, const void*, void*, int64_t,
                         int64_t, int) {
  return NotBuilt();
}
absl::Status BiasAddReluGrad(DType, const void*, const void*, void*, void*,
                             int64_t, int64_t, int) {
  return NotBuilt();
}

absl::Status Im2Col(DType, const void*, const Conv2DGeometry&, int64_t, void*,
                    int) {
  return NotBuilt();
}
absl::Status Col2Im(DType, const void*, const Conv2DGeometry&, int64_t, void*,
                    int) {
  return NotBuilt();
}

}  // namespace mirrortrain::cuda
