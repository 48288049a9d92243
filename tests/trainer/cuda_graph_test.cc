// train.cuda_graph on gpu:0: a step replayed from a captured CUDA graph
// computes what the eager step computes, bit for bit, over warm-up, capture,
// replays, an epoch's short last batch (eager) and the replays after it,
// with dropout, a cosine learning rate and an EMA with num_updates (all
// per-step values the graph reads from staged tensors); for one replica,
// and for logical replicas whose gradient all-reduce and synchronized batch
// norm are recorded into the graph. Labelled `gpu`; skips with the reason
// without one.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"
#include "tests/trainer/cli_runner.h"

namespace mirrortrain {
namespace {

class CudaGraphCliTest : public testing::CudaTest {};

// Trains `config` briefly on synthetic data; returns the run dir.
std::string Train(const std::string& name, const std::string& config,
                  const std::string& cuda_graph, const std::string& strategy,
                  const std::string& devices,
                  const std::vector<std::string>& more_sets, Result* result) {
  const std::string dir = ::testing::TempDir() + "/mt_cuda_graph_" + name;
  std::filesystem::remove_all(dir);
  std::vector<std::string> args = {
      "train", "--config", absl::StrCat(MT_SOURCE_DIR, "/configs/", config),
      "--run_dir", dir};
  // 600 examples in batches of 64: 9 full batches and one of 24 per epoch.
  std::vector<std::string> sets = {"data.name=synthetic",
                                   "data.train_examples=600",
                                   "data.test_examples=200",
                                   "data.global_batch_size=64",
                                   "optimizer.schedule.decay_steps=30",
                                   "train.steps=24",
                                   "train.log_every_steps=4",
                                   "train.eval_every_epochs=0",
                                   "checkpoint.every_steps=0",
                                   "train.cuda_graph=" + cuda_graph,
                                   "distribute.strategy=" + strategy,
                                   "distribute.devices=" + devices};
  sets.insert(sets.end(), more_sets.begin(), more_sets.end());
  for (const std::string& set : sets) {
    args.push_back("--set");
    args.push_back(set);
  }
  *result = RunCli(args);
  return dir;
}

const std::vector<std::string> kSmallCnn = {"model.conv_filters=[4,8]",
                                            "model.dense_units=32"};

// The logged losses without their timing.
std::vector<std::string> LossLines(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const std::string& line : Lines(ReadFile(run_dir + "/metrics.jsonl"))) {
    if (line.find("\"loss\"") != std::string::npos) {
      out.push_back(line.substr(0, line.find("\"samples_per_sec\"")));
    }
  }
  return out;
}

// Trains `config` eagerly and graphed; both runs must end bitwise equal
// (checkpoints and logged losses), and the graphed one must have captured.
void ExpectReplaysMatchEagerSteps(const std::string& name,
                                  const std::string& config,
                                  const std::string& strategy,
                                  const std::string& devices,
                                  const std::vector<std::string>& more_sets,
                                  size_t loss_lines = 8) {
  Result eager, graphed;
  const std::string eager_dir =
      Train(name + "_off", config, "off", strategy, devices, more_sets, &eager);
  const std::string graph_dir = Train(name + "_auto", config, "auto", strategy,
                                      devices, more_sets, &graphed);
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  ASSERT_EQ(graphed.exit_code, 0) << graphed.err;
  EXPECT_EQ(graphed.err.find("train.cuda_graph: eager steps"),
            std::string::npos)
      << graphed.err;
  ExpectSameTensors(eager_dir + "/checkpoints/ckpt-24.safetensors",
                    graph_dir + "/checkpoints/ckpt-24.safetensors");
  EXPECT_EQ(LossLines(eager_dir), LossLines(graph_dir));
  // Six training lines and the final evaluation's raw and EMA lines (8),
  // plus any evaluations' lines between.
  EXPECT_EQ(LossLines(graph_dir).size(), loss_lines);
}

TEST_F(CudaGraphCliTest, ReplayedStepsMatchEagerStepsBitwise) {
  ExpectReplaysMatchEagerSteps("cnn", "fashion_mnist_cnn.yaml", "one_device",
                               "[gpu:0]", kSmallCnn);
}

TEST_F(CudaGraphCliTest, ReplayedStepsOfLogicalReplicasMatchEagerSteps) {
  ExpectReplaysMatchEagerSteps("cnn2", "fashion_mnist_cnn.yaml", "mirrored",
                               "[gpu:0,gpu:0]", kSmallCnn);
}

// Under mixed bfloat16 each update also writes the variables' bfloat16
// copies that the next step's products read (ops::KeepBf16Copy): the
// recorded update must write them as the eager one does, on two replicas,
// or the replays' products would read stale weights. The evaluations after
// each epoch swap the EMA weights in and out (assignments, which convert
// the copies again) between replays. (That the copies hold the right bits
// at all is tests/tensor/cuda_bf16_copy_test.cc's to show.)
TEST_F(CudaGraphCliTest, Bf16StepsAndTheirWeightCopiesAreRecorded) {
  std::vector<std::string> sets = kSmallCnn;
  sets.push_back("precision=bf16");
  sets.push_back("train.eval_every_epochs=1");
  // Evaluations after steps 10 and 20 and at the end: 6 lines.
  ExpectReplaysMatchEagerSteps("bf16", "fashion_mnist_cnn.yaml", "mirrored",
                               "[gpu:0,gpu:0]", sets, 12);
}

// Clipping by norm and by global norm stays on the device: recorded too.
TEST_F(CudaGraphCliTest, ClippedStepsAreRecorded) {
  std::vector<std::string> sets = kSmallCnn;
  sets.push_back("optimizer.clip_norm=0.05");
  sets.push_back("optimizer.clip_global_norm=0.1");
  ExpectReplaysMatchEagerSteps("clipped", "fashion_mnist_cnn.yaml", "mirrored",
                               "[gpu:0,gpu:0]", sets);
}

// Three replicas (shards of 22, 21 and 21 rows) with synchronized batch
// norm: its statistics' all-reduces are recorded too.
TEST_F(CudaGraphCliTest, SynchronizedBatchNormOfLogicalReplicasIsRecorded) {
  ExpectReplaysMatchEagerSteps("resnet3", "fashion_mnist_resnet.yaml",
                               "mirrored", "[gpu:0,gpu:0,gpu:0]", {});
}

// Two micro-batches per step, each with its fixed input buffers. An epoch
// is 10 batches (the last short): 5 steps, the fifth eager.
TEST_F(CudaGraphCliTest, AccumulatedStepsAreRecorded) {
  std::vector<std::string> sets = kSmallCnn;
  sets.push_back("train.accumulation_steps=2");
  ExpectReplaysMatchEagerSteps("accumulation", "fashion_mnist_cnn.yaml",
                               "one_device", "[gpu:0]", sets);
}

// A token model (the gpt config: embeddings, attention, layer norm, AdamW
// with global-norm clipping) on a text file: its embedding checks the ids
// on the device (ops::ScopedIndexChecks), so its steps are recorded too.
TEST_F(CudaGraphCliTest, TokenModelStepsAreRecorded) {
  const std::string text = ::testing::TempDir() + "/mt_cuda_graph_text.txt";
  std::string words;
  uint64_t state = 1;
  const char* kWords[] = {"the ", "graph ",  "replays ", "a ",     "step ",
                          "of ",  "tokens ", "and ",     "bytes. "};
  while (words.size() < 40000) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    words += kWords[(state >> 33) % 9];
  }
  testing::WriteBytes(text, words);
  const std::vector<std::string> sets = {
      "data={name: text, path: " + text +
          ", sequence_length: 64, validation_fraction: 0.1}",
      "data.global_batch_size=16"};
  ExpectReplaysMatchEagerSteps("gpt", "fortunes_gpt.yaml", "one_device",
                               "[gpu:0]", sets);
}

TEST_F(CudaGraphCliTest, StepsThatCannotBeCapturedStayEagerWithANotice) {
  Result r;
  Train("central", "fashion_mnist_cnn.yaml", "auto", "central_storage",
        "[gpu:0,gpu:0]", kSmallCnn, &r);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("train.cuda_graph: eager steps: central storage and "
                       "parameter servers update outside the replica's step"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mirrortrain
