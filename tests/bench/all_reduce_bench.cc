// A gradient bucket's all-reduce between two logical CPU replicas, at the
// Fashion-MNIST CNN's gradient shapes (3.3M parameters, 13 MB; the default
// 25 MiB buckets put all but the last layer in one bucket): reduced in
// place as one list (Arg 0), or packed first because the test keeps a
// handle to every gradient (Arg 1), as a bucket that backward still reads
// is. The difference is what packing costs.
//   build/bin/all_reduce_bench
#include <algorithm>

#include "benchmark/benchmark.h"
#include "distribute/gradient_buckets.h"
#include "distribute/mirrored_strategy.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

const std::vector<Shape>& CnnGradientShapes() {
  static const auto* shapes =
      new std::vector<Shape>{{5, 5, 1, 32}, {32},   {5, 5, 32, 64}, {64},
                             {3136, 1024},  {1024}, {1024, 10},     {10}};
  return *shapes;
}

void BM_BucketAllReduceTwoCpuReplicas(benchmark::State& state) {
  const bool keep = state.range(0) != 0;
  auto strategy =
      MirroredStrategy::Create({Device::Cpu(0), Device::Cpu(1)}, {});
  if (!strategy.ok()) {
    state.SkipWithError(std::string(strategy.status().message()).c_str());
    return;
  }
  const std::vector<Shape>& shapes = CnnGradientShapes();
  std::vector<int64_t> bytes;
  for (const Shape& s : shapes) bytes.push_back(NumElements(s) * 4);
  const BucketPlan plan = PlanBuckets(bytes, 25 << 20);
  int64_t elements = 0;
  for (const Shape& s : shapes) elements += NumElements(s);
  for (auto _ : state) {
    absl::Status s = (*strategy)->Run([&](ReplicaContext& ctx) -> absl::Status {
      GradientBuckets buckets(&plan, &ctx, shapes, DType::kF32);
      std::vector<Tensor> kept;
      for (size_t k = shapes.size(); k-- > 0;) {
        MT_ASSIGN_OR_RETURN(
            Tensor g, Tensor::Empty(DType::kF32, shapes[k], ctx.device()));
        std::fill_n(g.data<float>(), g.num_elements(), 1.0f);
        if (keep) kept.push_back(g);
        MT_RETURN_IF_ERROR(buckets.Ready(k, std::move(g)));
      }
      return buckets.Finish().status();
    });
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * elements * 4 * 2);
  state.SetLabel(keep ? "packed" : "in place");
}
BENCHMARK(BM_BucketAllReduceTwoCpuReplicas)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
}  // namespace mirrortrain::distribute

BENCHMARK_MAIN();
