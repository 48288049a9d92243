// Runs the mirrortrain binary of this build as a child process, for the
// end-to-end CLI tests, and the small training job they share. Header-only;
// each test binary includes it.
#ifndef MIRRORTRAIN_TESTS_TRAINER_CLI_RUNNER_H_
#define MIRRORTRAIN_TESTS_TRAINER_CLI_RUNNER_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/safetensors.h"

namespace mirrortrain {

struct Result {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// StrCat, not string + literal: GCC 12 at -O1 warns (-Warray-bounds, a
// known false positive) on the inlined operator+.
inline std::string Binary() {
  return absl::StrCat(MT_BINARY_DIR, "/bin/mirrortrain");
}

using testing::ReadFile;

// Starts `program` with `args`, stdout/stderr to files; returns the pid.
inline pid_t StartProgram(const std::string& program,
                          const std::vector<std::string>& args,
                          const std::string& out, const std::string& err) {
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv;
    std::string bin = program;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Starts the binary with `args`, stdout/stderr to files; returns the pid.
inline pid_t Start(const std::vector<std::string>& args, const std::string& out,
                   const std::string& err) {
  return StartProgram(Binary(), args, out, err);
}

// The exit code (128 + signal when killed). With `timeout_seconds` > 0 a
// child still running then is killed (SIGKILL: 137), so a test of input
// that used to hang fails instead of hanging.
inline int Wait(pid_t pid, int timeout_seconds = 0) {
  int status = 0;
  if (timeout_seconds > 0) {
    for (int waited_ms = 0; waitpid(pid, &status, WNOHANG) == 0;
         waited_ms += 10) {
      if (waited_ms >= timeout_seconds * 1000) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      usleep(10000);
    }
  } else {
    waitpid(pid, &status, 0);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The MLP config the CLI tests train.
inline std::string Config() {
  return absl::StrCat(MT_SOURCE_DIR, "/configs/fashion_mnist_mlp.yaml");
}

// A small, quick job on a subset of Fashion-MNIST; each of `extra` is one
// more --set.
inline std::vector<std::string> SmallTrain(
    const std::string& run_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"train",
                                   "--config",
                                   Config(),
                                   "--run_dir",
                                   run_dir,
                                   "--set",
                                   "data.train_examples=2048",
                                   "--set",
                                   "data.test_examples=500",
                                   "--set",
                                   "data.global_batch_size=64",
                                   "--set",
                                   "model.hidden_units=[32]",
                                   "--set",
                                   "train.epochs=2",
                                   "--set",
                                   "train.log_every_steps=8",
                                   "--set",
                                   "checkpoint.every_steps=16"};
  for (std::string& e : extra) {
    args.push_back("--set");
    args.push_back(std::move(e));
  }
  return args;
}

// The number after "key": in a JSON line such as eval's (NaN, and a
// failure, when absent).
inline double JsonNumber(const std::string& line, const std::string& key) {
  const size_t at = line.find(absl::StrCat("\"", key, "\": "));
  EXPECT_NE(at, std::string::npos) << key << " in " << line;
  return at == std::string::npos ? NAN
                                 : std::stod(line.substr(at + key.size() + 4));
}

inline std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

inline Result RunCli(const std::vector<std::string>& args,
                     int timeout_seconds = 0) {
  // Per process and call: ctest runs test cases of this file in parallel.
  static int calls = 0;
  const std::string prefix =
      absl::StrCat(::testing::TempDir(), "/cli_", getpid(), "_", calls++);
  const std::string out = prefix + "_out.txt", err = prefix + "_err.txt";
  Result r;
  r.exit_code = Wait(Start(args, out, err), timeout_seconds);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// Bad input: `args` exit 2 with one line on stderr, "mirrortrain: ..." (or
// "mirrortrain <command>: ..." for usage) containing `expected`, and leave
// no --run_dir behind.
inline void ExpectExit2(const std::vector<std::string>& args,
                        const std::string& expected) {
  Result r = RunCli(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex("^mirrortrain( [a-z]+)?: "));
  EXPECT_THAT(r.err, ::testing::HasSubstr(expected));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.err.ends_with('\n')) << r.err;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--run_dir") {
      EXPECT_FALSE(std::filesystem::exists(args[i + 1]))
          << "wrote " << args[i + 1];
    }
  }
}

// The tensors (not the metadata, which names the config) of two files.
inline void ExpectSameTensors(const std::string& a, const std::string& b) {
  auto fa = trainer::SafetensorsFile::Open(a);
  auto fb = trainer::SafetensorsFile::Open(b);
  ASSERT_TRUE(fa.ok()) << fa.status();
  ASSERT_TRUE(fb.ok()) << fb.status();
  ASSERT_EQ(fa->names(), fb->names());
  for (const std::string& name : fa->names()) {
    Tensor x = *fa->Get(name), y = *fb->Get(name);
    ASSERT_EQ(x.bytes(), y.bytes()) << name;
    EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.bytes()), 0)
        << name << " differs";
  }
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TESTS_TRAINER_CLI_RUNNER_H_
