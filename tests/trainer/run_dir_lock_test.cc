// RunDirLock: one owner at a time, the holder named, stale files harmless,
// and nothing left behind by a run that wrote nothing.
#include "trainer/run_dir_lock.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::FreshTestDir("run_dir_lock_test"); }
  void TearDown() override { fs::remove_all(root_); }

  std::string LockFile(const std::string& dir) const {
    return dir + "/" + std::string(RunDirLock::kFileName);
  }

  std::string root_;
};

// flock locks belong to open file descriptions, so a second Acquire in this
// process contends as another process would.
TEST_F(RunDirLockTest, SecondOwnerFailsNamingTheHolderPid) {
  const std::string dir = root_ + "/run";
  {
    absl::StatusOr<RunDirLock> first = RunDirLock::Acquire(dir);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(testing::ReadFile(LockFile(dir)), absl::StrCat(getpid(), "\n"));
    absl::StatusOr<RunDirLock> second = RunDirLock::Acquire(dir);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(second.status().message()),
                HasSubstr(absl::StrCat(dir,
                                       " is in use by another mirrortrain "
                                       "process (pid ",
                                       getpid(), ", holding ", LockFile(dir))));
  }
  // Released: the directory can be owned again.
  EXPECT_TRUE(RunDirLock::Acquire(dir).ok());
}

TEST_F(RunDirLockTest, AStaleLockFileDoesNotBlock) {
  const std::string dir = root_ + "/run";
  fs::create_directories(dir);
  std::ofstream(LockFile(dir)) << "999999999\n";
  absl::StatusOr<RunDirLock> lock = RunDirLock::Acquire(dir);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(testing::ReadFile(LockFile(dir)), absl::StrCat(getpid(), "\n"));
}

TEST_F(RunDirLockTest, ReleaseWithoutKeepFilesRemovesWhatAcquireCreated) {
  const std::string dir = root_ + "/new/run";
  { ASSERT_TRUE(RunDirLock::Acquire(dir).ok()); }
  EXPECT_FALSE(fs::exists(root_ + "/new"));

  // An existing directory stays; so does a lock file that was there.
  fs::create_directories(dir);
  { ASSERT_TRUE(RunDirLock::Acquire(dir).ok()); }
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_FALSE(fs::exists(LockFile(dir)));
  std::ofstream(LockFile(dir)) << "1\n";
  { ASSERT_TRUE(RunDirLock::Acquire(dir).ok()); }
  EXPECT_TRUE(fs::exists(LockFile(dir)));
}

TEST_F(RunDirLockTest, KeepFilesKeepsTheDirectoryAndLockFile) {
  const std::string dir = root_ + "/new/run";
  {
    absl::StatusOr<RunDirLock> lock = RunDirLock::Acquire(dir);
    ASSERT_TRUE(lock.ok());
    lock->KeepFiles();
  }
  EXPECT_TRUE(fs::exists(LockFile(dir)));
}

TEST_F(RunDirLockTest, RejectsALinkOrNonFileAsTheLockFile) {
  const std::string dir = root_ + "/run";
  fs::create_directories(dir);
  std::ofstream(root_ + "/target") << "precious";
  fs::create_symlink(root_ + "/target", LockFile(dir));
  absl::StatusOr<RunDirLock> lock = RunDirLock::Acquire(dir);
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(lock.status().message()),
              HasSubstr("is a symbolic link"));
  EXPECT_EQ(testing::ReadFile(root_ + "/target"), "precious");

  fs::remove(LockFile(dir));
  fs::create_directories(LockFile(dir));
  const absl::Status on_dir = RunDirLock::Acquire(dir).status();
  // A run directory that cannot be written is bad input, as one that cannot
  // be created (exit 2).
  EXPECT_EQ(on_dir.code(), absl::StatusCode::kInvalidArgument);
  // The system's reason once (absl::ErrnoToStatus appends it itself; it
  // was said twice).
  const std::string message(on_dir.message());
  const std::string reason = std::strerror(EISDIR);
  EXPECT_NE(message.find(reason), std::string::npos) << message;
  EXPECT_EQ(message.find(reason), message.rfind(reason)) << message;

  std::ofstream(root_ + "/file") << "x";
  lock = RunDirLock::Acquire(root_ + "/file");
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(lock.status().message()),
              HasSubstr("cannot create run directory"));
}

}  // namespace
}  // namespace mirrortrain::trainer
