// The shape shared by the kernels that sweep many buffers in one launch
// (the optimizer and moving-average updates, the logical replicas' slice
// sums): every buffer is cut into chunks of a fixed number of elements, one
// block per chunk, and a launch's parameter lists where each buffer's
// blocks begin. Within its chunk a block moves 16 bytes per load or store
// where the buffer's pointers allow. Only for .cu files.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CHUNKED_BATCH_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_CHUNKED_BATCH_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace mirrortrain::cuda {

// 16 bytes of T: one load or store instruction.
template <typename T>
struct alignas(16) Wide {
  static constexpr int kLanes = 16 / sizeof(T);
  T v[kLanes];
};

template <typename T>
__device__ inline Wide<T> LoadWide(const T* p, int64_t i) {
  return *reinterpret_cast<const Wide<T>*>(p + i);
}
template <typename T>
__device__ inline void StoreWide(T* p, int64_t i, const Wide<T>& v) {
  *reinterpret_cast<Wide<T>*>(p + i) = v;
}

// The buffer whose chunk this block sweeps (`first_block[k]`: buffer k's
// first block, ascending, first_block[count] past the last), and the
// chunk's elements [begin, end) of the buffer's `n` (n[k]).
__device__ inline int BlockChunk(const int* first_block, const int64_t* n,
                                 int64_t chunk, int64_t& begin, int64_t& end) {
  int k = 0;
  while (static_cast<int>(blockIdx.x) >= first_block[k + 1]) ++k;
  begin = static_cast<int64_t>(blockIdx.x - first_block[k]) * chunk;
  end = min(begin + chunk, n[k]);
  return k;
}

// The block's chunk [begin, end): with `wide` (every pointer the visitors
// use 16-byte aligned at `begin`; a chunk that starts a multiple of the
// lanes in keeps it) group(i) for each group of Wide<T>::kLanes elements
// from i, then one(i) for each element left; else one(i) for every element.
template <typename T, typename Group, typename One>
__device__ inline void VisitChunk(bool wide, int64_t begin, int64_t end,
                                  Group group, One one) {
  if (wide) {
    constexpr int kLanes = Wide<T>::kLanes;
    const int64_t wide_end = begin + (end - begin) / kLanes * kLanes;
    for (int64_t i = begin + threadIdx.x * kLanes; i < wide_end;
         i += blockDim.x * kLanes) {
      group(i);
    }
    begin = wide_end;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) one(i);
}

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CHUNKED_BATCH_CUH_
