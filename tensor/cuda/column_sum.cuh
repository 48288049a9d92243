// Deterministic column sums of a row-major [rows, cols] matrix (bias
// gradients: the sum of dy over every row). Pass 1 cuts the rows into
// chunks (ChunkRows); a block takes a tile of 32 columns of one chunk, its
// 8 row lanes walk the chunk's rows (coalesced: a warp reads 32
// neighbouring columns of one row) and add their lanes in a fixed order
// into one partial per (chunk, column). Pass 2 adds each column's partials:
// 32 lanes each take every 32nd chunk in chunk order, then the lanes are
// added in lane order. Sums run in double; the chunking depends on the
// shape alone, never on the GPU, so every run and every device gives the
// same bits.
//
// The element is produced by a `Load` functor, so fused backward kernels
// can transform (and store) each element on the way: the value at flat
// index r * cols + c is load(r * cols + c), called exactly once per element.
// A lane loads kUnroll of its rows before adding them (in row order, so the
// sum is the same as one row at a time): with one load in flight per thread
// a narrow matrix (a conv bias: 32 columns) reads at a third of the memory
// bandwidth. Functors that store should read through __ldg, which tells the
// compiler their loads may move above the stores of the rows before.
// Only for .cu files.
#ifndef MIRRORTRAIN_TENSOR_CUDA_COLUMN_SUM_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_COLUMN_SUM_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_scratch.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda::column_sum {

inline constexpr int kTileCols = 32;
inline constexpr int kRowLanes = kLaunchThreads / kTileCols;  // 8
inline constexpr int kUnroll = 4;
inline constexpr int kFinishLanes = 32;  // Pass 2: 32 x 32 threads a block.

// Rows per chunk of a matrix of `tiles` column tiles: 512, halved (down
// to 64) while pass 1 would have fewer than 1024 blocks. A narrow matrix is
// tall (the first conv's bias: 32 columns, 50 176 rows at batch 256): with
// 512-row chunks it had 98 blocks of one tile each, too few to keep memory busy
// (17.7 us for 19 MB read and written on the H200, 2026-11-27).
inline int64_t ChunkRows(int64_t rows, int64_t tiles) {
  int64_t chunk_rows = 512;
  while (chunk_rows > 64 &&
         tiles * ((rows + chunk_rows - 1) / chunk_rows) < 1024) {
    chunk_rows /= 2;
  }
  return chunk_rows;
}

template <typename Load>
__global__ void PartialKernel(Load load, int64_t rows, int64_t cols,
                              int64_t tiles, int64_t chunks, int64_t chunk_rows,
                              double* partial) {
  __shared__ double lane_sums[kRowLanes][kTileCols];
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * kTileCols + tx;
    for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
      const int64_t r0 = chunk * chunk_rows;
      const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
      double acc = 0;
      if (c < cols) {
        int64_t r = r0 + ty;
        for (; r + (kUnroll - 1) * kRowLanes < r1; r += kRowLanes * kUnroll) {
          double v[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            v[u] = static_cast<double>(load((r + u * kRowLanes) * cols + c));
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) acc += v[u];
        }
        for (; r < r1; r += kRowLanes) {
          acc += static_cast<double>(load(r * cols + c));
        }
      }
      lane_sums[ty][tx] = acc;
      __syncthreads();
      if (ty == 0 && c < cols) {
        double sum = 0;
        for (int k = 0; k < kRowLanes; ++k) sum += lane_sums[k][tx];
        partial[chunk * cols + c] = sum;
      }
      // lane_sums is rewritten for the next chunk only after it was read.
      __syncthreads();
    }
  }
}

// A block per tile of 32 columns, kFinishLanes lanes along the chunks. The
// launch bound keeps the compiler within the registers a 1024-thread block
// may use.
template <typename T>
__global__ void __launch_bounds__(kTileCols* kFinishLanes)
    FinishKernel(const double* partial, int64_t chunks, int64_t cols,
                 int64_t tiles, T* out) {
  __shared__ double lane_sums[kFinishLanes][kTileCols];
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * kTileCols + tx;
    double acc = 0;
    if (c < cols) {
      for (int64_t k = ty; k < chunks; k += kFinishLanes) {
        acc += partial[k * cols + c];
      }
    }
    lane_sums[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols) {
      double sum = 0;
      for (int k = 0; k < kFinishLanes; ++k) sum += lane_sums[k][tx];
      out[c] = static_cast<T>(sum);
    }
    // lane_sums is rewritten for the next tile only after it was read.
    __syncthreads();
  }
}

// out[c] = sum over r of load(r * cols + c), for c < cols (zeros when
// rows == 0). On the current stream of the current device (the caller
// holds a DeviceGuard for `device`).
template <typename T, typename Load>
absl::Status Run(Load load, int64_t rows, int64_t cols, T* out, int device) {
  if (cols == 0) return absl::OkStatus();
  cudaStream_t stream = LaunchStream();
  const int64_t tiles = (cols + kTileCols - 1) / kTileCols;
  const int64_t chunk_rows = ChunkRows(rows, tiles);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  DeviceScratch partial;
  MT_RETURN_IF_ERROR(partial.Allocate(
      device, static_cast<size_t>(std::max<int64_t>(chunks * cols, 1)) *
                  sizeof(double)));
  if (chunks > 0) {
    const dim3 grid(
        static_cast<unsigned>(std::min<int64_t>(tiles, kMaxGridBlocks)),
        static_cast<unsigned>(std::min<int64_t>(chunks, kMaxGridBlocks)));
    PartialKernel<<<grid, kLaunchThreads, 0, stream>>>(
        load, rows, cols, tiles, chunks, chunk_rows, partial.get<double>());
    MT_CUDA_RETURN_IF_LAUNCH_ERROR("column_sum::PartialKernel");
  }
  FinishKernel<T><<<GridBlocks(tiles), kTileCols * kFinishLanes, 0, stream>>>(
      partial.get<double>(), chunks, cols, tiles, out);
  MT_CUDA_RETURN_IF_LAUNCH_ERROR("column_sum::FinishKernel");
  return absl::OkStatus();
}

// Loads x[i] unchanged.
template <typename T>
struct LoadPlain {
  const T* x;
  __device__ T operator()(int64_t i) const { return __ldg(x + i); }
};

}  // namespace mirrortrain::cuda::column_sum

#endif  // MIRRORTRAIN_TENSOR_CUDA_COLUMN_SUM_CUH_
