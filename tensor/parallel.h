// Data parallelism inside CPU kernels: splits a range over the CPU math
// threads (CpuMathThreads(), the same budget OpenBLAS gets).
//
// Thread contract: callable from any thread, also concurrently; each call
// blocks until all of its chunks ran. Chunks must not call ParallelFor.
#ifndef MIRRORTRAIN_TENSOR_PARALLEL_H_
#define MIRRORTRAIN_TENSOR_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace mirrortrain {

// Calls fn(begin, end) on disjoint chunks covering [0, n). Ranges smaller
// than 2 * min_chunk run inline on the caller.
void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_PARALLEL_H_
