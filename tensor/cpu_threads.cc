#include "tensor/cpu_threads.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace mirrortrain {

int HardwareConcurrency() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

// OpenBLAS's own threads spin (sched_yield) between calls and fight the
// kernel thread pool for cores, so OpenBLAS runs single-threaded and
// matrix products are split over our pool instead (ops/matmul.cc).
std::atomic<int>& Threads() {
  static std::atomic<int>* threads = [] {
    openblas_set_num_threads(1);
    return new std::atomic<int>(HardwareConcurrency());
  }();
  return *threads;
}

}  // namespace

void SetCpuMathThreads(int threads) { Threads() = std::max(1, threads); }

int CpuMathThreads() { return Threads(); }

void ShareCpuMathThreads(int sharers) {
  if (sharers > 1) SetCpuMathThreads(HardwareConcurrency() / sharers);
}

}  // namespace mirrortrain
