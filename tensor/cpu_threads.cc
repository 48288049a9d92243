#include "tensor/cpu_threads.h"

#include <cblas.h>

#include <algorithm>
#include <thread>

namespace mirrortrain {

int HardwareConcurrency() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void SetCpuMathThreads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

int CpuMathThreads() { return openblas_get_num_threads(); }

}  // namespace mirrortrain
