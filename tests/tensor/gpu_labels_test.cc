// The test suite's own wiring: every test binary with a test that needs a
// GPU carries the `gpu` label, so that `ctest -L gpu` (scripts/test_gpu.sh,
// run on a lent GPU host) runs every GPU test. A GPU test is one that uses
// the CudaTest fixture (tests/tensor/cuda_test_util.h) or skips with "no
// GPU visible" itself.
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

TEST(GpuLabelsTest, EveryBinaryWithAGpuTestIsLabelledGpu) {
  const std::string tests_dir = absl::StrCat(MT_SOURCE_DIR, "/tests/");
  const std::string cmake = testing::ReadFile(tests_dir + "CMakeLists.txt");
  // mt_test(NAME SOURCE [LIBS ...] [LABELS ...]), possibly over lines.
  const std::regex mt_test(R"(mt_test\(\s*(\w+)\s+([\w/.]+)([^)]*)\))");
  const std::regex gpu_label(R"(LABELS[^)]*\bgpu\b)");
  int binaries = 0, gpu_binaries = 0;
  std::vector<std::string> unlabelled;
  for (auto it = std::sregex_iterator(cmake.begin(), cmake.end(), mt_test);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    ++binaries;
    if (m[1] == "gpu_labels_test") continue;  // Names the markers itself.
    const std::string source = testing::ReadFile(tests_dir + m[2].str());
    const bool gpu_test =
        source.find("tests/tensor/cuda_test_util.h") != std::string::npos ||
        source.find("\"no GPU visible\"") != std::string::npos;
    if (!gpu_test) continue;
    ++gpu_binaries;
    const std::string rest = m[3].str();
    if (!std::regex_search(rest, gpu_label)) unlabelled.push_back(m[1].str());
  }
  // The parse found the suite (a broken pattern would find nothing).
  EXPECT_GE(binaries, 50);
  EXPECT_GE(gpu_binaries, 15);
  EXPECT_TRUE(unlabelled.empty())
      << "GPU tests outside `ctest -L gpu` (add LABELS gpu in "
         "tests/CMakeLists.txt): "
      << absl::StrJoin(unlabelled, ", ");
}

}  // namespace
}  // namespace mirrortrain
