// A steady-state training step on a GPU calls neither cudaMalloc nor
// cudaFree: the Trainer's real loop (staged input, forward, backward,
// bucketed all-reduce, clipping, optimizer, EMA, logging) on [gpu:0] and on
// two logical replicas [gpu:0, gpu:0] (also sharing their gradients with
// the updates, eagerly: distribute.sum_in_update), with the caching allocator's
// counters read between steps. The step observer that reads them makes the
// loop finish every step before the next (no step in flight); the pending
// step's own allocations (pinned host copies, a fence) are host-side. Labelled
// `gpu`; skips with the reason when no GPU is visible.
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tests/tensor/cuda_test_util.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

struct Case {
  const char* model;
  const char* devices;
  // Logical replicas summing their gradients in the update (no clipping,
  // eager steps: the collectives are counted), instead of all-reducing.
  bool shares = false;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " on " << c.devices << (c.shares ? ", shared" : "");
}

class GpuSteadyStateTest : public testing::CudaTest,
                           public ::testing::WithParamInterface<Case> {};

constexpr int64_t kWarmupSteps = 10;
constexpr int64_t kSteps = 40;

TEST_P(GpuSteadyStateTest, StepsAfterWarmupAllocateNoDeviceMemory) {
  const Case c = GetParam();
  auto config = ParseConfig(
      "", "steady_state.yaml",
      {std::string(c.model) == "mlp"
           ? "model={name: mlp, hidden_units: [256, 128], dropout: 0.3}"
           : "model={name: cnn, conv_filters: [8, 16], dense_units: 64, "
             "dropout: 0.3}",
       "data.name=synthetic", "data.test_examples=100",
       "data.global_batch_size=64", "train.steps=" + std::to_string(kSteps),
       "train.log_every_steps=5", "train.eval_every_epochs=0",
       "optimizer.name=adam",
       c.shares ? "train.cuda_graph=off" : "optimizer.clip_global_norm=1.0",
       "ema.decay=0.99", "distribute.strategy=mirrored",
       "distribute.bucket_bytes=65536",
       std::string("distribute.devices=") + c.devices});
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config, "", DataNeeds::kTrainAndTest);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::map<int64_t, cuda::DeviceMemoryStats> seen;
  (*trainer)->set_step_observer([&seen](int64_t step) {
    if (step != kWarmupSteps && step != kSteps) return;
    absl::StatusOr<cuda::DeviceMemoryStats> stats =
        cuda::GetDeviceMemoryStats(0);
    ASSERT_TRUE(stats.ok()) << stats.status();
    seen[step] = *stats;
  });
  const absl::Status trained = (*trainer)->Train();
  ASSERT_TRUE(trained.ok()) << trained;
  ASSERT_EQ(seen.size(), 2u);
  const cuda::DeviceMemoryStats& warm = seen[kWarmupSteps];
  const cuda::DeviceMemoryStats& end = seen[kSteps];
  EXPECT_GT(warm.device_mallocs, 0);
  EXPECT_EQ(end.device_mallocs, warm.device_mallocs)
      << "steps " << kWarmupSteps + 1 << "-" << kSteps << " called cudaMalloc";
  EXPECT_EQ(end.device_frees, warm.device_frees)
      << "steps " << kWarmupSteps + 1 << "-" << kSteps << " called cudaFree";
  if (c.shares) {
    // A share and its end per step: the logical GPU replicas did share.
    EXPECT_EQ((*trainer)->strategy().collectives_started(), 2 * kSteps);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuSteadyStateTest,
                         ::testing::Values(Case{"mlp", "[gpu:0]"},
                                           Case{"cnn", "[gpu:0]"},
                                           Case{"mlp", "[gpu:0,gpu:0]"},
                                           Case{"cnn", "[gpu:0,gpu:0]"},
                                           Case{"mlp", "[gpu:0,gpu:0]", true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.model) +
                                  (std::string(info.param.devices).find(',') ==
                                           std::string::npos
                                       ? "_one_gpu"
                                       : "_two_logical_gpus") +
                                  (info.param.shares ? "_shared" : "");
                         });

}  // namespace
}  // namespace mirrortrain::trainer
