// The mirrored strategy trains the same model as one device: 1, 2 and 4
// logical CPU replicas over the same global batches end with the same
// weights, and every replica holds identical state after every step.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

std::string Devices(int n) {
  std::string out = "distribute.devices=[";
  for (int i = 0; i < n; ++i) out += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  return out + "]";
}

struct TrainedState {
  std::vector<std::string> names;
  std::vector<Tensor> values;  // Replica 0's state after training.
  int64_t collectives = 0;     // Replica 0's (Strategy::collectives_started).
};

// `yaml` with `overrides` on `replicas` CPU devices, on synthetic data
// unless `own_data` (the yaml's data section is used).
TrainedState Train(int replicas, std::vector<std::string> overrides,
                   const std::string& run_dir = "",
                   const std::string& yaml = "", bool own_data = false) {
  overrides.push_back(Devices(replicas));
  overrides.push_back("distribute.strategy=mirrored");
  overrides.push_back("distribute.check_replicas_every_steps=1");
  if (!own_data) {
    overrides.push_back("data.name=synthetic");
    overrides.push_back("data.test_examples=100");
  }
  overrides.push_back("train.eval_every_epochs=0");
  overrides.push_back("train.log_every_steps=1000");
  auto config = ParseConfig(yaml, "mirrored_test.yaml", overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return {};
  auto trainer = Trainer::Create(*config, run_dir, DataNeeds::kTrainAndTest);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  EXPECT_EQ((*trainer)->num_replicas(), replicas);
  absl::Status s = (*trainer)->Train();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE((*trainer)->CheckReplicasIdentical().ok());
  TrainedState run;
  for (Variable* v : (*trainer)->ReplicaState(0)) {
    run.names.push_back(v->name());
    run.values.push_back(*v->value().Clone());
  }
  run.collectives = (*trainer)->strategy().collectives_started();
  return run;
}

// ||a - b|| / ||b|| per variable; variables whose name contains
// `absolute_for` (and their slots and shadows) by ||a - b|| <= tol.
void ExpectSameWeights(const TrainedState& a, const TrainedState& b, double tol,
                       const std::string& absolute_for = "") {
  ASSERT_EQ(a.names, b.names);
  ASSERT_FALSE(a.names.empty());
  for (size_t i = 0; i < a.values.size(); ++i) {
    const testing::DiffAndNorm d =
        testing::L2DiffAndNorm(a.values[i], b.values[i]);
    const bool absolute = !absolute_for.empty() &&
                          a.names[i].find(absolute_for) != std::string::npos;
    EXPECT_LE(d.diff, absolute ? tol : tol * d.norm + 1e-12) << a.names[i];
  }
}

TEST(MirroredTrainingTest, MlpSameWeightsFor1And2And4Replicas) {
  const std::vector<std::string> mlp = {"model.name=mlp",
                                        "model.hidden_units=[32,16]",
                                        "model.dropout=0.2",
                                        "data.global_batch_size=32",
                                        "train.steps=50",
                                        "optimizer.name=adam",
                                        "optimizer.learning_rate=0.001"};
  TrainedState one = Train(1, mlp);
  TrainedState two = Train(2, mlp);
  TrainedState four = Train(4, mlp);
  ExpectSameWeights(two, one, 1e-5);
  ExpectSameWeights(four, one, 1e-5);
}

// distribute.sum_in_update: each replica's update adds every replica's
// gradient itself, in the all-reduce's order (replica 0 first), so the
// runs end with the same bits as the all-reduced ones: weights, slots and
// EMA shadows, with gradient accumulation (the local sums are shared) and
// dropout. Three replicas: an update adding its own gradient first would
// differ. Clipping and L2 regularization read the sum, so they all-reduce
// instead, as four replicas do. (The other
// tests here share by default, synchronized batch norm's all-reduces
// included.)
TEST(MirroredTrainingTest, SummingInTheUpdateIsTheAllReduceBitForBit) {
  for (int replicas : {2, 3}) {
    for (const char* optimizer : {"momentum", "adam"}) {
      SCOPED_TRACE(absl::StrCat(replicas, " replicas, ", optimizer));
      const std::vector<std::string> job = {
          "model.name=mlp",
          "model.hidden_units=[32,16]",
          "model.dropout=0.2",
          "data.global_batch_size=30",
          "train.steps=6",
          "train.accumulation_steps=2",
          "ema.decay=0.9",
          absl::StrCat("optimizer.name=", optimizer),
          "optimizer.learning_rate=0.01"};
      auto with = [&](std::vector<std::string> more) {
        more.insert(more.begin(), job.begin(), job.end());
        return more;
      };
      const TrainedState shared = Train(replicas, job);
      const TrainedState reduced =
          Train(replicas, with({"distribute.sum_in_update=false"}));
      ASSERT_EQ(shared.names, reduced.names);
      for (size_t i = 0; i < shared.values.size(); ++i) {
        EXPECT_TRUE(testing::SameBits(shared.values[i], reduced.values[i]))
            << shared.names[i];
      }
      // A share and its end per step; one gradient bucket per step.
      EXPECT_EQ(shared.collectives, 2 * 6);
      EXPECT_EQ(reduced.collectives, 6);
      const TrainedState clipped =
          Train(replicas, with({"optimizer.clip_global_norm=1.0"}));
      EXPECT_EQ(clipped.collectives, 6);
      const TrainedState l2 =
          Train(replicas, with({"optimizer.l2_regularization=0.001"}));
      EXPECT_EQ(l2.collectives, 6);
    }
  }
  // From four replicas on the all-reduce moves fewer bytes: it is kept.
  const TrainedState four =
      Train(4, {"model.name=mlp", "model.hidden_units=[8]",
                "data.global_batch_size=32", "train.steps=3"});
  EXPECT_EQ(four.collectives, 3);
}

// precision: bf16 keeps the mirrored contract: every replica applies the
// same summed f32 update, so the replicas stay bitwise identical (Train
// checks after every step), and the bf16 run computes numbers of its own.
TEST(MirroredTrainingTest, Bf16ReplicasStayIdentical) {
  const std::vector<std::string> mlp = {"model.name=mlp",
                                        "model.hidden_units=[32,16]",
                                        "data.global_batch_size=32",
                                        "train.steps=30",
                                        "optimizer.name=adam",
                                        "optimizer.learning_rate=0.001"};
  std::vector<std::string> bf16 = mlp;
  bf16.push_back("precision=bf16");
  const TrainedState fp32_run = Train(2, mlp);
  const TrainedState bf16_run = Train(2, bf16);
  ASSERT_EQ(bf16_run.names, fp32_run.names);
  ASSERT_FALSE(bf16_run.values.empty());
  const testing::DiffAndNorm d =
      testing::L2DiffAndNorm(bf16_run.values[0], fp32_run.values[0]);
  EXPECT_GT(d.diff, 1e-4 * d.norm) << "bf16 trained the fp32 weights";
}

TEST(MirroredTrainingTest, CnnSameWeightsFor1And2And4Replicas) {
  // Replica counts differ only in the order float sums are taken (per-shard
  // GEMMs, then the all-reduce), ~1e-7 per step. At momentum 0.9 with lr
  // 0.01 this small CNN is chaotic on random data and those differences grow
  // ~2x per step (the same runs agree to 1e-5 for 5 steps, not 20); at lr
  // 0.001 training is stable and 50 steps agree to 1e-5.
  const std::vector<std::string> cnn = {"model.name=cnn",
                                        "model.conv_filters=[4,8]",
                                        "model.dense_units=32",
                                        "model.dropout=0.4",
                                        "data.global_batch_size=16",
                                        "train.steps=50",
                                        "optimizer.learning_rate=0.001"};
  TrainedState one = Train(1, cnn);
  TrainedState two = Train(2, cnn);
  TrainedState four = Train(4, cnn);
  ExpectSameWeights(two, one, 1e-5);
  ExpectSameWeights(four, one, 1e-5);
}

// A small residual net with synchronized batch norm after every conv (an
// identity block, then a strided block with a projection shortcut).
// Activations are gelu and pooling is average pooling on purpose: with relu
// or max pooling a float-rounding difference (the replicas sum a batch in a
// different order, ~1e-7) can flip which side of a kink one of the ~10^5
// pre-activations of a step falls on (batch norm centres them on relu's
// kink), and that one element changes a gradient by far more than rounding.
// Such a run measures the kink, not the replicas (README, Status).
constexpr char kSyncBatchNormResnet[] = R"(
model:
  layers:
    - {type: conv2d, filters: 8, kernel_size: 3, padding: same, use_bias: false}
    - {type: batch_normalization, synchronized: true}
    - {type: activation, activation: gelu}
    - {type: average_pooling2d, pool_size: 2}
    - type: residual
      layers:
        - {type: conv2d, filters: 8, kernel_size: 3, padding: same, use_bias: false}
        - {type: batch_normalization, synchronized: true}
        - {type: activation, activation: gelu}
        - {type: conv2d, filters: 8, kernel_size: 3, padding: same, use_bias: false}
        - {type: batch_normalization, synchronized: true}
    - {type: activation, activation: gelu}
    - type: residual
      layers:
        - {type: conv2d, filters: 16, kernel_size: 3, strides: 2, padding: same, use_bias: false}
        - {type: batch_normalization, synchronized: true}
        - {type: activation, activation: gelu}
        - {type: conv2d, filters: 16, kernel_size: 3, padding: same, use_bias: false}
        - {type: batch_normalization, synchronized: true}
      shortcut:
        - {type: conv2d, filters: 16, kernel_size: 1, strides: 2, padding: same, use_bias: false}
        - {type: batch_normalization, synchronized: true}
    - {type: activation, activation: gelu}
    - {type: global_average_pooling2d}
    - {type: dense, units: 10}
)";

TEST(MirroredTrainingTest, SyncBatchNormResnetSameWeightsFor1And2And4Replicas) {
  // 50 rows: shards of 25 and of 13, 13, 12, 12. Small buckets start their
  // all-reduces during backward, between the batch norms' own all-reduces.
  // Train() checks after every step that every replica's state, moving
  // statistics included, is bitwise identical to replica 0's. The replica
  // counts differ only in the order float32 sums are taken (per-shard sums,
  // then the all-reduce): relative 1e-5 is rounding (2 and 4 replicas agree
  // with 1 to 1.3e-6 here, 2.5e-6 after 100 steps; with relu and max
  // pooling 5e-3 after 40); a wrong reduction is far off, as the
  // unsynchronized run below shows.
  const std::vector<std::string> job = {"data.global_batch_size=50",
                                        "data.train_examples=2000",
                                        "train.steps=40",
                                        "optimizer.name=momentum",
                                        "optimizer.learning_rate=0.001",
                                        "optimizer.momentum=0.9",
                                        "distribute.bucket_bytes=2048"};
  TrainedState one = Train(1, job, "", kSyncBatchNormResnet);
  TrainedState two = Train(2, job, "", kSyncBatchNormResnet);
  TrainedState four = Train(4, job, "", kSyncBatchNormResnet);
  ExpectSameWeights(two, one, 1e-5);
  ExpectSameWeights(four, one, 1e-5);
  // The moving statistics are among the compared variables.
  EXPECT_TRUE(std::any_of(one.names.begin(), one.names.end(), [](auto& n) {
    return n.find("moving_variance") != std::string::npos;
  }));
}

TEST(MirroredTrainingTest, GptConfigSameWeightsFor1And2And4Replicas) {
  // configs/fortunes_gpt.yaml as shipped (embeddings, causal attention with
  // dropout switched on, layer norm, gelu MLP, AdamW with exclusions,
  // global-norm clipping), on generated text with windows of 16 bytes and
  // a batch of 10 windows: shards of 5 and of 3, 3, 2, 2.
  const std::string dir = testing::FreshTestDir("gpt_replicas");
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += "line " + std::to_string(i * 7919 % 1000) + ": the fox. ";
  }
  { std::ofstream(dir + "/text.txt", std::ios::binary) << text; }
  const std::vector<std::string> job = {
      "data.path=" + dir + "/text.txt",
      "data.sequence_length=16",
      "data.global_batch_size=10",
      "model.layers[2].layers[0].layers[1].dropout=0.1",
      "train.steps=30",
      "train.eval_every_epochs=0",
      "checkpoint.every_steps=0",
      "distribute.bucket_bytes=65536"};
  const std::string yaml = testing::ReadFile(
      absl::StrCat(MT_SOURCE_DIR, "/configs/fortunes_gpt.yaml"));
  TrainedState one = Train(1, job, "", yaml, /*own_data=*/true);
  TrainedState two = Train(2, job, "", yaml, /*own_data=*/true);
  TrainedState four = Train(4, job, "", yaml, /*own_data=*/true);
  // The key projection's bias cannot change the attention (softmax is
  // invariant to the constant q.b it adds to a query's scores), so its
  // exact gradient is zero: it holds only rounding noise that AdamW scales
  // up (|b| ~ 1e-6 after 30 steps), compared on an absolute scale.
  ExpectSameWeights(two, one, 1e-5, "/key/bias");
  ExpectSameWeights(four, one, 1e-5, "/key/bias");
}

TEST(MirroredTrainingTest, UnsynchronizedBatchNormDependsOnTheReplicaCount) {
  // The control for the test above: per-shard statistics change the result.
  std::string yaml = kSyncBatchNormResnet;
  for (size_t at;
       (at = yaml.find("synchronized: true")) != std::string::npos;) {
    yaml.replace(at, 18, "synchronized: false");
  }
  const std::vector<std::string> job = {
      "data.global_batch_size=50", "data.train_examples=2000", "train.steps=10",
      "optimizer.learning_rate=0.001"};
  TrainedState one = Train(1, job, "", yaml);
  TrainedState two = Train(2, job, "", yaml);
  ASSERT_EQ(one.names, two.names);
  double worst = 0;
  for (size_t i = 0; i < one.values.size(); ++i) {
    const testing::DiffAndNorm d =
        testing::L2DiffAndNorm(two.values[i], one.values[i]);
    worst = std::max(worst, d.diff / (d.norm + 1e-12));
  }
  EXPECT_GT(worst, 1e-3);
}

TEST(MirroredTrainingTest, ThreeReplicasBatchOfEightWithPartialLastBatch) {
  // 20 examples in batches of 8: 8, 8, 4 per epoch; shards 3/3/2 and 2/1/1.
  for (bool drop : {false, true}) {
    const std::vector<std::string> small = {
        "model.hidden_units=[8]", "data.global_batch_size=8",
        "data.train_examples=20", "train.epochs=3",
        std::string("data.drop_remainder=") + (drop ? "true" : "false")};
    ExpectSameWeights(Train(3, small), Train(1, small), 1e-5);
  }
}

TEST(MirroredTrainingTest, MoreReplicasThanRowsGivesEmptyShards) {
  const std::vector<std::string> tiny = {
      "model.hidden_units=[8]", "data.global_batch_size=2",
      "data.train_examples=6", "train.steps=6"};
  ExpectSameWeights(Train(4, tiny), Train(1, tiny), 1e-5);
}

TEST(MirroredTrainingTest, CheckpointWrittenOnceRestoresIntoEveryReplica) {
  const std::vector<std::string> job = {
      "model.hidden_units=[16]", "model.dropout=0.3",
      "data.global_batch_size=24", "data.train_examples=240",
      "checkpoint.every_steps=0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = job;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  const std::string dir = ::testing::TempDir() + "/mirrored_resume";
  std::filesystem::remove_all(dir);
  TrainedState straight = Train(2, with({"train.steps=40"}));
  // 25 steps (saved at the end), then a new process-like run to 40 that
  // restores the checkpoint into both replicas.
  Train(2, with({"train.steps=25"}), dir);
  ASSERT_TRUE(
      std::filesystem::exists(dir + "/checkpoints/ckpt-25.safetensors"));
  TrainedState resumed = Train(2, with({"train.steps=40"}), dir);
  ExpectSameWeights(resumed, straight, 0.0);  // Bitwise.
}

}  // namespace
}  // namespace mirrortrain::trainer
