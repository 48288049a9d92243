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

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_CPU_THREADS_H_
