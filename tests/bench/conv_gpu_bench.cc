// GPU Conv2D forward + backward at the benchmark models' shapes, each
// captured once as a CUDA graph and replayed (as training steps run): the
// GPU time of one layer's passes, without host launch costs. Compares the
// direct kernels (first layers), the implicit input gradient (the second
// conv, fp32) and Winograd's F(2x2, rxr) (fp32, the switch
// conv_gpu_winograd) with im2col + GEMMs + col2im. Each run says so when
// no GPU is visible.
//   build/bin/conv_gpu_bench [--benchmark_filter=...]
// Args: layer (kLayers), ours (1: direct kernels and implicit input
// gradient on; 2: those and Winograd; 0: all off), bf16 (0/1). Counters:
// which of ours ran.
#include <chrono>
#include <optional>
#include <vector>

#include "benchmark/benchmark.h"
#include "models/initializers.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/stream.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/winograd_conv.h"
#include "tensor/status_macros.h"

namespace mirrortrain {
namespace {

struct Layer {
  const char* name;
  Shape x, filter;
  bool input_gradient;  // A first layer's input is data: no dx.
};

// The cnn config's two convs at batch 256 (SAME, stride 1), the resnet
// config's stem at batch 128, and two of its block convs (16 channels: half
// of the implicit input gradient's 32-channel tile idle; 64 channels: two
// tiles).
const Layer kLayers[] = {
    {"cnn conv1", {256, 28, 28, 1}, {5, 5, 1, 32}, false},
    {"cnn conv2", {256, 14, 14, 32}, {5, 5, 32, 64}, true},
    {"resnet stem", {128, 28, 28, 1}, {3, 3, 1, 16}, false},
    {"resnet 16", {128, 28, 28, 16}, {3, 3, 16, 16}, true},
    {"resnet 64", {128, 7, 7, 64}, {3, 3, 64, 64}, true},
};

constexpr int kReplays = 20;

// Conv2D and its gradients (dy given) captured on `stream`; the graph
// and what it reads and writes.
struct Captured {
  Tensor x, filter, dy;
  std::vector<std::optional<Tensor>> grads;
  cuda::CudaGraph graph;
};

absl::StatusOr<Captured> Capture(const Layer& layer) {
  const Device gpu = Device::Cuda(0);
  Captured c;
  MT_ASSIGN_OR_RETURN(Tensor x, models::GlorotUniform(layer.x, 1));
  MT_ASSIGN_OR_RETURN(Tensor f, models::GlorotUniform(layer.filter, 2));
  MT_ASSIGN_OR_RETURN(c.x, x.To(gpu));
  MT_ASSIGN_OR_RETURN(c.filter, f.To(gpu));
  // One eager pass first: the cuBLAS algorithms are chosen outside the
  // capture, as the trainer's warm-up step does.
  for (bool capture : {false, true}) {
    const uint64_t pool = cuda::NewGraphMemoryPoolId();
    std::optional<cuda::ScopedCapture> scope;
    std::optional<cuda::ScopedGraphMemoryPool> memory;
    if (capture) {
      scope.emplace(0, pool);
      memory.emplace(pool);
      MT_RETURN_IF_ERROR(scope->Begin());
    }
    GradientTape tape;
    tape.Watch(c.filter);
    if (layer.input_gradient) tape.Watch(c.x);
    MT_ASSIGN_OR_RETURN(Tensor y, ops::Conv2D(c.x, c.filter));
    if (!c.dy.defined()) {
      MT_ASSIGN_OR_RETURN(Tensor dy, models::GlorotUniform(y.shape(), 3));
      MT_ASSIGN_OR_RETURN(c.dy, dy.To(gpu));
    }
    GradientOptions options;
    options.output_gradient = c.dy;
    MT_ASSIGN_OR_RETURN(c.grads, tape.Gradient(y, {c.filter, c.x}, options));
    if (capture) {
      MT_ASSIGN_OR_RETURN(c.graph, scope->End());
    }
  }
  return c;
}

void BM_GpuConv2DForwardBackward(benchmark::State& state) {
  if (cuda::DeviceCount() == 0) {
    state.SkipWithError("no GPU visible");
    return;
  }
  const Layer& layer = kLayers[state.range(0)];
  ops::internal::SetConvGpuDirect(state.range(1) != 0);
  ops::internal::SetConvGpuImplicitInputGrad(state.range(1) != 0);
  ops::internal::SetConvGpuWinograd(state.range(1) == 2);
  SetMatMulPrecision(state.range(2) != 0 ? MatMulPrecision::kBf16
                                         : MatMulPrecision::kFp32);
  state.SetLabel(layer.name);
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(0);
  if (!stream.ok()) {
    state.SkipWithError(stream.status().ToString().c_str());
    return;
  }
  cuda::ScopedCurrentStream current(stream->handle());
  const int64_t direct_calls = ops::internal::DirectConvCalls();
  const int64_t implicit_calls = ops::internal::ImplicitInputGradCalls();
  const int64_t winograd_calls = ops::internal::WinogradConvCalls();
  absl::StatusOr<Captured> c = Capture(layer);
  if (!c.ok()) {
    state.SkipWithError(c.status().ToString().c_str());
    return;
  }
  state.counters["direct"] =
      static_cast<double>(ops::internal::DirectConvCalls() > direct_calls);
  state.counters["implicit"] = static_cast<double>(
      ops::internal::ImplicitInputGradCalls() > implicit_calls);
  state.counters["winograd"] =
      static_cast<double>(ops::internal::WinogradConvCalls() > winograd_calls);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s;
    for (int i = 0; i < kReplays && s.ok(); ++i) s = c->graph.Launch();
    if (s.ok()) s = cuda::Synchronize(0);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count() /
        kReplays);
  }
  ops::internal::SetConvGpuDirect(true);
  ops::internal::SetConvGpuImplicitInputGrad(true);
  ops::internal::SetConvGpuWinograd(false);
  SetMatMulPrecision(MatMulPrecision::kFp32);
}

void Arguments(benchmark::internal::Benchmark* b) {
  for (int64_t bf16 : {0, 1}) {
    for (int64_t layer : {0, 1, 2}) {
      for (int64_t ours : {1, 0}) b->Args({layer, ours, bf16});
    }
  }
  // The implicit input gradient's other shapes (fp32 only: under bf16
  // the input gradient is a tensor-core GEMM either way).
  for (int64_t layer : {3, 4}) {
    for (int64_t ours : {1, 0}) b->Args({layer, ours, 0});
  }
  // Winograd (fp32 only, as the switch takes): the 5x5 and 3x3 convs with
  // channels on both sides.
  for (int64_t layer : {1, 3, 4}) b->Args({layer, 2, 0});
}

BENCHMARK(BM_GpuConv2DForwardBackward)
    ->Apply(Arguments)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mirrortrain

BENCHMARK_MAIN();
