// ScanCheckpointDir and RemoveCheckpointLeftovers: only our own regular
// files are listed, and only temporaries and unindexed checkpoints are
// deleted.
#include "trainer/checkpoint/checkpoint_dir.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/saver.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("ckpt_dir_test");
    dir_ = root_ + "/checkpoints";
  }
  void TearDown() override { fs::remove_all(root_); }

  void Touch(const std::string& name) {
    std::ofstream(dir_ + "/" + name) << name;
  }
  // Saves steps 1..3 keeping 2: the index names ckpt-2 and ckpt-3.
  void SaveThree() {
    absl::StatusOr<Variable> v =
        Variable::Create("v", Tensor::FromVector<float>({1}, {1}));
    ASSERT_TRUE(v.ok());
    for (int64_t step = 1; step <= 3; ++step) {
      ASSERT_TRUE(Saver({&*v}).Save(dir_, step, {}, 2).ok());
    }
  }
  // Files that are not ours, or not regular: never listed or deleted.
  void PlantForeignFiles() {
    for (const char* name :
         {"notes.txt", "ckpt-x.safetensors", "ckpt-1.safetensors.bak",
          "ckpt-1.safetensors.tmp.", "ckpt-1.safetensors.tmp.12a",
          "model.tmp.5", "checkpoint.bak"}) {
      Touch(name);
    }
    fs::create_directories(dir_ + "/ckpt-7.safetensors");
    fs::create_directories(dir_ + "/ckpt-8.safetensors.tmp.1");
    std::ofstream(root_ + "/outside.txt") << "precious";
    fs::create_symlink(root_ + "/outside.txt", dir_ + "/ckpt-9.safetensors");
    fs::create_symlink(root_ + "/outside.txt",
                       dir_ + "/ckpt-9.safetensors.tmp.4");
  }
  std::vector<std::string> Entries() const {
    return testing::SortedDirEntries(dir_);
  }

  std::string root_;
  std::string dir_;
};

TEST_F(CheckpointDirTest, MissingDirectoryIsEmpty) {
  absl::StatusOr<CheckpointDirContents> c = ScanCheckpointDir(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_index);
  EXPECT_THAT(c->checkpoints, IsEmpty());
  EXPECT_THAT(c->temporaries, IsEmpty());
}

TEST_F(CheckpointDirTest, AFileInsteadOfTheDirectoryIsAnError) {
  std::ofstream(dir_) << "x";
  absl::StatusOr<CheckpointDirContents> c = ScanCheckpointDir(dir_);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr(dir_ + " is a regular file, not a directory"));
}

TEST_F(CheckpointDirTest, ScanListsOnlyOurRegularFiles) {
  SaveThree();
  PlantForeignFiles();
  Touch("ckpt-1.safetensors");
  Touch("ckpt-4.safetensors.tmp.77");
  Touch("checkpoint.tmp.8");
  absl::StatusOr<CheckpointDirContents> c = ScanCheckpointDir(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->has_index);
  EXPECT_THAT(c->checkpoints,
              ElementsAre("ckpt-1.safetensors", "ckpt-2.safetensors",
                          "ckpt-3.safetensors"));
  EXPECT_THAT(c->temporaries,
              ElementsAre("checkpoint.tmp.8", "ckpt-4.safetensors.tmp.77"));
}

TEST_F(CheckpointDirTest, RemovesTemporariesAndUnindexedCheckpointsOnly) {
  SaveThree();
  PlantForeignFiles();
  Touch("ckpt-1.safetensors");  // Pruned from the index, not yet deleted.
  Touch("ckpt-4.safetensors");  // Renamed into place, index not updated.
  Touch("ckpt-4.safetensors.tmp.77");
  Touch("checkpoint.tmp.8");
  const std::vector<std::string> before = Entries();
  absl::StatusOr<std::vector<std::string>> removed =
      RemoveCheckpointLeftovers(dir_, "");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed,
              ElementsAre("checkpoint.tmp.8", "ckpt-4.safetensors.tmp.77",
                          "ckpt-1.safetensors", "ckpt-4.safetensors"));
  std::vector<std::string> expected;
  for (const std::string& name : before) {
    if (!absl::c_linear_search(*removed, name)) expected.push_back(name);
  }
  EXPECT_EQ(Entries(), expected);
  EXPECT_EQ(testing::ReadFile(root_ + "/outside.txt"), "precious");
  EXPECT_THAT(
      *ListCheckpoints(dir_),
      ElementsAre(dir_ + "/ckpt-2.safetensors", dir_ + "/ckpt-3.safetensors"));
}

TEST_F(CheckpointDirTest, KeepsTheCheckpointBeingRestored) {
  SaveThree();
  Touch("ckpt-1.safetensors");
  absl::StatusOr<std::vector<std::string>> removed = RemoveCheckpointLeftovers(
      dir_, dir_ + "/../checkpoints/ckpt-1.safetensors");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, IsEmpty());
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-1.safetensors"));
}

// Without an index nothing says which checkpoints belong to a run: only
// temporaries go.
TEST_F(CheckpointDirTest, WithoutAnIndexCheckpointsStay) {
  fs::create_directories(dir_);
  Touch("ckpt-1.safetensors");
  Touch("ckpt-1.safetensors.tmp.3");
  absl::StatusOr<std::vector<std::string>> removed =
      RemoveCheckpointLeftovers(dir_, "");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre("ckpt-1.safetensors.tmp.3"));
  EXPECT_THAT(Entries(), ElementsAre("ckpt-1.safetensors"));
}

}  // namespace
}  // namespace mirrortrain::trainer
