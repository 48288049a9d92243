// Threads used by CPU math (OpenBLAS). Process-wide.
#ifndef MIRRORTRAIN_TENSOR_CPU_THREADS_H_
#define MIRRORTRAIN_TENSOR_CPU_THREADS_H_

namespace mirrortrain {

int HardwareConcurrency();
// Sets how many threads one kernel call (a GEMM, an elementwise loop) may
// use (>= 1); the default is every core. Mirrored CPU replicas share the
// cores by lowering it.
void SetCpuMathThreads(int threads);
int CpuMathThreads();
// Gives each of `sharers` threads that compute at once (CPU replicas or
// workers) its share of the cores: SetCpuMathThreads(cores / sharers), at
// least 1; nothing for one sharer.
void ShareCpuMathThreads(int sharers);

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_CPU_THREADS_H_
