// Runs the mirrortrain binary end to end.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace mirrortrain {
namespace {

struct Result {
  int exit_code;
  std::string output;
};

Result RunCli(const std::string& args) {
  std::string cmd =
      std::string(MT_BINARY_DIR) + "/bin/mirrortrain " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  Result r{-1, ""};
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0)
    r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CliTest, HelpAndVersion) {
  Result help = RunCli("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("mirrortrain train"), std::string::npos);
  Result version = RunCli("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output.rfind("mirrortrain ", 0), 0u) << version.output;
}

TEST(CliTest, UnknownVerbIsAUsageError) {
  Result r = RunCli("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_EQ(RunCli("").exit_code, 2);
}

}  // namespace
}  // namespace mirrortrain
