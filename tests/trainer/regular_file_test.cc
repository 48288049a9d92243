// Opening user-named inputs: the regular-file check on the descriptor, the
// descriptor's owner, positioned reads and the size limit.
#include "trainer/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(RegularFileTest, OpensRegularFilesOnlyAndOwnsTheDescriptor) {
  const std::string dir = testing::FreshTestDir("regular_file_test");
  const std::string path = dir + "/ten";
  std::ofstream(path) << "0123456789";
  int fd = -1;
  {
    absl::StatusOr<RegularFile> file = OpenRegularFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->size, 10u);
    fd = file->fd.get();
    EXPECT_TRUE(IsOpen(fd));
    // Moved, still one owner.
    UniqueFd moved = std::move(file->fd);
    EXPECT_EQ(file->fd.get(), -1);
    EXPECT_EQ(moved.get(), fd);
    char bytes[8] = {};
    // Positioned reads: anywhere, short only at the end.
    absl::StatusOr<size_t> got = ReadAt(moved.get(), path, 6, bytes, 8);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, 4u);
    EXPECT_EQ(std::string(bytes, 4), "6789");
    got = ReadAt(moved.get(), path, 2, bytes, 3);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(std::string(bytes, *got), "234");
  }
  EXPECT_FALSE(IsOpen(fd));  // Closed with its owner.

  EXPECT_EQ(OpenRegularFile(dir).status().message(),
            dir + ": is a directory, not a regular file");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(OpenRegularFile(fifo).status().message(),
            fifo + ": is a FIFO, not a regular file");
  absl::Status missing = OpenRegularFile(dir + "/nope").status();
  EXPECT_TRUE(absl::IsNotFound(missing));
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr(dir + "/nope: cannot open: "));

  absl::StatusOr<std::string> whole = ReadRegularFile(path, 10);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, "0123456789");
  EXPECT_EQ(ReadRegularFile(path, 9).status().message(),
            path + ": file is 10 bytes, more than the limit of 9 bytes");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mirrortrain::trainer
