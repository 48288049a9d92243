// Threads used by CPU math (OpenBLAS). Process-wide.
#ifndef MIRRORTRAIN_TENSOR_CPU_THREADS_H_
#define MIRRORTRAIN_TENSOR_CPU_THREADS_H_

namespace mirrortrain {

int HardwareConcurrency();
// Sets the threads each OpenBLAS call may use (>= 1).
void SetCpuMathThreads(int threads);
int CpuMathThreads();

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_CPU_THREADS_H_
