// The `text` data source: bytes of files in order as tokens, the last
// validation_fraction held out, windows with next-byte targets, and the
// batch iterator's seeded shuffle and exact resume over its windows.
#include "trainer/data/text.h"

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/data/batch_iterator.h"
#include "trainer/data/dataset.h"

namespace mirrortrain::trainer {
namespace {

std::string WriteText(const std::string& dir, const std::string& name,
                      const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The window rows of a split as strings: inputs and targets.
std::vector<std::string> Rows(const Tensor& t) {
  std::vector<std::string> rows;
  const int64_t length = t.dim(1);
  for (int64_t i = 0; i < t.dim(0); ++i) {
    std::string row;
    for (int64_t j = 0; j < length; ++j) {
      row.push_back(static_cast<char>(t.ScalarAt(i * length + j)));
    }
    rows.push_back(row);
  }
  return rows;
}

TEST(TextTest, FilesInOrderSplitIntoWindowsWithNextByteTargets) {
  const std::string dir = testing::FreshTestDir("text");
  // 30 bytes; validation_fraction 0.25 holds out the last floor(7.5) = 7.
  const std::vector<std::string> paths = {
      WriteText(dir, "a.txt", "abcdefghijklm"),
      WriteText(dir, "b.txt", "nopqrstuvwxyz0123")};
  auto train = LoadText(paths, 4, 0.25, /*train=*/true);
  ASSERT_TRUE(train.ok()) << train.status();
  // Train split: 23 bytes "a".."w": (23-1)/4 = 5 windows.
  EXPECT_EQ(train->name, "text/train");
  EXPECT_EQ(train->num_classes, 256);
  EXPECT_TRUE(train->bytes_as_tokens);
  EXPECT_EQ(train->images.dtype(), DType::kF32);
  EXPECT_EQ(train->labels.dtype(), DType::kI32);
  EXPECT_EQ(train->images.shape(), (Shape{5, 4}));
  EXPECT_EQ(train->labels.shape(), (Shape{5, 4}));
  EXPECT_EQ(train->labels_per_example(), 4);
  EXPECT_EQ(Rows(train->images),
            (std::vector<std::string>{"abcd", "efgh", "ijkl", "mnop", "qrst"}));
  EXPECT_EQ(Rows(train->labels),
            (std::vector<std::string>{"bcde", "fghi", "jklm", "nopq", "rstu"}));
  // Test split: the last 7 bytes "xyz0123": (7-1)/4 = 1 window.
  auto test = LoadText(paths, 4, 0.25, /*train=*/false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->name, "text/test");
  EXPECT_EQ(Rows(test->images), (std::vector<std::string>{"xyz0"}));
  EXPECT_EQ(Rows(test->labels), (std::vector<std::string>{"yz01"}));
}

TEST(TextTest, EveryByteValueIsAToken) {
  const std::string dir = testing::FreshTestDir("text_bytes");
  std::string bytes;
  for (int i = 0; i < 512; ++i) bytes.push_back(static_cast<char>(i % 256));
  auto train = LoadText({WriteText(dir, "all.bin", bytes)}, 1, 0.5, true);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->images.shape(), (Shape{255, 1}));
  for (int64_t i = 0; i < 255; ++i) {
    EXPECT_EQ(train->images.ScalarAt(i), static_cast<double>(i));
    EXPECT_EQ(train->labels.ScalarAt(i), static_cast<double>(i + 1));
  }
}

TEST(TextTest, BadInputsNameTheFileOrTheKey) {
  const std::string dir = testing::FreshTestDir("text_bad");
  const std::string ok = WriteText(dir, "ok.txt", std::string(100, 'x'));
  const std::string empty = WriteText(dir, "empty.txt", "");
  auto expect = [](const absl::StatusOr<InMemoryDataset>& got,
                   absl::StatusCode code, const std::string& needle) {
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), code) << got.status();
    EXPECT_NE(got.status().message().find(needle), std::string::npos)
        << got.status();
    EXPECT_EQ(got.status().message().find('\n'), std::string::npos);
  };
  expect(LoadText({ok, dir + "/missing.txt"}, 4, 0.1, true),
         absl::StatusCode::kNotFound, "missing.txt");
  expect(LoadText({ok, empty}, 4, 0.1, true),
         absl::StatusCode::kInvalidArgument, "empty.txt");
  expect(LoadText({}, 4, 0.1, true), absl::StatusCode::kInvalidArgument,
         "data.path");
  // 90 training bytes hold no window of 90 + 1.
  expect(LoadText({ok}, 90, 0.1, true), absl::StatusCode::kInvalidArgument,
         "data.sequence_length");
  // 10 held-out bytes hold no window of 10 + 1; also when loading train.
  expect(LoadText({ok}, 10, 0.1, true), absl::StatusCode::kInvalidArgument,
         "data.validation_fraction");
  expect(LoadText({ok}, 4, 0.0, false), absl::StatusCode::kInvalidArgument,
         "data.validation_fraction");
  expect(LoadText({ok}, 0, 0.1, true), absl::StatusCode::kInvalidArgument,
         "data.sequence_length");
  expect(LoadText({ok}, 4, 1.0, true), absl::StatusCode::kInvalidArgument,
         "data.validation_fraction");
  // The largest windows that fit: 89 train bytes + 1 and 10 test bytes.
  EXPECT_TRUE(LoadText({ok}, 9, 0.1, false).ok());
}

TEST(TextTest, WindowsShuffleWithTheSeedAndResumeExactly) {
  const std::string dir = testing::FreshTestDir("text_iter");
  std::string bytes;
  for (int i = 0; i < 401; ++i)
    bytes.push_back(static_cast<char>('a' + i % 26));
  auto data = LoadText({WriteText(dir, "t.txt", bytes)}, 8, 0.1, true);
  ASSERT_TRUE(data.ok()) << data.status();
  BatchIteratorOptions opt;
  opt.batch_size = 5;
  opt.seed = 3;
  opt.prefetch = 0;
  auto it = BatchIterator::Create(&*data, opt);
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<std::vector<std::string>> batches;
  for (int b = 0; b < 12; ++b) {
    auto batch = (*it)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->labels.rank(), 2);
    ASSERT_EQ(batch->labels.dim(1), 8);
    // Each example's targets are its inputs shifted by one byte.
    const std::vector<std::string> in = Rows(batch->images);
    const std::vector<std::string> out = Rows(batch->labels);
    for (size_t r = 0; r < in.size(); ++r) {
      EXPECT_EQ(in[r].substr(1), out[r].substr(0, 7));
    }
    batches.push_back(in);
  }
  // Shuffled: not the windows in file order.
  EXPECT_NE(batches[0][0] + batches[0][1], bytes.substr(0, 16));
  // A fresh iterator sought to batch 7 gives the batches the first gave.
  auto resumed = BatchIterator::Create(&*data, opt);
  ASSERT_TRUE(resumed.ok());
  const int64_t per_epoch = (*it)->BatchesPerEpoch();
  ASSERT_LT(per_epoch, 12);  // The 12 batches cross an epoch.
  ASSERT_TRUE((*resumed)->Seek({7 / per_epoch, 7 % per_epoch}).ok());
  for (int b = 7; b < 12; ++b) {
    auto batch = (*resumed)->Next();
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(Rows(batch->images), batches[b]) << "batch " << b;
  }
}

}  // namespace
}  // namespace mirrortrain::trainer
