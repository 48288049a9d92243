// The mirrortrain binary training on GPUs: one GPU, and two logical
// replicas on one GPU (device all-reduce, streams, staged input), against
// the same job on cpu:0. Labelled `gpu`; skips with the reason without one.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/trainer/cli_runner.h"

namespace mirrortrain {
namespace {

class GpuCliTest : public testing::CudaTest,
                   public ::testing::WithParamInterface<const char*> {};

// The train loss logged at the last step of a 20-step synthetic job on
// `devices`; -1 on failure (with the test failed).
double FinalLoss(const std::string& model, const std::string& devices) {
  const std::string dir = ::testing::TempDir() + "/mt_gpu_cli_" + model +
                          std::to_string(std::hash<std::string>()(devices));
  std::filesystem::remove_all(dir);
  std::vector<std::string> args = {
      "train", "--config",
      absl::StrCat(MT_SOURCE_DIR, "/configs/fashion_mnist_", model, ".yaml"),
      "--run_dir", dir};
  for (const std::string& set : std::vector<std::string>{
           "data.name=synthetic", "data.test_examples=500",
           "data.global_batch_size=64",
           model == "mlp" ? "model.hidden_units=[64]"
                          : "model.conv_filters=[4,8]",
           model == "mlp" ? "model.dropout=0" : "model.dense_units=32",
           "train.steps=20", "train.log_every_steps=20",
           "train.eval_every_epochs=0", "checkpoint.every_steps=0",
           "distribute.strategy=mirrored",
           // The configs' rates (0.05, momentum 0.9) make these small
           // models chaotic: rounding differences would double every step.
           "optimizer.learning_rate=0.001",
           "distribute.check_replicas_every_steps=10",
           "distribute.devices=" + devices}) {
    args.push_back("--set");
    args.push_back(set);
  }
  Result r = RunCli(args);
  EXPECT_EQ(r.exit_code, 0) << devices << ": " << r.err;
  if (r.exit_code != 0) return -1;
  double loss = -1;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(dir + "/metrics.jsonl"), '\n')) {
    if (line.find("\"split\": \"train\"") == absl::string_view::npos) continue;
    const size_t at = line.find("\"loss\": ");
    if (at != absl::string_view::npos) {
      loss = std::stod(std::string(line.substr(at + 8)));
    }
  }
  return loss;
}

// fp32 on both; 20 steps of summation-order differences (cuBLAS vs
// OpenBLAS, block reductions) stay well inside 1e-3 of the loss.
TEST_P(GpuCliTest, TrainingOnGpusFollowsTheCpu) {
  const std::string model = GetParam();
  const double cpu = FinalLoss(model, "[cpu:0]");
  ASSERT_GT(cpu, 0);
  for (const char* devices : {"[gpu:0]", "[gpu:0,gpu:0]"}) {
    SCOPED_TRACE(devices);
    const double gpu = FinalLoss(model, devices);
    EXPECT_NEAR(gpu, cpu, 1e-3 * cpu);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuCliTest, ::testing::Values("mlp", "cnn"));

}  // namespace
}  // namespace mirrortrain
