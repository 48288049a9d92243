// train.cuda_graph on gpu:0: a step replayed from a captured CUDA graph
// computes what the eager step computes, bit for bit, over warm-up, capture,
// replays, an epoch's short last batch (eager) and the replays after it,
// with dropout, a cosine learning rate and an EMA with num_updates (all
// per-step values the graph reads from staged tensors). Labelled `gpu`;
// skips with the reason without one.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/trainer/cli_runner.h"

namespace mirrortrain {
namespace {

class CudaGraphCliTest : public testing::CudaTest {};

// Trains the CNN config briefly on synthetic data; returns the run dir.
std::string TrainCnn(const std::string& name, const std::string& cuda_graph,
                     const std::string& strategy, const std::string& devices,
                     Result* result) {
  const std::string dir = ::testing::TempDir() + "/mt_cuda_graph_" + name;
  std::filesystem::remove_all(dir);
  std::vector<std::string> args = {
      "train", "--config",
      absl::StrCat(MT_SOURCE_DIR, "/configs/fashion_mnist_cnn.yaml"),
      "--run_dir", dir};
  // 600 examples in batches of 64: 9 full batches and one of 24 per epoch.
  for (const std::string& set : std::vector<std::string>{
           "data.name=synthetic", "data.train_examples=600",
           "data.test_examples=200", "data.global_batch_size=64",
           "model.conv_filters=[4,8]", "model.dense_units=32",
           "optimizer.schedule.decay_steps=30", "train.steps=24",
           "train.log_every_steps=4", "train.eval_every_epochs=0",
           "checkpoint.every_steps=0", "train.cuda_graph=" + cuda_graph,
           "distribute.strategy=" + strategy,
           "distribute.devices=" + devices}) {
    args.push_back("--set");
    args.push_back(set);
  }
  *result = RunCli(args);
  return dir;
}

TEST_F(CudaGraphCliTest, ReplayedStepsMatchEagerStepsBitwise) {
  Result eager, graphed;
  const std::string eager_dir =
      TrainCnn("off", "off", "one_device", "[gpu:0]", &eager);
  const std::string graph_dir =
      TrainCnn("auto", "auto", "one_device", "[gpu:0]", &graphed);
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  ASSERT_EQ(graphed.exit_code, 0) << graphed.err;
  // Captured: no notice that steps stay eager.
  EXPECT_EQ(graphed.err.find("train.cuda_graph: eager steps"),
            std::string::npos)
      << graphed.err;
  ExpectSameTensors(eager_dir + "/checkpoints/ckpt-24.safetensors",
                    graph_dir + "/checkpoints/ckpt-24.safetensors");
  // The logged losses are the replays' own.
  std::vector<std::string> a, b;
  for (const std::string& line :
       Lines(ReadFile(eager_dir + "/metrics.jsonl"))) {
    if (line.find("\"loss\"") != std::string::npos) a.push_back(line);
  }
  for (const std::string& line :
       Lines(ReadFile(graph_dir + "/metrics.jsonl"))) {
    if (line.find("\"loss\"") != std::string::npos) b.push_back(line);
  }
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].substr(0, a[i].find("\"samples_per_sec\"")),
              b[i].substr(0, b[i].find("\"samples_per_sec\"")));
  }
}

TEST_F(CudaGraphCliTest, StepsThatCannotBeCapturedStayEagerWithANotice) {
  Result r;
  TrainCnn("two_replicas", "auto", "mirrored", "[gpu:0,gpu:0]", &r);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("train.cuda_graph: eager steps: the collectives of 2 "
                       "replicas are not captured yet"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mirrortrain
