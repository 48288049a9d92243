// train.cuda_graph on gpu:0: a step replayed from a captured CUDA graph
// computes what the eager step computes, bit for bit, over warm-up, capture,
// replays, an epoch's short last batch (eager) and the replays after it,
// with dropout, a cosine learning rate and an EMA with num_updates (all
// per-step values the graph reads from staged tensors); for one replica,
// and for logical replicas whose gradient all-reduce and synchronized batch
// norm are recorded into the graph; and with the Winograd convolutions.
// Labelled `gpu`; skips with the reason without one.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"
#include "tests/trainer/cli_runner.h"
#include "tests/trainer/data/npz_writer.h"

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

// The Winograd convolutions (the internal switch conv_gpu_winograd, off by
// default) recorded: the small CNN's second conv (5x5, 4 -> 8 channels, not
// a direct kernel's) with its pool in the output pass, the forward's kept
// transform, and the filter gradient's segments (batches of 64: 3 136
// tiles in 4 segments; the short last batch, eager: 1 176 in 2).
TEST_F(CudaGraphCliTest, WinogradStepsAreRecorded) {
  // Unset again however the test ends: later tests run the CLI with this
  // process's environment.
  struct Unset {
    ~Unset() { unsetenv("MIRRORTRAIN_SWITCHES"); }
  } unset;
  ASSERT_EQ(setenv("MIRRORTRAIN_SWITCHES", "conv_gpu_winograd=on", 1), 0);
  ExpectReplaysMatchEagerSteps("winograd", "fashion_mnist_cnn.yaml",
                               "one_device", "[gpu:0]", kSmallCnn);
  Result r;
  Train("winograd_said", "fashion_mnist_cnn.yaml", "auto", "one_device",
        "[gpu:0]", kSmallCnn, &r);
  EXPECT_EQ(
      r.err.rfind("mirrortrain: internal switches: conv_gpu_winograd=on\n", 0),
      0u)
      << r.err;
  // The convolutions did go Winograd (not im2col, which would match too).
  const std::string said =
      "\nmirrortrain: internal switches: conv_gpu_winograd: ";
  const size_t at = r.err.find(said);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_GT(std::atoll(r.err.c_str() + at + said.size()), 0) << r.err;
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

// distribute.sum_in_update on one GPU: the updates that add three logical
// replicas' gradients themselves (eager, and recorded with the events that
// order the replicas' reads) end bitwise where the all-reduced run does.
TEST_F(CudaGraphCliTest, SummingInTheUpdateMatchesTheAllReduceBitwise) {
  std::vector<std::string> shared_sets = kSmallCnn;
  shared_sets.push_back("distribute.check_replicas_every_steps=1");
  std::vector<std::string> sets = shared_sets;
  sets.push_back("distribute.sum_in_update=false");
  Result reduced;
  const std::string reduced_dir =
      Train("reduced3", "fashion_mnist_cnn.yaml", "auto", "mirrored",
            "[gpu:0,gpu:0,gpu:0]", sets, &reduced);
  ASSERT_EQ(reduced.exit_code, 0) << reduced.err;
  for (const char* cuda_graph : {"off", "auto"}) {
    SCOPED_TRACE(cuda_graph);
    Result shared;
    const std::string shared_dir = Train(
        absl::StrCat("shared3_", cuda_graph), "fashion_mnist_cnn.yaml",
        cuda_graph, "mirrored", "[gpu:0,gpu:0,gpu:0]", shared_sets, &shared);
    ASSERT_EQ(shared.exit_code, 0) << shared.err;
    if (std::string(cuda_graph) == "auto") {
      EXPECT_EQ(shared.err.find("train.cuda_graph: eager steps"),
                std::string::npos)
          << shared.err;
    }
    ExpectSameTensors(reduced_dir + "/checkpoints/ckpt-24.safetensors",
                      shared_dir + "/checkpoints/ckpt-24.safetensors");
    EXPECT_EQ(LossLines(reduced_dir), LossLines(shared_dir));
  }
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

// A token id the embedding has no row for, in a replayed step: the
// device's check record is read back with the next replay's copies
// (Trainer::PendStep), and the run ends at that step with the error the
// eager run reports, naming the replica, the index and its position.
TEST_F(CudaGraphCliTest, ABadTokenIdInAReplayEndsTheRunAtItsStep) {
  const std::string dir = ::testing::TempDir() + "/mt_cuda_graph_ids";
  std::filesystem::create_directories(dir);
  // 80 rows of 4 ids in [0, 8), row 69's third id 9. Batches of 16, not
  // shuffled: step 5 (after 2 eager warm-up steps, a capture and a
  // replay) holds rows 64..79, so the bad id is at position 5 * 4 + 2.
  testing::WriteBytes(dir + "/ids.npz", testing::TokenIdsNpzBytes(80, 69));
  std::string messages[2];
  for (int graphed = 0; graphed < 2; ++graphed) {
    const std::string run_dir =
        absl::StrCat(dir, "/run", graphed ? "_auto" : "_off");
    std::filesystem::remove_all(run_dir);
    const Result r =
        RunCli({"train", "--config",
                absl::StrCat(MT_SOURCE_DIR, "/configs/fashion_mnist_mlp.yaml"),
                "--run_dir", run_dir, "--set",
                "data={name: npz, path: " + dir + "/ids.npz, shuffle: false}",
                "--set", "data.global_batch_size=16", "--set",
                // An identity activation first, so the ids are not checked when
                // the data loads (TokenIdLayer finds no embedding) and reach
                // the step.
                "model={layers: [{type: activation, activation: linear}, "
                "{type: embedding, input_dim: 8, output_dim: 3}, "
                "{type: flatten}, {type: dense, units: 10}]}",
                "--set", "train.steps=10", "--set", "train.eval_every_epochs=0",
                "--set", "checkpoint.every_steps=0", "--set",
                "distribute.strategy=one_device", "--set",
                "distribute.devices=[gpu:0]", "--set",
                absl::StrCat("train.cuda_graph=", graphed ? "auto" : "off")});
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("step 5: replica 0: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Gather: index 9 at position 22 is out of range "
                         "[0, 8)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("train.cuda_graph: eager steps"), std::string::npos)
        << r.err;
    const size_t at = r.err.find("step 5: ");
    if (at != std::string::npos) messages[graphed] = r.err.substr(at);
  }
  EXPECT_EQ(messages[1], messages[0]);
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
