// Multi-process jobs (distribute/process_group.h) run by mpirun on this
// host's CPU (scripts/mpirun_local.sh): 2 processes x 1 replica train the
// same variables, bit for bit, as 1 process x 2 replicas; checkpoints
// resume across process counts; a config error is reported once; a killed
// or stalled process makes the job exit non-zero naming it; peers that
// disagree on a collective's size fail it (MpiProcessGroupTest, the group
// alone in mpi_group_probe). Skipped when the build has no MPI or mpirun
// is not installed.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "distribute/process_group.h"
#include "gtest/gtest.h"
#include "tests/trainer/cli_runner.h"
#include "trainer/checkpoint/saver.h"
#include "trainer/data/npy.h"

namespace mirrortrain {
namespace {

namespace fs = std::filesystem;

std::string Launcher() {
  return absl::StrCat(MT_SOURCE_DIR, "/scripts/mpirun_local.sh");
}

bool HaveMpirun() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin"}) {
    if (fs::exists(std::string(dir) + "/mpirun")) return true;
  }
  return false;
}

#define MT_SKIP_WITHOUT_MPI()                                         \
  do {                                                                \
    if (!distribute::MpiBuilt()) GTEST_SKIP() << "built without MPI"; \
    if (!HaveMpirun()) GTEST_SKIP() << "mpirun not installed";        \
  } while (0)

// `mpirun -np <processes> mirrortrain <args>`.
std::vector<std::string> MpiArgs(int processes,
                                 const std::vector<std::string>& args) {
  std::vector<std::string> all = {"-np", absl::StrCat(processes), Binary()};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

// The launcher with `launcher_args` (mpirun's own: -np, the program, ...).
Result RunLauncher(const std::vector<std::string>& launcher_args,
                   int timeout_seconds = 120) {
  static int calls = 0;
  const std::string prefix =
      absl::StrCat(::testing::TempDir(), "/mpi_", getpid(), "_", calls++);
  Result r;
  r.exit_code = Wait(StartProgram(Launcher(), launcher_args,
                                  prefix + "_out.txt", prefix + "_err.txt"),
                     timeout_seconds);
  r.out = ReadFile(prefix + "_out.txt");
  r.err = ReadFile(prefix + "_err.txt");
  return r;
}

Result RunMpi(int processes, const std::vector<std::string>& args,
              int timeout_seconds = 120) {
  return RunLauncher(MpiArgs(processes, args), timeout_seconds);
}

// The error lines the job printed (each starts "mirrortrain:").
int Reports(const std::string& err) {
  int reports = 0;
  for (const std::string& line : Lines(err)) {
    reports += absl::StartsWith(line, "mirrortrain:");
  }
  return reports;
}

// The small CLI job on `replicas` logical CPU devices per process.
std::vector<std::string> Job(const std::string& dir, int replicas,
                             std::vector<std::string> extra = {}) {
  std::string devices = "distribute.devices=[";
  for (int i = 0; i < replicas; ++i) {
    absl::StrAppend(&devices, i ? "," : "", "cpu:", i);
  }
  extra.push_back(devices + "]");
  extra.push_back("distribute.strategy=mirrored");
  extra.push_back("model.dropout=0.25");
  return SmallTrain(dir, std::move(extra));
}

// The train-split lines of metrics.jsonl without the timing.
std::vector<std::string> TrainLosses(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& line : Lines(ReadFile(dir + "/metrics.jsonl"))) {
    if (!absl::StrContains(line, "\"train\"")) continue;
    out.push_back(line.substr(0, line.find("\"learning_rate\"")));
  }
  return out;
}

std::string Ckpt(const std::string& dir, int step) {
  return absl::StrCat(dir, "/checkpoints/ckpt-", step, ".safetensors");
}

// 64 steps (2 epochs of 32) of the small job.
constexpr int kSteps = 64;

// With layers wide enough that the CPU kernels split a product over their
// threads (32 rows x 784 x 256 per replica), which they do by the thread
// count: the two processes on this host share its cores as the two
// replicas of one process do (they trained 2e-7 apart when each process
// took every core).
TEST(MpiTrainingTest, TwoProcessesEqualTwoReplicasInOneProcess) {
  MT_SKIP_WITHOUT_MPI();
  const std::string one = testing::FreshTestDir("one_process");
  const std::string two = testing::FreshTestDir("two_processes");
  const std::string check = "distribute.check_replicas_every_steps=1";
  const std::string wide = "model.hidden_units=[256]";
  Result a = RunCli(Job(one, 2, {check, wide}));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // Every step also compares each process's state with the chief's.
  Result b = RunMpi(2, Job(two, 1, {check, wide}));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  // Summed in the same order: bitwise equal variables, slots and EMA.
  ExpectSameTensors(Ckpt(one, kSteps), Ckpt(two, kSteps));
  EXPECT_EQ(TrainLosses(one), TrainLosses(two));
  // The chief alone wrote: one progress stream, one run directory.
  EXPECT_EQ(Lines(a.err).size(), Lines(b.err).size()) << b.err;
  // eval over two processes: the latest checkpoint of the directory, as
  // the chief resolves it, and the metrics of two replicas in one process.
  auto eval = [&wide](const std::string& dir, int replicas) {
    std::vector<std::string> args = Job(dir, replicas, {wide});
    args[0] = "eval";
    args.insert(args.begin() + 1, {"--checkpoint", dir + "/checkpoints"});
    // Job's --run_dir is train's.
    const auto run_dir = std::find(args.begin(), args.end(), "--run_dir");
    args.erase(run_dir, run_dir + 2);
    return args;
  };
  Result eval_one = RunCli(eval(one, 2));
  Result eval_two = RunMpi(2, eval(two, 1));
  ASSERT_EQ(eval_one.exit_code, 0) << eval_one.err;
  ASSERT_EQ(eval_two.exit_code, 0) << eval_two.err;
  EXPECT_TRUE(
      absl::StrContains(eval_two.out, absl::StrCat("\"step\": ", kSteps)))
      << eval_two.out;
  const auto metrics = [](const std::string& out) {
    return out.substr(out.find("\"step\""));
  };
  EXPECT_EQ(metrics(eval_two.out), metrics(eval_one.out));
}

// The cross-process replica check can fail: without communication the
// processes drift apart after the first step. Only the drifted process
// finds it; the processes agree on it, so it is reported once.
TEST(MpiTrainingTest, ReplicaCheckNamesAProcessThatDrifted) {
  MT_SKIP_WITHOUT_MPI();
  const std::string dir = testing::FreshTestDir("drift");
  std::vector<std::string> args =
      Job(dir, 1, {"distribute.check_replicas_every_steps=1"});
  args.insert(args.end(), {"--set", "distribute.cross_device_ops=none"});
  Result r = RunMpi(2, args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // The chief's warning about cross_device_ops=none, then the error.
  EXPECT_EQ(Reports(r.err), 2) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err,
      "mirrortrain: process 1: step 1: dense/kernel of process 1 "
      "differs from process 0's"))
      << r.err;
}

// A non-finite loss is the job's (every process has the agreed loss):
// reported once, by the chief, and every process exits 1 at that step.
TEST(MpiTrainingTest, NonFiniteLossIsReportedOnce) {
  MT_SKIP_WITHOUT_MPI();
  const std::string dir = testing::FreshTestDir("nan");
  Result r = RunMpi(2, Job(dir, 1, {"optimizer.learning_rate=1e30"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(Reports(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err,
                                "mirrortrain: non-finite loss (nan) at "
                                "step "))
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoints")) << r.err;
}

TEST(MpiTrainingTest, TwoByTwoMatchesFourReplicasWithinRounding) {
  MT_SKIP_WITHOUT_MPI();
  const std::string one = testing::FreshTestDir("four_replicas");
  const std::string two = testing::FreshTestDir("two_by_two");
  ASSERT_EQ(RunCli(Job(one, 4)).exit_code, 0);
  Result b = RunMpi(2, Job(two, 2));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto fa = trainer::SafetensorsFile::Open(Ckpt(one, kSteps));
  auto fb = trainer::SafetensorsFile::Open(Ckpt(two, kSteps));
  ASSERT_TRUE(fa.ok() && fb.ok());
  for (const std::string& name : fa->names()) {
    Tensor x = *fa->Get(name), y = *fb->Get(name);
    if (x.dtype() != DType::kF32) continue;
    // Partial sums per process: float rounding, not a different result.
    const testing::DiffAndNorm d = testing::L2DiffAndNorm(y, x);
    EXPECT_LE(d.diff, 1e-5 * d.norm + 1e-7) << name;
  }
}

TEST(MpiTrainingTest, CheckpointsResumeAcrossProcessCounts) {
  MT_SKIP_WITHOUT_MPI();
  const std::string ref = testing::FreshTestDir("uninterrupted");
  ASSERT_EQ(RunCli(Job(ref, 2)).exit_code, 0);
  // Half the run on 2 processes x 1 replica...
  const std::string half = testing::FreshTestDir("half");
  Result h = RunMpi(2, Job(half, 1, {"train.steps=32"}));
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const std::string saved = Ckpt(half, 32);
  // ...resumed as 1 x 2 and as 2 x 1: both equal the uninterrupted run.
  const std::string as_one = testing::FreshTestDir("resumed_1x2");
  Result r1 = RunCli(Job(as_one, 2, {"checkpoint.restore=" + saved}));
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  const std::string as_two = testing::FreshTestDir("resumed_2x1");
  Result r2 = RunMpi(2, Job(as_two, 1, {"checkpoint.restore=" + saved}));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_TRUE(absl::StrContains(r2.err, "restored " + saved)) << r2.err;
  ExpectSameTensors(Ckpt(ref, kSteps), Ckpt(as_one, kSteps));
  ExpectSameTensors(Ckpt(ref, kSteps), Ckpt(as_two, kSteps));
}

// checkpoint.warm_start_from: only the chief reads the file, and the other
// processes take its weights (a run that starts from the seed's would be
// a replica check's drift at step 1): 2 x 1 equals 1 x 2 bit for bit.
TEST(MpiTrainingTest, AWarmStartReachesEveryProcess) {
  MT_SKIP_WITHOUT_MPI();
  const std::string source = testing::FreshTestDir("warm_source");
  ASSERT_EQ(RunCli(Job(source, 1, {"train.steps=8"})).exit_code, 0);
  const std::vector<std::string> warm = {
      "train.steps=8", "distribute.check_replicas_every_steps=1",
      "checkpoint.warm_start_from=" + source};
  const std::string one = testing::FreshTestDir("warm_1x2");
  Result a = RunCli(Job(one, 2, warm));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string two = testing::FreshTestDir("warm_2x1");
  Result b = RunMpi(2, Job(two, 1, warm));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  ExpectSameTensors(Ckpt(one, 8), Ckpt(two, 8));
}

// Every process decides to stop from the same agreed evaluation: the job
// of two processes stops where one process with two replicas does, with
// the same weights; run again it is finished on every process, and with
// more patience every process goes on from the chief's restored state
// (only the chief reads the checkpoint) to the same stop and weights.
TEST(MpiTrainingTest, EarlyStoppingStopsEveryProcessAlike) {
  MT_SKIP_WITHOUT_MPI();
  std::vector<std::string> stop = {
      "train.eval_every_epochs=0", "train.eval_every_steps=10",
      "train.early_stopping_monitor=accuracy",
      "train.early_stopping_min_delta=0.9", "train.early_stopping_patience=1"};
  const std::string one = testing::FreshTestDir("early_stop_1x2");
  Result a = RunCli(Job(one, 2, stop));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string two = testing::FreshTestDir("early_stop_2x1");
  Result b = RunMpi(2, Job(two, 1, stop));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(absl::StrContains(b.err, "early stopping at step 20")) << b.err;
  EXPECT_FALSE(fs::exists(Ckpt(two, 30)));
  ExpectSameTensors(Ckpt(one, 20), Ckpt(two, 20));
  b = RunMpi(2, Job(two, 1, stop), 60);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(absl::StrContains(b.err, "this run ended by early stopping"))
      << b.err;
  EXPECT_FALSE(fs::exists(Ckpt(two, 30)));
  stop.back() = "train.early_stopping_patience=3";
  a = RunCli(Job(one, 2, stop));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  b = RunMpi(2, Job(two, 1, stop), 60);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(absl::StrContains(b.err, "early stopping at step 40")) << b.err;
  EXPECT_FALSE(fs::exists(Ckpt(two, 50)));
  ExpectSameTensors(Ckpt(one, 40), Ckpt(two, 40));
}

// predict under mpirun: every process computes, the chief writes what one
// process writes; a bad input is one exit 2 for the job, nothing written.
TEST(MpiTrainingTest, PredictWritesOnceWhatOneProcessWrites) {
  MT_SKIP_WITHOUT_MPI();
  const std::string dir = testing::FreshTestDir("mpi_predict");
  ASSERT_EQ(RunCli(Job(dir, 1, {"train.steps=8"})).exit_code, 0);
  std::string pixels(3 * 28 * 28, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<char>((i * 37) % 256);
  }
  testing::WriteBytes(dir + "/x.npy",
                      trainer::NpyHeaderBytes("|u1", {3, 28, 28}) + pixels);
  auto predict = [&](const std::string& input, const std::string& output) {
    return std::vector<std::string>{
        "predict", "--config", dir + "/config.yaml", "--checkpoint", dir,
        "--input", input,      "--output",           output};
  };
  ASSERT_EQ(RunCli(predict(dir + "/x.npy", dir + "/one.npy")).exit_code, 0);
  Result two = RunMpi(2, predict(dir + "/x.npy", dir + "/two.npy"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(Lines(two.out).size(), 1u) << two.out;
  EXPECT_EQ(ReadFile(dir + "/two.npy"), ReadFile(dir + "/one.npy"));
  Result bad = RunMpi(2, predict(dir + "/none.npy", dir + "/bad.npy"));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(Reports(bad.err), 1) << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/bad.npy"));
}

TEST(MpiTrainingTest, ConfigErrorIsReportedOnceAndExits2) {
  MT_SKIP_WITHOUT_MPI();
  const std::string dir = testing::FreshTestDir("bad_config");
  Result r = RunMpi(2, Job(dir, 1, {"optimizer.learning_rate=-1"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Reports(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "optimizer.learning_rate")) << r.err;
  // A strategy that cannot span processes is a config error too.
  std::vector<std::string> central = Job(dir, 1);
  central.insert(central.end(),
                 {"--set", "distribute.strategy=central_storage"});
  r = RunMpi(2, central);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "use mirrored")) << r.err;
  // An error only the chief finds (its restore; the others read no
  // checkpoint) is agreed before the next collective: reported once with
  // its own code, at once, not after the others' watchdog.
  const auto start = std::chrono::steady_clock::now();
  r = RunMpi(2, Job(dir, 1,
                    {"checkpoint.restore=" + dir + "/missing.safetensors",
                     "distribute.watchdog_seconds=30"}));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(seconds, 20) << r.err;
  EXPECT_EQ(Reports(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "missing.safetensors")) << r.err;
  // The chief's restore itself failing (a checkpoint of another width),
  // after the strategy's collectives.
  const std::string run = dir + "/wide";
  ASSERT_EQ(RunMpi(1, Job(run, 1, {"train.steps=2"})).exit_code, 0);
  r = RunMpi(
      2, Job(run, 1,
             {"model.hidden_units=[16]", "distribute.watchdog_seconds=30"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "in the checkpoint but [784,16]"))
      << r.err;
}

// Processes started with different configs (mpirun's MPMD form): refused
// before any other collective, naming the process, once, exit 2.
TEST(MpiTrainingTest, ProcessesOfDifferentConfigsAreRefused) {
  MT_SKIP_WITHOUT_MPI();
  const std::string dir = testing::FreshTestDir("mpmd");
  std::vector<std::string> args = MpiArgs(1, Job(dir, 1, {"seed=1"}));
  args.push_back(":");
  for (const std::string& a : MpiArgs(1, Job(dir, 1, {"seed=2"}))) {
    args.push_back(a);
  }
  const Result r = RunLauncher(args, 60);
  const std::string& err = r.err;
  EXPECT_EQ(r.exit_code, 2) << err;
  EXPECT_EQ(Reports(err), 1) << err;
  EXPECT_TRUE(absl::StrContains(
      err,
      "mirrortrain: process 1: the resolved config differs from process "
      "0's"))
      << err;
}

// The pid of rank `rank` among mpirun's children.
pid_t RankPid(pid_t mpirun, int rank) {
  const std::string wanted = absl::StrCat("OMPI_COMM_WORLD_RANK=", rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    pid_t parent = 0;
    if (!(stat >> pid >> comm >> state >> parent) || parent != mpirun) continue;
    const std::string env = ReadFile(entry.path() / "environ");
    for (const auto& var : absl::StrSplit(env, '\0')) {
      if (var == wanted) return std::stoi(name);
    }
  }
  return -1;
}

// Rank 1 gets `sig` once the job has saved a checkpoint; the job must end
// non-zero within the watchdog (3 s) plus start-up, naming process 1.
void ExpectFaultNamesProcess(int sig) {
  const std::string dir = testing::FreshTestDir("fault");
  const std::string prefix = dir + "_log";
  const pid_t mpirun = StartProgram(
      Launcher(),
      MpiArgs(2, Job(dir, 1,
                     {"train.epochs=500", "checkpoint.every_steps=8",
                      "distribute.watchdog_seconds=3"})),
      prefix + "_out.txt", prefix + "_err.txt");
  const std::string index = dir + "/checkpoints/checkpoint";
  for (int i = 0; i < 600 && ReadFile(index).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_t victim = RankPid(mpirun, 1);
  ASSERT_GT(victim, 0) << "rank 1 not found";
  const auto start = std::chrono::steady_clock::now();
  kill(victim, sig);
  const int code = Wait(mpirun, 60);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const std::string err = ReadFile(prefix + "_err.txt");
  EXPECT_NE(code, 0) << err;
  // Not the test's own timeout (60 s).
  EXPECT_LT(seconds, 3 + 10) << err;
  EXPECT_TRUE(absl::StrContains(err, "process 1 did not reach")) << err;
  EXPECT_TRUE(absl::StrContains(err, "step ")) << err;
  // The last checkpoint stays loadable.
  auto latest = trainer::LatestCheckpoint(dir + "/checkpoints");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_TRUE(trainer::SafetensorsFile::Open(*latest).ok());
}

// SIGTERM to mpirun reaches both processes: they stop after the same
// step, the chief checkpoints it, and each exits 143 (mpirun then 1).
TEST(MpiTrainingTest, SigtermToTheLauncherCheckpointsAndStops) {
  MT_SKIP_WITHOUT_MPI();
  const std::string dir = testing::FreshTestDir("sigterm");
  const std::string prefix = dir + "_log";
  const pid_t mpirun = StartProgram(
      Launcher(),
      MpiArgs(2, Job(dir, 1,
                     // Little output: a line per step kept the chief
                     // writing to mpirun, which stops reading as it tears
                     // the job down (seen here: SIGKILL 1 s later).
                     {"train.epochs=500", "checkpoint.every_steps=0",
                      "train.log_every_steps=100000",
                      "train.eval_every_epochs=0"})),
      prefix + "_out.txt", prefix + "_err.txt");
  // The chief writes config.yaml once its trainer is built.
  for (int i = 0; i < 600 && !fs::exists(dir + "/config.yaml"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(mpirun, SIGTERM);
  const int code = Wait(mpirun, 60);
  const std::string err = ReadFile(prefix + "_err.txt");
  EXPECT_NE(code, 0) << err;
  EXPECT_NE(code, 128 + SIGKILL) << err;
  const size_t stopped = err.find("stopped by signal after step ");
  ASSERT_NE(stopped, std::string::npos) << err;
  const std::string step =
      err.substr(stopped + 29, err.find('\n', stopped) - stopped - 29);
  EXPECT_TRUE(fs::exists(Ckpt(dir, std::stoi(step)))) << err;
  EXPECT_FALSE(absl::StrContains(err, "did not reach")) << err;
}

// Peers that disagree on a collective's size (a defect: their configs are
// checked alike) fail it naming the sender and both sizes, where a short
// message used to leave the rest of the buffer stale, silently. Process 1
// owns elements 4.. of the sum, so it receives process 0's elements 4..;
// process `nine` holds 9 elements, the other 8.
std::string ProbeLine(int nine, int rank) {
  const Result r = RunLauncher(
      {"-np", "2", absl::StrCat(MT_BINARY_DIR, "/bin/mpi_group_probe"),
       absl::StrCat(nine)});
  for (const std::string& line : Lines(r.out)) {
    if (absl::StartsWith(line, absl::StrCat("process ", rank, ": "))) {
      return line;
    }
  }
  ADD_FAILURE() << "no line of process " << rank << ":\n" << r.out << r.err;
  return "";
}

TEST(MpiProcessGroupTest, AShortMessageIsAnErrorNamingBothSizes) {
  MT_SKIP_WITHOUT_MPI();
  // Process 1 (9 elements) expects 5 of process 0's 8; 4 come.
  EXPECT_EQ(ProbeLine(1, 1),
            "process 1: INTERNAL: probe all-reduce: process 0 sent 16 bytes "
            "where process 1 expected 20");
}

TEST(MpiProcessGroupTest, ALongMessageIsAnErrorNamingTheSender) {
  MT_SKIP_WITHOUT_MPI();
  // Process 1 (8 elements) expects 4 of process 0's 9; 5 come.
  EXPECT_EQ(ProbeLine(0, 1),
            "process 1: INTERNAL: probe all-reduce: process 0 sent more than "
            "the 16 bytes process 1 expected");
}

TEST(MpiTrainingTest, KilledProcessMakesTheOtherExitNamingIt) {
  MT_SKIP_WITHOUT_MPI();
  ExpectFaultNamesProcess(SIGKILL);
}

TEST(MpiTrainingTest, StalledProcessMakesTheOtherExitNamingIt) {
  MT_SKIP_WITHOUT_MPI();
  ExpectFaultNamesProcess(SIGSTOP);
}

}  // namespace
}  // namespace mirrortrain
