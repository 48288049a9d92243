// central_storage and parameter_server end to end on logical CPU devices:
// central storage trains what mirrored trains (1, 2 and 4 replicas, within
// float rounding) into checkpoints of the same layout, and evaluates with
// its EMA; one mirrored replica, and one parameter-server worker, are
// one_device bit for bit; many workers apply every pushed gradient exactly
// once, within max_staleness, and checkpoint and resume.
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/saver.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

std::string Devices(const std::string& key, int n) {
  std::string out = key + "=[";
  for (int i = 0; i < n; ++i) out += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  return out + "]";
}

// A small job: an MLP with dropout, Adam and EMA on synthetic data.
std::vector<std::string> SmallJob(const std::string& strategy, int devices,
                                  int64_t steps) {
  return {"model.name=mlp",
          "model.hidden_units=[32,16]",
          "model.dropout=0.2",
          "data.name=synthetic",
          "data.test_examples=100",
          "data.global_batch_size=32",
          "optimizer.name=adam",
          "optimizer.learning_rate=0.001",
          "ema.decay=0.9",
          "train.eval_every_epochs=0",
          "train.log_every_steps=10",
          "train.steps=" + std::to_string(steps),
          "distribute.strategy=" + strategy,
          Devices("distribute.devices", devices)};
}

std::unique_ptr<Trainer> MakeTrainer(std::vector<std::string> overrides,
                                     const std::string& run_dir = "") {
  auto config = ParseConfig("", "strategies_test.yaml", overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  auto trainer = Trainer::Create(*config, run_dir, DataNeeds::kTrainAndTest);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// The latest checkpoint of a run directory, read back.
SafetensorsFile LatestCheckpoint(const std::string& run_dir) {
  auto path = trainer::LatestCheckpoint(run_dir + "/checkpoints");
  EXPECT_TRUE(path.ok()) << path.status();
  auto file = SafetensorsFile::Open(*path);
  EXPECT_TRUE(file.ok()) << file.status();
  return *std::move(file);
}

SafetensorsFile TrainToCheckpoint(std::vector<std::string> overrides,
                                  const std::string& run_dir) {
  std::unique_ptr<Trainer> t = MakeTrainer(std::move(overrides), run_dir);
  if (t == nullptr) std::abort();  // MakeTrainer reported why.
  absl::Status s = t->Train();
  EXPECT_TRUE(s.ok()) << s;
  return LatestCheckpoint(run_dir);
}

// Same names in the same order, dtypes and shapes; values within `rtol` of
// each other per tensor (relative L2), bitwise when rtol is 0.
void ExpectSameCheckpoint(const SafetensorsFile& a, const SafetensorsFile& b,
                          double rtol) {
  ASSERT_EQ(a.names(), b.names());
  ASSERT_GT(a.names().size(), 3u);
  for (const std::string& name : a.names()) {
    Tensor x = *a.Get(name), y = *b.Get(name);
    ASSERT_EQ(x.dtype(), y.dtype()) << name;
    ASSERT_EQ(x.shape(), y.shape()) << name;
    if (rtol == 0 || x.dtype() != DType::kF32) {
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.bytes()), 0) << name;
    } else {
      const testing::DiffAndNorm d = testing::L2DiffAndNorm(x, y);
      EXPECT_LE(d.diff, rtol * d.norm + 1e-12) << name;
    }
  }
}

TEST(CentralStorageTest, SameCheckpointsAsMirroredFor1And2And4Replicas) {
  for (int replicas : {1, 2, 4}) {
    SCOPED_TRACE(replicas);
    const std::string dir =
        testing::FreshTestDir("central" + std::to_string(replicas));
    SafetensorsFile mirrored = TrainToCheckpoint(
        SmallJob("mirrored", replicas, 30), dir + "/mirrored");
    SafetensorsFile central = TrainToCheckpoint(
        SmallJob("central_storage", replicas, 30), dir + "/central");
    ExpectSameCheckpoint(central, mirrored, 1e-6);
    EXPECT_EQ(central.metadata().at("step"), "30");
  }
}

TEST(CentralStorageTest, BatchNormMovingStatisticsKeptCentrally) {
  // The forward pass's own state (moving mean and variance) is written by
  // the replicas, not by the optimizer: it must reach the central copy.
  const std::string dir = testing::FreshTestDir("central_bn");
  std::vector<std::string> bn = {
      "model.layers=[{type: flatten}, {type: dense, units: 16}, "
      "{type: batch_normalization}, {type: activation, activation: relu}, "
      "{type: dense, units: 10}]"};
  auto with_bn = [&](std::vector<std::string> job) {
    std::erase_if(job, [](const std::string& s) {
      return s.starts_with("model.");  // Layers instead of the mlp preset.
    });
    job.insert(job.end(), bn.begin(), bn.end());
    return job;
  };
  std::vector<std::string> mirrored = with_bn(SmallJob("mirrored", 2, 20));
  std::vector<std::string> central =
      with_bn(SmallJob("central_storage", 2, 20));
  SafetensorsFile m = TrainToCheckpoint(mirrored, dir + "/mirrored");
  SafetensorsFile c = TrainToCheckpoint(central, dir + "/central");
  ExpectSameCheckpoint(c, m, 1e-6);
  bool has_moving_mean = false;
  for (const std::string& name : c.names()) {
    has_moving_mean |= absl::StrContains(name, "moving_mean");
  }
  EXPECT_TRUE(has_moving_mean);
}

TEST(CentralStorageTest, StateExistsOnceAndEvaluatesWithEma) {
  std::unique_ptr<Trainer> central =
      MakeTrainer(SmallJob("central_storage", 2, 20));
  std::unique_ptr<Trainer> mirrored = MakeTrainer(SmallJob("mirrored", 2, 20));
  ASSERT_TRUE(central->Train().ok());
  ASSERT_TRUE(mirrored->Train().ok());
  // The replicas hold models only; slots and shadows exist once.
  EXPECT_LT(central->ReplicaState(1).size(), central->TrainingState().size());
  EXPECT_EQ(central->TrainingState().size(), mirrored->ReplicaState(0).size());
  for (bool ema : {false, true}) {
    auto c = central->Evaluate(ema);
    auto m = mirrored->Evaluate(ema);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_NEAR(c->loss, m->loss, 1e-5) << ema;
    EXPECT_NEAR(c->metric, m->metric, 1e-9) << ema;
  }
  // EMA and raw weights differ, so the EMA evaluation did use the shadows.
  EXPECT_NE(central->Evaluate(true)->loss, central->Evaluate(false)->loss);
}

// The shipped CPU configs are mirrored on one device so that one key
// scales them; that costs nothing in the numbers.
TEST(MirroredTest, OneReplicaIsOneDeviceBitwise) {
  const std::string dir = testing::FreshTestDir("mirrored_one");
  SafetensorsFile one =
      TrainToCheckpoint(SmallJob("one_device", 1, 40), dir + "/one_device");
  SafetensorsFile mirrored =
      TrainToCheckpoint(SmallJob("mirrored", 1, 40), dir + "/mirrored");
  ExpectSameCheckpoint(mirrored, one, 0);
  EXPECT_EQ(mirrored.metadata().at("input_batch"),
            one.metadata().at("input_batch"));
}

TEST(ParameterServerTest, OneWorkerIsOneDeviceBitwise) {
  const std::string dir = testing::FreshTestDir("ps_one");
  SafetensorsFile one =
      TrainToCheckpoint(SmallJob("one_device", 1, 40), dir + "/one_device");
  // Two ps devices and small partitions: the 784x32 kernel is cut in two.
  std::vector<std::string> ps = SmallJob("parameter_server", 1, 40);
  ps.push_back("distribute.ps_devices=[cpu:0,cpu:1]");
  ps.push_back("distribute.ps_min_shard_bytes=1024");
  SafetensorsFile async = TrainToCheckpoint(ps, dir + "/ps");
  ExpectSameCheckpoint(async, one, 0);
  EXPECT_EQ(async.metadata().at("step"), "40");
  EXPECT_EQ(async.metadata().at("input_batch"),
            one.metadata().at("input_batch"));
}

TEST(ParameterServerTest, EveryPushAppliedExactlyOnceUnderContention) {
  std::vector<std::string> job = SmallJob("parameter_server", 8, 300);
  job.push_back("model.hidden_units=[8]");
  job.push_back("data.global_batch_size=4");
  job.push_back("distribute.ps_devices=[cpu:0,cpu:1,cpu:2]");
  job.push_back("distribute.ps_min_shard_bytes=256");
  const std::string dir = testing::FreshTestDir("ps_contention");
  std::unique_ptr<Trainer> t = MakeTrainer(job, dir);
  ASSERT_TRUE(t->Train().ok());
  EXPECT_EQ(t->global_step(), 300);
  int64_t pushed = 0;
  for (int64_t p : t->WorkerPushes()) pushed += p;
  EXPECT_EQ(pushed, 300);
  const std::vector<int64_t> updates = t->ParameterServerUpdates();
  ASSERT_EQ(updates.size(), 3u);
  for (int64_t u : updates) EXPECT_EQ(u, 300);
  // The staleness of every update reached metrics.jsonl.
  const std::string metrics = testing::ReadFile(dir + "/metrics.jsonl");
  EXPECT_TRUE(absl::StrContains(metrics, "\"staleness_histogram\": ["))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "\"staleness_max\": "));
}

TEST(ParameterServerTest, MaxStalenessHonoured) {
  for (int bound : {0, 2}) {
    std::vector<std::string> job = SmallJob("parameter_server", 4, 200);
    job.push_back("model.hidden_units=[8]");
    job.push_back("data.global_batch_size=4");
    job.push_back("distribute.max_staleness=" + std::to_string(bound));
    std::unique_ptr<Trainer> t = MakeTrainer(job);
    ASSERT_TRUE(t->Train().ok());
    EXPECT_EQ(t->global_step(), 200);
    EXPECT_LE(t->MaxStaleness(), bound);
  }
}

TEST(ParameterServerTest, CheckpointResumesAndEvaluates) {
  const std::string dir = testing::FreshTestDir("ps_resume");
  std::vector<std::string> first = SmallJob("parameter_server", 3, 40);
  first.push_back("distribute.ps_devices=[cpu:0,cpu:1]");
  first.push_back("checkpoint.every_steps=20");
  SafetensorsFile at40 = TrainToCheckpoint(first, dir);
  EXPECT_EQ(at40.metadata().at("step"), "40");
  // Same layout as one device's.
  const std::string one_dir = testing::FreshTestDir("ps_resume_one");
  SafetensorsFile one =
      TrainToCheckpoint(SmallJob("one_device", 1, 1), one_dir);
  EXPECT_EQ(at40.names(), one.names());

  std::vector<std::string> more = first;
  more.push_back("train.steps=70");
  std::unique_ptr<Trainer> resumed = MakeTrainer(more, dir);
  EXPECT_EQ(resumed->global_step(), 40);
  ASSERT_TRUE(resumed->Train().ok());
  EXPECT_EQ(resumed->global_step(), 70);
  EXPECT_EQ(LatestCheckpoint(dir).metadata().at("step"), "70");
  auto ema = resumed->Evaluate(true);
  ASSERT_TRUE(ema.ok()) << ema.status();
  EXPECT_EQ(ema->examples, 100);
}

// Each worker's input resumes where its applied updates left it, which a
// checkpoint records (worker_batches; before, every worker resumed at an
// equal share of the step, re-reading or skipping batches of the uneven
// ones).
TEST(ParameterServerTest, CheckpointsRecordEachWorkersBatchesAndResumeThere) {
  const std::string dir = testing::FreshTestDir("ps_worker_batches");
  std::vector<std::string> first = SmallJob("parameter_server", 3, 40);
  first.push_back("checkpoint.every_steps=20");
  std::unique_ptr<Trainer> t = MakeTrainer(first, dir);
  ASSERT_TRUE(t->Train().ok());
  const std::vector<int64_t> batches = t->WorkerBatches();
  ASSERT_EQ(batches.size(), 3u);
  int64_t read = 0;
  for (int64_t b : batches) read += b;
  EXPECT_EQ(read, 40);
  SafetensorsFile at40 = LatestCheckpoint(dir);
  EXPECT_EQ(at40.metadata().at("worker_batches"), absl::StrJoin(batches, ","));
  t.reset();  // Lets go of the run directory.

  std::vector<std::string> more = first;
  more.push_back("train.steps=70");
  std::unique_ptr<Trainer> resumed = MakeTrainer(more, dir);
  EXPECT_EQ(resumed->WorkerBatches(), batches);
  EXPECT_EQ(resumed->WorkerInputPositions(), batches);
  resumed.reset();
  // Uneven counts (one worker did all): each input resumes at its own, not
  // at an equal share.
  std::vector<NamedTensor> tensors;
  for (const std::string& name : at40.names()) {
    tensors.push_back({name, *at40.Get(name)});
  }
  std::map<std::string, std::string> metadata = at40.metadata();
  metadata["worker_batches"] = "40,0,0";
  const std::string uneven = dir + "/uneven.safetensors";
  ASSERT_TRUE(WriteSafetensors(uneven, tensors, metadata).ok());
  std::vector<std::string> from_uneven = more;
  from_uneven.push_back("checkpoint.restore=" + uneven);
  std::unique_ptr<Trainer> skewed =
      MakeTrainer(from_uneven, testing::FreshTestDir("ps_uneven"));
  ASSERT_NE(skewed, nullptr);
  EXPECT_EQ(skewed->WorkerInputPositions(), (std::vector<int64_t>{40, 0, 0}));
  skewed.reset();
  resumed = MakeTrainer(more, dir);
  ASSERT_TRUE(resumed->Train().ok());
  read = 0;
  for (int64_t b : resumed->WorkerBatches()) read += b;
  EXPECT_EQ(read, 70);
}

// A parameter_server run resumed from a run that accumulated two batches
// per step starts its workers after the batches that run read (20 in 10
// steps), not after 10.
TEST(ParameterServerTest, AResumeFromAnAccumulatingRunSkipsWhatItRead) {
  const std::string dir = testing::FreshTestDir("ps_from_accumulation");
  std::vector<std::string> accumulating = SmallJob("one_device", 1, 10);
  accumulating.push_back("train.accumulation_steps=2");
  TrainToCheckpoint(accumulating, dir);
  std::unique_ptr<Trainer> ps =
      MakeTrainer(SmallJob("parameter_server", 2, 20), dir);
  ASSERT_NE(ps, nullptr);
  EXPECT_EQ(ps->global_step(), 10);
  EXPECT_EQ(ps->WorkerBatches(), (std::vector<int64_t>{10, 10}));
}

TEST(ParameterServerTest, OneWorkerResumeIsBitwise) {
  // One worker reads one input stream, so a resume continues it exactly.
  const std::string dir = testing::FreshTestDir("ps_one_resume");
  std::vector<std::string> job = SmallJob("parameter_server", 1, 20);
  TrainToCheckpoint(job, dir + "/split");
  job.push_back("train.steps=40");
  SafetensorsFile resumed = TrainToCheckpoint(job, dir + "/split");
  SafetensorsFile straight = TrainToCheckpoint(job, dir + "/straight");
  ExpectSameCheckpoint(resumed, straight, 0);
}

}  // namespace
}  // namespace mirrortrain::trainer
