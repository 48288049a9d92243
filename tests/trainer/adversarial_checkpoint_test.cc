// Adversarial end-to-end runs of the binary against its checkpoints and run
// directory: missing or replaced latest checkpoints, a deleted index, index
// entries leading outside, corrupt and inconsistent checkpoints, two
// trainers on one directory, a file where the checkpoint directory should
// be, signals during the final evaluation and SIGKILL during saves.
//
// The rule throughout: bad input exits 2 with one line, writes nothing and
// deletes nothing; a restore that cannot happen never becomes a fresh start.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/cli_runner.h"
#include "trainer/checkpoint/checkpoint_dir.h"
#include "trainer/checkpoint/checkpoint_format.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/saver.h"
#include "trainer/run_dir_lock.h"

namespace mirrortrain {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kStartOver[] =
    "(to start over, train into a new --run_dir with --set "
    "checkpoint.restore=none)";

// Every entry under `root`, links not followed: regular files with their
// bytes, links with their targets, anything else by its type; so comparing
// two snapshots shows anything written, deleted or replaced. Only regular
// files are opened (a FIFO would block). The lock file is left out: it
// records the pid of the last process that owned the directory.
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = fs::relative(it->path(), root).string();
    if (it->path().filename().string() == trainer::RunDirLock::kFileName) {
      continue;
    }
    const fs::file_type type = it->symlink_status().type();
    if (type == fs::file_type::regular) {
      out[rel] = "file:" + ReadFile(it->path().string());
    } else if (type == fs::file_type::symlink) {
      out[rel] = "link:" + fs::read_symlink(it->path()).string();
    } else {
      out[rel] = absl::StrCat("type:", static_cast<int>(type));
    }
  }
  return out;
}

// Whether `root` still looks as `before` (a Snapshot) did.
::testing::AssertionResult Unchanged(
    const std::map<std::string, std::string>& before, const std::string& root) {
  const std::map<std::string, std::string> after = Snapshot(root);
  if (after == before) return ::testing::AssertionSuccess();
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  failure << root << " changed:";
  for (const auto& [name, content] : before) {
    auto it = after.find(name);
    if (it == after.end()) failure << " removed " << name << ";";
    if (it != after.end() && it->second != content) {
      failure << " rewrote " << name << ";";
    }
  }
  for (const auto& [name, unused] : after) {
    if (!before.contains(name)) failure << " added " << name << ";";
  }
  return failure;
}

// Exit 2 with one line holding every one of `wanted`.
void ExpectUsageError(const Result& r, const std::vector<std::string>& wanted) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  for (const std::string& w : wanted) {
    EXPECT_THAT(r.err, HasSubstr(w));
  }
}

Result Eval(const std::string& checkpoint, std::vector<std::string> sets = {}) {
  std::vector<std::string> args = {"eval",
                                   "--config",
                                   Config(),
                                   "--checkpoint",
                                   checkpoint,
                                   "--set",
                                   "model.hidden_units=[32]",
                                   "--set",
                                   "data.test_examples=500"};
  for (std::string& s : sets) {
    args.push_back("--set");
    args.push_back(std::move(s));
  }
  return RunCli(args);
}

class AdversarialCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("adversarial_ckpt");
    run_ = root_ + "/run";
    ckpts_ = run_ + "/checkpoints";
  }
  void TearDown() override { fs::remove_all(root_); }

  // One epoch of the small job: ckpt-16 and ckpt-32, the latter latest.
  void TrainOneEpoch() {
    Result r = RunCli(SmallTrain(run_, {"train.epochs=1"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(fs::exists(Ckpt(32)));
  }
  std::string Ckpt(int step) const {
    return ckpts_ + "/" + trainer::CheckpointFileName(step);
  }

  std::string root_, run_, ckpts_;
};

// The latest checkpoint gone or replaced by something that is not one:
// train refuses (never trains from step 0 over the older checkpoints) and
// so does eval.
TEST_F(AdversarialCheckpointTest, MissingLatestNeverStartsOver) {
  TrainOneEpoch();
  const std::string kept = root_ + "/kept.safetensors";
  fs::rename(Ckpt(32), kept);
  struct Case {
    std::function<void()> make;
    std::string what;
  };
  const std::vector<Case> cases = {
      {[] {}, "does not exist"},
      {[&] { fs::create_directory(Ckpt(32)); }, "is a directory"},
      {[&] { ASSERT_EQ(::mkfifo(Ckpt(32).c_str(), 0644), 0); }, "is a FIFO"},
      {[&] { fs::create_symlink(root_ + "/nothing", Ckpt(32)); },
       "is a symbolic link"},
      // Even a link to a valid checkpoint: it leads outside the directory.
      {[&] { fs::create_symlink(kept, Ckpt(32)); }, "is a symbolic link"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(Ckpt(32));
    c.make();
    const auto before = Snapshot(run_);
    const std::string names =
        "checkpoints/checkpoint names "
        "'ckpt-32.safetensors' as the latest checkpoint";
    ExpectUsageError(RunCli(SmallTrain(run_)),
                     {names, Ckpt(32) + " " + c.what, kStartOver});
    EXPECT_TRUE(Unchanged(before, run_));
    ExpectUsageError(Eval(ckpts_), {names, c.what});
  }
}

TEST_F(AdversarialCheckpointTest, DeletedIndexNeverStartsOver) {
  TrainOneEpoch();
  fs::remove(ckpts_ + "/checkpoint");
  const auto before = Snapshot(run_);
  ExpectUsageError(RunCli(SmallTrain(run_)),
                   {ckpts_ + " holds ckpt-16.safetensors and 1 more "
                             "checkpoints but no 'checkpoint' index",
                    kStartOver});
  EXPECT_TRUE(Unchanged(before, run_));
  ExpectUsageError(Eval(ckpts_), {"no checkpoint found"});
}

// An index entry with an escaped newline names a file that does not
// exist; the error quotes it escaped again, on one line.
TEST_F(AdversarialCheckpointTest, AnIndexPathWithANewlineStaysOneLine) {
  TrainOneEpoch();
  std::ofstream(ckpts_ + "/checkpoint", std::ios::trunc)
      << "model_checkpoint_path: \"ckpt-32.safetensors\\nx\"\n";
  const std::string want =
      "names 'ckpt-32.safetensors\\nx' as the latest checkpoint";
  ExpectUsageError(Eval(ckpts_), {want});
  ExpectUsageError(RunCli(SmallTrain(run_)), {want});
}

// Index entries that lead outside the checkpoint directory: rejected by
// train (whose pruning would otherwise delete them) and eval; the files
// they name survive.
TEST_F(AdversarialCheckpointTest, IndexEntriesOutsideAreNeverDeleted) {
  TrainOneEpoch();
  const std::string victim = root_ + "/victim.safetensors";
  fs::copy_file(Ckpt(16), victim);
  for (const std::string& entry :
       {victim, std::string("../../victim.safetensors")}) {
    SCOPED_TRACE(entry);
    std::ofstream(ckpts_ + "/checkpoint", std::ios::trunc)
        << "model_checkpoint_path: \"ckpt-32.safetensors\"\n"
        << "all_model_checkpoint_paths: \"" << entry << "\"\n"
        << "all_model_checkpoint_paths: \"ckpt-32.safetensors\"\n";
    const auto before = Snapshot(root_);
    ExpectUsageError(
        RunCli(SmallTrain(run_, {"checkpoint.max_to_keep=1"})),
        {"checkpoints/checkpoint:2: '" + entry +
             "' is not a file name inside the checkpoint directory",
         kStartOver});
    EXPECT_TRUE(Unchanged(before, root_));
    ExpectUsageError(Eval(ckpts_), {"is not a file name inside"});
  }
}

// A kept entry that became a link to a file outside: pruning drops it from
// the index but deletes neither the link nor its target.
TEST_F(AdversarialCheckpointTest, PruningLeavesLinksAlone) {
  TrainOneEpoch();
  const std::string victim = root_ + "/victim.txt";
  std::ofstream(victim) << "precious";
  fs::remove(Ckpt(16));
  fs::create_symlink(victim, Ckpt(16));
  Result r = RunCli(SmallTrain(run_, {"checkpoint.max_to_keep=1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(Ckpt(16)));
  EXPECT_EQ(ReadFile(victim), "precious");
  EXPECT_THAT(*trainer::ListCheckpoints(ckpts_),
              ::testing::ElementsAre(Ckpt(64)));
}

// A run that does not continue the one in the directory may not save over
// its checkpoints; restoring one of its own checkpoints is a continuation.
TEST_F(AdversarialCheckpointTest, OnlyAContinuationTrainsInARunDirectory) {
  TrainOneEpoch();
  const std::string other = root_ + "/other";
  ASSERT_EQ(RunCli(SmallTrain(other, {"train.epochs=1"})).exit_code, 0);
  const auto before = Snapshot(run_);
  for (const std::string& restore :
       {std::string("none"), other + "/checkpoints",
        other + "/checkpoints/ckpt-16.safetensors"}) {
    SCOPED_TRACE(restore);
    ExpectUsageError(
        RunCli(SmallTrain(run_, {"checkpoint.restore=" + restore})),
        {run_ + " holds the checkpoints of a run", kStartOver});
    EXPECT_TRUE(Unchanged(before, run_));
  }
  // A path that is not there is named as the key; a keyword in another
  // case reads as a path, and is said to be one.
  for (const std::string& restore : {std::string("Latest"), other + "/nope"}) {
    SCOPED_TRACE(restore);
    const std::string fresh = root_ + "/typo";
    ExpectUsageError(
        RunCli(SmallTrain(fresh, {"checkpoint.restore=" + restore})),
        {"checkpoint.restore: " + restore +
             ": no such checkpoint file or directory" +
             (restore == "Latest"
                  ? " (the keywords are lower case: latest, none)"
                  : ""),
         kStartOver});
    EXPECT_FALSE(fs::exists(fresh));
  }
  // Into a new directory the same restores are fine.
  Result r = RunCli(SmallTrain(
      root_ + "/fresh",
      {"checkpoint.restore=" + other + "/checkpoints", "train.epochs=1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCli(
      SmallTrain(run_, {"checkpoint.restore=" + Ckpt(16), "train.epochs=1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("restored " + Ckpt(16) + " at step 16"));
}

// Writes `out`: the checkpoint `in` with `edit` applied to its tensors and
// metadata; the data checksum is recomputed unless `edit` removed it.
using CheckpointEdit = std::function<void(std::vector<trainer::NamedTensor>&,
                                          std::map<std::string, std::string>&)>;
void RewriteCheckpoint(const std::string& in, const std::string& out,
                       const CheckpointEdit& edit) {
  absl::StatusOr<trainer::SafetensorsFile> file =
      trainer::SafetensorsFile::Open(in);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<trainer::NamedTensor> tensors;
  for (const std::string& name : file->names()) {
    tensors.push_back({name, *file->Get(name)});
  }
  std::map<std::string, std::string> metadata = file->metadata();
  edit(tensors, metadata);
  const std::string key(trainer::kDataCrc32cKey);
  if (metadata.contains(key)) {
    metadata[key] = *trainer::TensorDataCrc32c(tensors);
  }
  ASSERT_TRUE(trainer::WriteSafetensors(out, tensors, metadata).ok());
}

void SetStep(std::vector<trainer::NamedTensor>& tensors,
             std::map<std::string, std::string>& metadata, int64_t step) {
  metadata["step"] = absl::StrCat(step);
  for (trainer::NamedTensor& t : tensors) {
    if (t.name == "global_step") t.tensor = Tensor::Scalar<int64_t>(step);
  }
}

void SetFirst(std::vector<trainer::NamedTensor>& tensors,
              const std::string& name, float value) {
  for (trainer::NamedTensor& t : tensors) {
    if (t.name == name) *t.tensor.data<float>() = value;
  }
}

struct BadCheckpointCase {
  std::string label;
  CheckpointEdit edit;  // Null: flip the last data byte instead.
  std::string reason;
};

// Corrupt or inconsistent checkpoints: eval and a train that restores one
// exit 2 naming the problem, and the train writes nothing (its new run
// directory is not even created).
TEST_F(AdversarialCheckpointTest, CorruptOrInconsistentCheckpointsExit2) {
  TrainOneEpoch();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadCheckpointCase> cases = {
      {"flipped data byte", nullptr,
       "the tensor data does not match its checksum"},
      {"step unlike global_step", [](auto&, auto& m) { m["step"] = "5"; },
       "metadata 'step' is 5 but the 'global_step' tensor holds 32"},
      {"negative step", [](auto& t, auto& m) { SetStep(t, m, -7); },
       "metadata 'step' is -7, outside [0, 9007199254740992]"},
      {"absurd step",
       [](auto& t, auto& m) {
         SetStep(t, m, std::numeric_limits<int64_t>::max());
       },
       "metadata 'step' is 9223372036854775807, outside"},
      {"unknown format", [](auto&, auto& m) { m["format"] = "mirrortrain/99"; },
       "unknown checkpoint format 'mirrortrain/99'"},
      {"NaN weight", [&](auto& t, auto&) { SetFirst(t, "dense/kernel", nan); },
       "'dense/kernel' holds 1 NaN or infinite of 25088 values; set "
       "checkpoint.allow_non_finite=true"},
      {"infinite EMA shadow",
       [&](auto& t, auto&) {
         SetFirst(t, "dense_1/bias/ExponentialMovingAverage", -inf);
       },
       "'dense_1/bias/ExponentialMovingAverage' holds 1 NaN or infinite"},
  };
  for (const BadCheckpointCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string bad = root_ + "/bad.safetensors";
    if (c.edit) {
      RewriteCheckpoint(Ckpt(32), bad, c.edit);
    } else {
      std::string bytes = ReadFile(Ckpt(32));
      bytes.back() ^= 0x10;
      std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes;
    }
    ExpectUsageError(Eval(bad), {bad + ": " + c.reason});
    const std::string fresh = root_ + "/fresh";
    ExpectUsageError(RunCli(SmallTrain(fresh, {"checkpoint.restore=" + bad})),
                     {bad + ": " + c.reason, kStartOver});
    EXPECT_FALSE(fs::exists(fresh));
  }
  // Asked for, non-finite values load.
  const std::string nan_file = root_ + "/nan.safetensors";
  RewriteCheckpoint(Ckpt(32), nan_file,
                    [&](auto& t, auto&) { SetFirst(t, "dense/kernel", nan); });
  Result r = Eval(nan_file, {"checkpoint.allow_non_finite=true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A state that went non-finite in the last update (after the last loss
// was checked: here its learning rate overflows f32) is not saved, since
// restoring would refuse it: exit 1 naming the tensor, the checkpoint
// before it kept as the latest.
TEST_F(AdversarialCheckpointTest, ANonFiniteStateIsNotSaved) {
  Result r = RunCli(SmallTrain(
      run_, {"train.steps=17",
             "optimizer.schedule={name: exponential_decay, decay_rate: 1e300, "
             "decay_steps: 16, staircase: true}"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the state after step 17 is not finite: "
                               "'dense/kernel' holds"));
  EXPECT_THAT(r.err, HasSubstr("set checkpoint.allow_non_finite=true to "
                               "save it anyway"));
  EXPECT_TRUE(fs::exists(Ckpt(16)));
  EXPECT_FALSE(fs::exists(Ckpt(17)));
  // Nor is it evaluated: no test record for weights the run refuses (the
  // final evaluation logged a NaN loss for them before).
  EXPECT_THAT(r.err, Not(HasSubstr("eval step 17")));
  for (absl::string_view line :
       absl::StrSplit(ReadFile(run_ + "/metrics.jsonl"), '\n')) {
    EXPECT_FALSE(absl::StrContains(line, "\"step\": 17,") &&
                 absl::StrContains(line, "test"))
        << line;
  }
  ASSERT_EQ(Eval(ckpts_).exit_code, 0);
}

// The damaged latest of a run directory: train refuses to resume from it
// (and does not start over) and leaves the directory as it was.
TEST_F(AdversarialCheckpointTest, CorruptLatestBlocksResume) {
  TrainOneEpoch();
  std::string bytes = ReadFile(Ckpt(32));
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(Ckpt(32), std::ios::binary | std::ios::trunc) << bytes;
  const auto before = Snapshot(run_);
  ExpectUsageError(
      RunCli(SmallTrain(run_)),
      {Ckpt(32) + ": the tensor data does not match its checksum", kStartOver});
  EXPECT_TRUE(Unchanged(before, run_));
}

// Checkpoints written before the checksum existed (mirrortrain/1) still
// load.
TEST_F(AdversarialCheckpointTest, VersionOneCheckpointsStillLoad) {
  TrainOneEpoch();
  const std::string old = root_ + "/old.safetensors";
  RewriteCheckpoint(Ckpt(32), old, [](auto&, auto& m) {
    m["format"] = "mirrortrain/1";
    m.erase(std::string(trainer::kDataCrc32cKey));
  });
  Result r = Eval(old);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"step\": 32"));
}

TEST_F(AdversarialCheckpointTest, CheckpointsAFileIsFoundBeforeTraining) {
  fs::create_directories(run_);
  std::ofstream(ckpts_) << "not a directory";
  const auto before = Snapshot(run_);
  ExpectUsageError(RunCli(SmallTrain(run_)),
                   {ckpts_ + " is a regular file, not a directory for "
                             "checkpoints"});
  EXPECT_TRUE(Unchanged(before, run_));
}

// A checkpoint directory a save could not write into fails before the
// first step, not at the first save: here a run directory whose path is
// too long for the largest step's temporary file, though not for the run's
// other files. Nothing is left on disk.
TEST_F(AdversarialCheckpointTest, UnwritableCheckpointsFailBeforeTraining) {
  std::string deep = root_;
  while (deep.size() + 51 <= 3900) deep += "/" + std::string(50, 'd');
  const std::string run = deep + "/" + std::string(4060 - deep.size() - 1, 'r');
  ASSERT_EQ(run.size(), 4060u);
  fs::create_directories(deep);
  const auto before = Snapshot(root_);
  Result r = RunCli(SmallTrain(run, {"train.epochs=1"}));
  ExpectUsageError(r, {run + "/checkpoints: a checkpoint cannot be written "
                             "there",
                       "File name too long"});
  EXPECT_THAT(r.err, Not(HasSubstr("step")));
  EXPECT_TRUE(Unchanged(before, root_));
}

// A run resumed with another data.global_batch_size goes on at the next
// example it has not read (examples come in the same order whatever the
// batch size), or refuses where the new size cannot start there.
TEST_F(AdversarialCheckpointTest, ResumingWithAnotherBatchSizeKeepsTheInput) {
  // ckpt-16: 16 batches of 64 of epoch 0 read, 1024 examples.
  Result first = RunCli(SmallTrain(run_, {"train.steps=16"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto before = Snapshot(root_);
  ExpectUsageError(
      RunCli(SmallTrain(run_, {"train.steps=17", "data.global_batch_size=96"})),
      {Ckpt(16) + ": the run has read 16 batches of 64 examples of epoch 0; "
                  "data.global_batch_size: 96 does not divide them"});
  EXPECT_TRUE(Unchanged(before, root_));
  Result wider = RunCli(
      SmallTrain(run_, {"train.steps=17", "data.global_batch_size=128"}));
  ASSERT_EQ(wider.exit_code, 0) << wider.err;
  // Step 17 read examples 1024-1151, batch 8 of 128: next is batch 9.
  absl::StatusOr<trainer::SafetensorsFile> file =
      trainer::SafetensorsFile::Open(Ckpt(17));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("input_epoch"), "0");
  EXPECT_EQ(file->metadata().at("input_batch"), "9");
  EXPECT_EQ(file->metadata().at("input_batch_size"), "128");
}

// Asynchronous workers resume at their share of the updates, counted in
// batches: with another batch size they would start at other examples
// (one worker at twice the size resumed twice as far), so it is refused.
TEST_F(AdversarialCheckpointTest, ParameterServersResumeOnlyAtTheirBatchSize) {
  const std::vector<std::string> ps = {"distribute.strategy=parameter_server",
                                       "train.steps=4"};
  Result first = RunCli(SmallTrain(run_, ps));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto before = Snapshot(root_);
  std::vector<std::string> wider = ps;
  wider.back() = "train.steps=5";
  wider.push_back("data.global_batch_size=128");
  ExpectUsageError(RunCli(SmallTrain(run_, wider)),
                   {Ckpt(4) + ": written with data.global_batch_size: 64; "
                              "parameter_server workers resume only with "
                              "that size (got 128)"});
  EXPECT_TRUE(Unchanged(before, root_));
  wider.pop_back();
  Result same = RunCli(SmallTrain(run_, wider));
  EXPECT_EQ(same.exit_code, 0) << same.err;
}

// A parameter_server checkpoint's worker_batches (each worker's applied
// batches) is decimal counts, each and their sum at most 2^53: a value past
// it overflowed the next save's input position into a checkpoint the run
// could not restore (helper-81).
TEST_F(AdversarialCheckpointTest, TamperedWorkerBatchesExit2) {
  const std::vector<std::string> ps = {"distribute.strategy=parameter_server",
                                       "distribute.devices=[cpu:0,cpu:1]",
                                       "train.steps=4"};
  Result first = RunCli(SmallTrain(run_, ps));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const char* value :
       {"9223372036854775807,0", "9007199254740992,1", " 2,2", "2,x", ""}) {
    SCOPED_TRACE(value);
    const std::string bad = root_ + "/bad.safetensors";
    RewriteCheckpoint(Ckpt(4), bad,
                      [&](auto&, auto& m) { m["worker_batches"] = value; });
    const std::string fresh = root_ + "/fresh";
    std::vector<std::string> resume = ps;
    resume.push_back("checkpoint.restore=" + bad);
    ExpectUsageError(
        RunCli(SmallTrain(fresh, resume)),
        {bad + ": metadata worker_batches '" + value +
         "' is not a count of batches per worker (decimal, adding up to at "
         "most 9007199254740992)"});
    EXPECT_FALSE(fs::exists(fresh));
  }
  // Counts that do not add up to the batches the input position read.
  const std::string bad = root_ + "/bad.safetensors";
  RewriteCheckpoint(Ckpt(4), bad,
                    [&](auto&, auto& m) { m["worker_batches"] = "1,1"; });
  std::vector<std::string> resume = ps;
  resume.push_back("checkpoint.restore=" + bad);
  ExpectUsageError(RunCli(SmallTrain(root_ + "/fresh", resume)),
                   {bad + ": metadata worker_batches '1,1' do not add up to "
                          "the 4 batches its input position says were read"});
}

// Two trainers on one run directory: the second exits 2 at once naming the
// first's pid; once the first is gone the directory is free.
TEST_F(AdversarialCheckpointTest, SecondTrainerOnARunDirectoryExits2) {
  const std::string tmp = root_ + "/first";
  const pid_t first =
      Start(SmallTrain(run_, {"train.epochs=200", "checkpoint.every_steps=0"}),
            tmp + "_out", tmp + "_err");
  for (int i = 0; i < 600 && ReadFile(run_ + "/metrics.jsonl").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Result second = RunCli(SmallTrain(run_, {"train.epochs=1"}));
  ExpectUsageError(second, {run_ +
                            " is in use by another mirrortrain process "
                            "(pid " +
                            absl::StrCat(first) + ","});
  kill(first, SIGINT);
  EXPECT_EQ(Wait(first), 130) << ReadFile(tmp + "_err");
  Result third = RunCli(SmallTrain(run_, {"train.epochs=1"}));
  EXPECT_EQ(third.exit_code, 0) << third.err;
}

struct SignalCase {
  int signal;
  int exit_code;
};

class SignalDuringFinalEvalTest
    : public AdversarialCheckpointTest,
      public ::testing::WithParamInterface<SignalCase> {};

// A signal that arrives during the last evaluation (after the last step)
// ends the run as any stop signal does: a checkpoint, then 128 + signal.
// The evaluation of 10000 examples through a wide MLP takes long enough to
// be hit reliably once the last step's train line is logged.
TEST_P(SignalDuringFinalEvalTest, ExitsWithTheSignalAfterACheckpoint) {
  const std::string tmp = root_ + "/sig";
  const pid_t pid = Start(
      {"train", "--config", Config(), "--run_dir", run_, "--set",
       "data.train_examples=256", "--set", "data.global_batch_size=32", "--set",
       "model.hidden_units=[1024,1024]", "--set", "train.steps=2", "--set",
       "train.log_every_steps=1", "--set", "checkpoint.every_steps=0"},
      tmp + "_out", tmp + "_err");
  for (int i = 0;
       i < 6000 && ReadFile(run_ + "/metrics.jsonl").find("\"step\": 2,") ==
                       std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, GetParam().signal);
  EXPECT_EQ(Wait(pid), GetParam().exit_code) << ReadFile(tmp + "_err");
  EXPECT_THAT(ReadFile(tmp + "_err"),
              HasSubstr("stopped by signal after step 2"));
  absl::StatusOr<std::string> latest = trainer::LatestCheckpoint(ckpts_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, Ckpt(2));
}

INSTANTIATE_TEST_SUITE_P(Signals, SignalDuringFinalEvalTest,
                         ::testing::Values(SignalCase{SIGTERM, 143},
                                           SignalCase{SIGINT, 130},
                                           SignalCase{SIGHUP, 129},
                                           SignalCase{SIGPIPE, 141}),
                         [](const auto& info) {
                           return std::string(sigabbrev_np(info.param.signal));
                         });

// Progress lines into a pipe whose reader is gone (`train | head -1`, a
// killed tee): the write raises SIGPIPE, again at every line, and the run
// stops as for SIGTERM: a checkpoint of the step it finished, exit 141.
TEST_F(AdversarialCheckpointTest, AClosedOutputPipeStopsTheRunWithACheckpoint) {
  std::vector<std::string> args =
      SmallTrain(run_, {"train.epochs=200", "checkpoint.every_steps=0",
                        "train.log_every_steps=1"});
  std::vector<char*> argv;
  std::string binary = Binary();
  argv.push_back(binary.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);  // No reader: every write to the pipe fails.
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(Wait(pid, 120), 141);
  absl::StatusOr<std::string> latest = trainer::LatestCheckpoint(ckpts_);
  ASSERT_TRUE(latest.ok()) << latest.status();
}

// A run directory deleted while the run trains (an `rm -rf` of runs
// thought finished): the next save stops the run, exit 1 naming it, rather
// than making a new directory that no lock guards, with checkpoints but no
// config. The delete falls between saves 400 steps apart.
TEST_F(AdversarialCheckpointTest, ARunDirectoryDeletedMidRunStopsTheRun) {
  const std::string index = ckpts_ + "/checkpoint";
  const std::string tmp = root_ + "/deleted";
  const pid_t pid =
      Start(SmallTrain(run_, {"train.epochs=200", "checkpoint.every_steps=400",
                              "train.log_every_steps=1000"}),
            tmp + "_out", tmp + "_err");
  for (int i = 0; i < 30000 && !fs::exists(index); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(fs::exists(index)) << ReadFile(tmp + "_err");
  fs::remove_all(run_);
  EXPECT_EQ(Wait(pid, 120), 1) << ReadFile(tmp + "_err");
  EXPECT_THAT(ReadFile(tmp + "_err"),
              HasSubstr(run_ + ": the run directory was deleted, moved or "
                               "replaced while this run held it"));
  EXPECT_FALSE(fs::exists(run_));
}

// SIGKILL at moments that often fall inside a save (one per step): after
// every kill the latest checkpoint loads and passes every check, and the
// next run cleans up what the interrupted saves left (temporaries,
// checkpoints renamed into place but never indexed, pruned but not yet
// deleted), and only that. Planted leftovers make the cleanup certain to
// be exercised whatever moments the kills hit.
TEST_F(AdversarialCheckpointTest, SigkillDuringSavesLeavesLoadableAndClean) {
  const std::vector<std::string> job = {
      "train.epochs=1", "checkpoint.every_steps=1", "checkpoint.max_to_keep=2",
      "model.hidden_units=[128]", "train.eval_every_epochs=0"};
  const std::string index = ckpts_ + "/checkpoint";
  const std::string tmp = root_ + "/kill";
  int kills = 0, leftovers_seen = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string before = ReadFile(index);
    const pid_t pid = Start(SmallTrain(run_, job), tmp + "_out", tmp + "_err");
    // Until this run's first save (up to 60 s: a sanitizer build starts
    // slowly), so every kill falls after a checkpoint exists.
    for (int i = 0; i < 30000 && ReadFile(index) == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + 3 * attempt));
    kill(pid, SIGKILL);
    const int code = Wait(pid);
    if (code == 0) break;  // Finished before the kill.
    ASSERT_EQ(code, 128 + SIGKILL) << ReadFile(tmp + "_err");
    ++kills;
    absl::StatusOr<std::string> latest = trainer::LatestCheckpoint(ckpts_);
    ASSERT_TRUE(latest.ok()) << latest.status();
    absl::StatusOr<trainer::SafetensorsFile> file =
        trainer::SafetensorsFile::Open(*latest);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_TRUE(trainer::CheckTrainingCheckpoint(*file, false).ok());
    absl::StatusOr<trainer::CheckpointDirContents> contents =
        trainer::ScanCheckpointDir(ckpts_);
    ASSERT_TRUE(contents.ok());
    leftovers_seen += static_cast<int>(
        contents->temporaries.size() + contents->checkpoints.size() -
        trainer::ListCheckpoints(ckpts_)->size());
  }
  EXPECT_GE(kills, 1);
  RecordProperty("kills", kills);
  RecordProperty("leftovers_seen", leftovers_seen);

  std::ofstream(ckpts_ + "/ckpt-30.safetensors.tmp.4242") << "partial";
  std::ofstream(ckpts_ + "/checkpoint.tmp.4242") << "partial";
  fs::copy_file(*trainer::LatestCheckpoint(ckpts_), Ckpt(1));
  // Not ours: other names, a link, a directory, a file outside.
  std::ofstream(ckpts_ + "/notes.txt") << "mine";
  std::ofstream(root_ + "/outside.safetensors") << "mine";
  fs::create_symlink(root_ + "/outside.safetensors", Ckpt(1000));
  fs::create_directory(ckpts_ + "/ckpt-2000.safetensors.tmp.1");

  Result last = RunCli(SmallTrain(run_, job));
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_THAT(last.err, HasSubstr("interrupted saves left in " + ckpts_));
  EXPECT_THAT(testing::SortedDirEntries(ckpts_),
              ::testing::ElementsAre("checkpoint", "ckpt-1000.safetensors",
                                     "ckpt-2000.safetensors.tmp.1",
                                     "ckpt-31.safetensors",
                                     "ckpt-32.safetensors", "notes.txt"));
  EXPECT_EQ(ReadFile(root_ + "/outside.safetensors"), "mine");
}

}  // namespace
}  // namespace mirrortrain
