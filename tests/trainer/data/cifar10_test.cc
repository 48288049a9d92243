// The cifar10 data source on generated files in CIFAR-10's binary format
// (the real dataset cannot be installed here).
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/trainer/data/npz_writer.h"
#include "trainer/data/data_source.h"

namespace mirrortrain::trainer {
namespace {

using ::mirrortrain::testing::FreshTestDir;
using ::mirrortrain::testing::WriteBytes;
using ::testing::HasSubstr;

constexpr int kRecordBytes = 3073;

// Pixel byte of record `r` (counted over the whole split), channel `c` and
// position `p` in its 32x32 plane: distinct across records and planes.
uint8_t Pixel(int r, int c, int p) {
  return static_cast<uint8_t>(r * 31 + c * 101 + p * 7);
}

// `count` records starting at record `first`, labels (first + i) % 10
// unless `labels` gives them.
std::string Records(int first, int count, std::vector<int> labels = {}) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const int r = first + i;
    out.push_back(static_cast<char>(labels.empty() ? r % 10 : labels[i]));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) {
        out.push_back(static_cast<char>(Pixel(r, c, p)));
      }
    }
  }
  return out;
}

// data_batch_k.bin holds k records (15 in all), test_batch.bin 4.
std::string WriteCifar(const std::string& prefix) {
  const std::string dir = FreshTestDir(prefix);
  int first = 0;
  for (int k = 1; k <= 5; ++k) {
    WriteBytes(absl::StrCat(dir, "/data_batch_", k, ".bin"), Records(first, k));
    first += k;
  }
  WriteBytes(dir + "/test_batch.bin", Records(100, 4));
  return dir;
}

absl::StatusOr<InMemoryDataset> Load(const std::string& dir, bool train) {
  const DataSource* source = DataSourceRegistry::Global().Find("cifar10");
  if (source == nullptr) return absl::NotFoundError("cifar10 not registered");
  absl::StatusOr<Params> params = MakeParams(source->params, {{"dir", dir}});
  if (!params.ok()) return params.status();
  return source->load(*params, {.train = train, .seed = 1});
}

// Every pixel against the record it came from: R, G, B planes to NHWC,
// scaled by 1/255.
void ExpectRecords(const InMemoryDataset& data, int first) {
  const float* x = data.images.data<float>();
  const int32_t* y = data.labels.data<int32_t>();
  for (int64_t i = 0; i < data.size(); ++i) {
    const int r = first + static_cast<int>(i);
    EXPECT_EQ(y[i], r % 10) << "record " << r;
    for (int p = 0; p < 1024; ++p) {
      for (int c = 0; c < 3; ++c) {
        const float got = x[(i * 1024 + p) * 3 + c];
        ASSERT_EQ(got, static_cast<float>(Pixel(r, c, p)) / 255.0f)
            << "record " << r << " pixel " << p << " channel " << c;
      }
    }
  }
}

TEST(Cifar10Test, ReadsBothSplitsAsNhwcInUnitRange) {
  const std::string dir = WriteCifar("cifar10");
  absl::StatusOr<InMemoryDataset> train = Load(dir, true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->images.shape(), (Shape{15, 32, 32, 3}));
  EXPECT_EQ(train->labels.shape(), (Shape{15}));
  EXPECT_EQ(train->num_classes, 10);
  EXPECT_EQ(train->name, "cifar10/train");
  ExpectRecords(*train, 0);  // The five files in order.

  absl::StatusOr<InMemoryDataset> test = Load(dir, false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->images.shape(), (Shape{4, 32, 32, 3}));
  EXPECT_EQ(test->name, "cifar10/test");
  ExpectRecords(*test, 100);
}

TEST(Cifar10Test, ReadsGzipCompressedFiles) {
  const std::string dir = WriteCifar("cifar10");
  const std::string bytes = Records(100, 4);
  gzFile f = gzopen((dir + "/test_batch.bin").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
  absl::StatusOr<InMemoryDataset> test = Load(dir, false);
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectRecords(*test, 100);
}

// Each bad file: the error is one line naming the file and the problem.
void ExpectBadFile(const std::string& dir, const std::string& file,
                   const std::string& bytes, const std::string& problem) {
  WriteBytes(dir + "/" + file, bytes);
  absl::StatusOr<InMemoryDataset> data = Load(dir, file != "test_batch.bin");
  ASSERT_FALSE(data.ok()) << file;
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(data.status().message());
  EXPECT_THAT(message, HasSubstr(dir + "/" + file + ": "));
  EXPECT_THAT(message, HasSubstr(problem));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(Cifar10Test, TruncatedOrMisSizedFilesAreErrorsNamingTheFile) {
  const std::string dir = WriteCifar("cifar10");
  const std::string three = Records(0, 3);
  ExpectBadFile(dir, "data_batch_3.bin", three.substr(0, three.size() - 1),
                absl::StrCat("size ", 3 * kRecordBytes - 1,
                             " bytes is not a multiple of the 3073-byte"));
  ExpectBadFile(dir, "data_batch_3.bin", three + "x",
                "is not a multiple of the 3073-byte");
  ExpectBadFile(dir, "test_batch.bin", "", "empty file");
}

TEST(Cifar10Test, LabelOutOfRangeNamesTheRecord) {
  const std::string dir = WriteCifar("cifar10");
  ExpectBadFile(dir, "data_batch_2.bin", Records(1, 2, {3, 10}),
                "label 10 of record 1 is out of range [0, 10)");
  ExpectBadFile(dir, "test_batch.bin", Records(0, 1, {255}),
                "label 255 of record 0");
}

TEST(Cifar10Test, MissingFilesAndFolder) {
  const std::string dir = WriteCifar("cifar10");
  std::filesystem::remove(dir + "/data_batch_4.bin");
  absl::StatusOr<InMemoryDataset> train = Load(dir, true);
  ASSERT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(train.status().message(),
              HasSubstr(dir + "/data_batch_4.bin: cannot open"));
  // The test split does not need the training files.
  EXPECT_TRUE(Load(dir, false).ok());

  absl::StatusOr<InMemoryDataset> none = Load(dir + "/nowhere", false);
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(),
              HasSubstr("CIFAR-10 not found in " + dir + "/nowhere"));
  EXPECT_THAT(none.status().message(), HasSubstr("cifar-10-batches-bin"));
}

}  // namespace
}  // namespace mirrortrain::trainer
