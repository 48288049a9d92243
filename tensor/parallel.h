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

// Calls fn(begin, end) on disjoint chunks covering [0, n), each at least
// min_chunk long (but the last); ranges smaller than 2 * min_chunk run
// inline on the caller. Each thread first runs its own share of the range,
// a few chunks long, then takes chunks other threads have not started: when
// another process keeps a kernel thread off its core, the rest of the
// threads (the caller included) do its work instead of waiting for it. The
// chunk boundaries depend only on n, min_chunk and the thread count, never
// on timing, so results are deterministic for kernels that reduce per chunk
// into fixed slots. A chunk that throws (std::bad_alloc) does not stop the
// others; once all have finished, the first exception is rethrown here.
void ParallelFor(int64_t n, int64_t min_chunk,
                 const std::function<void(int64_t, int64_t)>& fn);

// min_chunk for a ParallelFor over rows of `cols` elements: enough rows for
// about `elements` elements per chunk (at least one row), so short rows are
// not handed out one by one.
inline int64_t RowsPerChunk(int64_t cols, int64_t elements) {
  const int64_t per_row = cols > 1 ? cols : 1;
  return elements > per_row ? elements / per_row : 1;
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_PARALLEL_H_
