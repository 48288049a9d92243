// The CUDA backend as seen from plain C++: no CUDA types cross this header,
// so the rest of the library compiles the same with or without CUDA. When
// the build has no CUDA (MIRRORTRAIN_CUDA=OFF or no nvcc) every call returns
// a FailedPrecondition error and DeviceCount() is 0.
//
// Stream contract: kernels and copies are enqueued on the calling thread's
// current stream (cudaStreamPerThread unless a replica sets its own, see
// SetCurrentStream); copies to or from host memory are synchronous with
// respect to that stream, and copies between two GPUs wait for all work of
// the source GPU and for the copy.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_BACKEND_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/allocator.h"
#include "tensor/cuda/cuda_kernel.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_kind.h"
#include "tensor/matmul_precision.h"

namespace mirrortrain::cuda {

// Whether this binary was built with the CUDA backend.
bool Built();
// Number of visible GPUs; 0 when not built, no driver or no GPU.
int DeviceCount();
// Checks that gpu:`device` exists, naming how many are visible if not.
absl::Status CheckDevice(int device);

// Readies a GPU job's devices: creates their CUDA contexts while cuBLAS
// and cuBLASLt load (cublas_library.h) on another thread, and returns once
// both are done. A first allocation does the two one after the other
// (0.09 s of loading, then 0.13 s of context, on the H100 trace of
// 2026-11-27). Errors are the contexts'; a failed load shows again at the
// first product. Call it where the process cannot exit before it returns.
absl::Status StartDevices(const std::vector<int>& devices);

// FailedPrecondition naming the GPU, its compute capability, the CUDA
// architectures this build has kernels for and the CMake value to rebuild
// with, for the first of `devices` that this build has no kernels for (an
// A100 under the default sm_90 build, which would otherwise fail at its
// first kernel with the runtime's "no kernel image is available").
absl::Status CheckKernelImages(const std::vector<int>& devices);

// The caching allocator of gpu:`device` (process-wide, never destroyed).
absl::StatusOr<Allocator*> DeviceAllocator(int device);

// Counters of gpu:`device`'s caching allocator since the process started
// (what torch.cuda.memory_stats reports): a steady-state training step
// leaves `device_mallocs` and `device_frees` unchanged.
struct DeviceMemoryStats {
  int64_t device_mallocs = 0;  // cudaMalloc calls that succeeded.
  int64_t device_frees = 0;    // cudaFree calls (cache released on OOM).
  int64_t bytes_in_use = 0;    // Blocks handed out, rounded sizes.
  int64_t bytes_cached = 0;    // Free blocks kept for reuse.
};
absl::StatusOr<DeviceMemoryStats> GetDeviceMemoryStats(int device);

// Opaque stream handle (a cudaStream_t). nullptr means the per-thread
// default stream.
using StreamHandle = void*;
void SetCurrentStream(StreamHandle stream);
StreamHandle CurrentStream();

// Page-locked host memory (cudaHostAlloc), cached by size: host buffers
// that copies to a GPU can read asynchronously. Its device() is the CPU.
absl::StatusOr<Allocator*> PinnedHostAllocator();

absl::Status Memset(void* ptr, int value, size_t bytes, int device);
absl::Status Copy(void* dst, Device dst_device, const void* src,
                  Device src_device, size_t bytes);
// Like Copy, but never waits: host memory must be pinned, and must stay
// alive and unchanged until the current stream has done the copy (record
// an Event after it, see stream.h).
absl::Status CopyAsync(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t bytes);
absl::Status Synchronize(int device);

// y[i] = f(x[i]) for i < n, floating dtypes.
MT_CUDA_KERNEL(Unary, absl::Status(UnaryKind kind, DType dtype, const void* x,
                                   void* y, int64_t n, int device));
// out[i] = f(a[i], b[i]) for i < n, floating dtypes.
MT_CUDA_KERNEL(Binary,
               absl::Status(BinaryKind kind, DType dtype, const void* a,
                            const void* b, void* out, int64_t n, int device));

// A product's dimensions: `batch` row-major products C[m,n] = op(A) op(B),
// the matrices of each operand stored one after another.
struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
};

// Row-major C = alpha * op(A) @ op(B) + beta * C for every matrix of the
// batch, on cuBLAS (f32 or f64); lda/ldb are the row-major leading
// dimensions (columns as stored). `precision` says how f32 products run
// (tensor/matmul_precision.h): kTf32 on TF32 tensor cores; kBf16 on bf16
// tensor cores with f32 accumulation and output, and then `a` and `b` hold
// 2-byte bfloat16 values (converted by the caller: ToBFloat16).
MT_CUDA_KERNEL(Gemm,
               absl::Status(DType dtype, bool transpose_a, bool transpose_b,
                            GemmShape shape, double alpha, const void* a,
                            int64_t lda, const void* b, int64_t ldb,
                            double beta, void* c, int device,
                            MatMulPrecision precision));

// Row-major C[m,n] = act(op(A) @ op(B) + bias) with bias [n] and act relu
// or the identity, in one cuBLASLt call with the bias and relu in its
// epilogue; f32 result and bias, one matrix, k >= 1, `precision` (and with
// it the operands' type) as for Gemm. NotFound when cuBLASLt has no
// algorithm for the case (the caller then computes it unfused).
MT_CUDA_KERNEL(GemmBias,
               absl::Status(bool transpose_a, bool transpose_b, int64_t m,
                            int64_t n, int64_t k, const void* a, int64_t lda,
                            const void* b, int64_t ldb, const void* bias,
                            bool relu, void* c, int device,
                            MatMulPrecision precision));

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_BACKEND_H_
