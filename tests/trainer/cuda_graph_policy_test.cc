// train.cuda_graph's decision, row by row: what is captured, and the reason
// given for what is not.
#include "trainer/cuda_graph_policy.h"

#include <string>

#include "gtest/gtest.h"

namespace mirrortrain::trainer {
namespace {

TEST(CudaGraphPolicyTest, CapturesGpuStepsAndSaysWhyNotOtherwise) {
  const CudaGraphFacts gpu{.replicas_on_gpus = true};
  Config config;
  config.train.cuda_graph = "auto";
  EXPECT_TRUE(DecideCudaGraph(config, gpu).capture);
  EXPECT_EQ(DecideCudaGraph(config, gpu).reason, "");

  struct Row {
    const char* name;
    Config config;
    CudaGraphFacts facts;
    std::string reason;  // "" when captured
  };
  Config clipped = config;
  clipped.optimizer.clip_global_norm = 1.0;
  Config accumulating = config;
  accumulating.train.accumulation_steps = 2;
  Config clip_norm = config;
  clip_norm.optimizer.clip_norm = 1.0;
  Config clip_value = config;  // Elementwise clipping stays on the device.
  clip_value.optimizer.clip_value = 0.5;
  const Row rows[] = {
      {"cpu", config, {}, "the replicas are not on GPUs"},
      {"strategy",
       config,
       {.replicas_on_gpus = true, .strategy_reason = "no can do"},
       "no can do"},
      {"central storage",
       config,
       {.replicas_on_gpus = true, .mirrored_variables = false},
       "central storage and parameter servers update outside the replica's "
       "step"},
      // Clipping by norm keeps its norms on the device.
      {"global norm", clipped, gpu, ""},
      {"norm", clip_norm, gpu, ""},
      {"accumulation", accumulating, gpu, ""},
      {"clip value", clip_value, gpu, ""},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const CudaGraphDecision d = DecideCudaGraph(row.config, row.facts);
    EXPECT_EQ(d.capture, row.reason.empty());
    EXPECT_EQ(d.reason, row.reason);
  }
}

TEST(CudaGraphPolicyTest, OffCapturesNothingAndGivesNoReason) {
  Config config;
  config.train.cuda_graph = "off";
  const CudaGraphDecision d =
      DecideCudaGraph(config, {.replicas_on_gpus = true});
  EXPECT_FALSE(d.capture);
  EXPECT_EQ(d.reason, "");
}

}  // namespace
}  // namespace mirrortrain::trainer
