// Matmul and conv2d forward+backward at the Fashion-MNIST model sizes, next
// to a bare OpenBLAS sgemm of the same shape. Reports GFLOP/s.
//   build/bin/ops_bench  (or scripts/bench_ops.sh)
#include <cblas.h>

#include "benchmark/benchmark.h"
#include "models/initializers.h"
#include "tensor/cpu_threads.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/ops/winograd_conv.h"
#include "tensor/parallel.h"

namespace mirrortrain {
namespace {

Tensor Random(const Shape& s, uint64_t seed) {
  return *models::GlorotUniform(s, seed);
}

void SetFlops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_iter * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

// [m,k] @ [k,n]: forward, then dA and dB (3 GEMMs of 2mkn flops).
void BM_MatMulForwardBackward(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = Random({m, k}, 1), b = Random({k, n}, 2);
  for (auto _ : state) {
    GradientTape tape;
    tape.Watch(a);
    tape.Watch(b);
    Tensor c = *ops::MatMul(a, b);
    auto g = tape.Gradient(c, {a, b});
    benchmark::DoNotOptimize(g);
  }
  SetFlops(state, 3 * 2.0 * m * k * n);
}

// The baselines let OpenBLAS use its own threads on every core, as a user
// calling it directly would (mirrortrain runs it single-threaded and splits
// products over its own pool).
struct OpenBlasThreads {
  OpenBlasThreads() { openblas_set_num_threads(HardwareConcurrency()); }
  ~OpenBlasThreads() { openblas_set_num_threads(1); }
};

void BM_OpenBlasSgemmX3(benchmark::State& state) {
  OpenBlasThreads threads;
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = Random({m, k}, 1), b = Random({k, n}, 2);
  Tensor c = Tensor::HostEmpty(DType::kF32, {m, n});
  for (auto _ : state) {
    for (int i = 0; i < 3; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                  a.data<float>(), k, b.data<float>(), n, 0.0f, c.data<float>(),
                  n);
    }
    benchmark::ClobberMemory();
  }
  SetFlops(state, 3 * 2.0 * m * k * n);
}

// Args: batch, size, in channels, out channels, kernel, Winograd (1: the
// CPU path of ops/winograd_conv.h, which tests use; 0: im2col + GEMMs).
void BM_Conv2DForwardBackward(benchmark::State& state) {
  const int64_t n = state.range(0), hw = state.range(1), c = state.range(2),
                o = state.range(3), k = state.range(4);
  Tensor x = Random({n, hw, hw, c}, 3), w = Random({k, k, c, o}, 4);
  ops::internal::SetConvCpuWinograd(state.range(5) != 0);
  for (auto _ : state) {
    GradientTape tape;
    tape.Watch(x);
    tape.Watch(w);
    Tensor y = *ops::Conv2D(x, w);
    auto g = tape.Gradient(y, {x, w});
    benchmark::DoNotOptimize(g);
  }
  ops::internal::SetConvCpuWinograd(false);
  SetFlops(state, 3 * 2.0 * n * hw * hw * k * k * c * o);
}

// The GEMM inside that convolution: [n*hw*hw, k*k*c] @ [k*k*c, o], x3.
void BM_OpenBlasSgemmConvShapeX3(benchmark::State& state) {
  OpenBlasThreads threads;
  const int64_t n = state.range(0), hw = state.range(1), c = state.range(2),
                o = state.range(3), k = state.range(4);
  const int64_t m = n * hw * hw, kk = k * k * c;
  Tensor a = Random({m, kk}, 1), b = Random({kk, o}, 2);
  Tensor out = Tensor::HostEmpty(DType::kF32, {m, o});
  for (auto _ : state) {
    for (int i = 0; i < 3; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, o, kk, 1.0f,
                  a.data<float>(), kk, b.data<float>(), o, 0.0f,
                  out.data<float>(), o);
    }
    benchmark::ClobberMemory();
  }
  SetFlops(state, 3 * 2.0 * m * kk * o);
}

// The machine's f32 FMA ceiling per thread: independent 8-wide FMA chains,
// enough to cover the FMA latency on both pipes. The yardstick for "how
// close to the hardware" (--benchmark_filter=FmaPeak; the /2 row is the
// two-core peak). Needs AVX2+FMA; skips otherwise.
#if defined(__x86_64__)
using F8 = float __attribute__((vector_size(32)));
__attribute__((target("avx2,fma"))) float FmaChains(int64_t iterations,
                                                    float mul, float add) {
  constexpr int kChains = 12;
  F8 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = F8{} + static_cast<float>(i);
  const F8 m = F8{} + mul, a = F8{} + add;
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kChains; ++i) {
      acc[i] = __builtin_ia32_vfmaddps256(acc[i], m, a);
    }
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) sum += acc[i][0];
  return sum;
}

// Arg: chunks run on mirrortrain's kernel pool at once (1, or 2 for both
// cores): exactly the parallelism the ops get.
void BM_FmaPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    state.SkipWithError("no AVX2/FMA");
    return;
  }
  const int64_t chunks = state.range(0);
  constexpr int64_t kIterations = 1 << 20;
  // Opaque to the compiler, and values that stay finite (x * 1 + 0).
  volatile float mul = 1.0f, add = 0.0f;
  for (auto _ : state) {
    ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        benchmark::DoNotOptimize(FmaChains(kIterations, mul, add));
      }
    });
  }
  SetFlops(state, chunks * kIterations * 12.0 * 8 * 2);
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseRealTime();
#endif

// MLP 784-256-128-10 layers at batch 128.
#define MLP_SHAPES \
  Args({128, 784, 256})->Args({128, 256, 128})->Args({128, 128, 10})
BENCHMARK(BM_MatMulForwardBackward)
    ->MLP_SHAPES->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_OpenBlasSgemmX3)
    ->MLP_SHAPES->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// CNN conv layers (5x5 SAME) at batch 32.
#define CNN_SHAPES Args({32, 28, 1, 32, 5})->Args({32, 14, 32, 64, 5})
BENCHMARK(BM_Conv2DForwardBackward)
    ->Args({32, 28, 1, 32, 5, 0})
    ->Args({32, 14, 32, 64, 5, 0})
    ->Args({32, 14, 32, 64, 5, 1})
    ->Args({32, 28, 16, 16, 3, 0})
    ->Args({32, 28, 16, 16, 3, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_OpenBlasSgemmConvShapeX3)
    ->CNN_SHAPES->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mirrortrain

BENCHMARK_MAIN();
