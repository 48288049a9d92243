#include "trainer/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cpu_threads.h"
#include "tests/test_util.h"
#include "trainer/data/data_source.h"
#include "trainer/data/dataset.h"
#include "trainer/data/gz_file.h"

namespace mirrortrain::trainer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kRealDataDir[] = "/usr/share/datasets/fashion-mnist";

// A fresh, empty directory per test.
// `path` open for positioned reads (it must exist).
RegularFile Opened(const std::string& path) {
  absl::StatusOr<RegularFile> file = OpenRegularFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : RegularFile();
}

std::string TestDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      absl::StrCat("idx_reader_test_", info->test_suite_name(), "_",
                   info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     const std::vector<uint8_t>& data) {
  std::string bytes;
  auto put32 = [&bytes](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      bytes.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  bytes.append(data.begin(), data.end());
  return bytes;
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// One gzip member per part, concatenated (as `cat a.gz b.gz` makes).
void WriteGzMembers(const std::string& path,
                    const std::vector<std::string>& parts) {
  std::string file;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string member = path + ".member";
    WriteGz(member, parts[i]);
    std::ifstream in(member, std::ios::binary);
    file.append(std::istreambuf_iterator<char>(in),
                std::istreambuf_iterator<char>());
  }
  WriteRaw(path, file);
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

std::vector<uint8_t> Pattern(size_t n, uint32_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + salt);
  return v;
}

// Pseudo-random bytes, which gzip cannot shrink, so cutting a .gz file in
// half cuts the data in half.
std::vector<uint8_t> Noise(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::vector<uint8_t> Labels(size_t n, int num_classes) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i % num_classes);
  return v;
}

// ---------------------------------------------------------------- reader

TEST(IdxReaderTest, ReadsRawAndGzipLabels) {
  const std::string dir = TestDir();
  const std::vector<uint8_t> labels = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::string bytes = IdxBytes(kIdxLabelsMagic, {8}, labels);
  WriteRaw(dir + "/labels", bytes);
  WriteGz(dir + "/labels.gz", bytes);
  for (const std::string name : {"labels", "labels.gz"}) {
    absl::StatusOr<std::vector<uint8_t>> read =
        ReadIdxLabels(dir + "/" + name, 10);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, labels) << name;
  }
}

TEST(IdxReaderTest, ReadsRawAndGzipImages) {
  const std::string dir = TestDir();
  const std::vector<uint8_t> pixels = Pattern(5 * 4 * 3, 1);
  const std::string bytes = IdxBytes(kIdxImagesMagic, {5, 4, 3}, pixels);
  WriteRaw(dir + "/images", bytes);
  WriteGz(dir + "/images.gz", bytes);
  for (const std::string name : {"images", "images.gz"}) {
    absl::StatusOr<IdxImages> read = ReadIdxImages(dir + "/" + name);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->count, 5);
    EXPECT_EQ(read->rows, 4);
    EXPECT_EQ(read->cols, 3);
    EXPECT_THAT(read->pixels(), ::testing::ElementsAreArray(pixels)) << name;
  }
}

TEST(IdxReaderTest, ReadsEmptyFile) {
  const std::string dir = TestDir();
  WriteRaw(dir + "/labels", IdxBytes(kIdxLabelsMagic, {0}, {}));
  absl::StatusOr<std::vector<uint8_t>> read =
      ReadIdxLabels(dir + "/labels", 10);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

TEST(IdxReaderTest, WrongMagic) {
  const std::string dir = TestDir();
  const std::string path = dir + "/labels.gz";
  // An image file where labels are expected.
  WriteGz(path, IdxBytes(kIdxImagesMagic, {1, 2, 2}, Pattern(4, 0)));
  absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(path, 10);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(read.status().message()),
            path +
                ": bad magic 0x00000803, expected 0x00000801 (IDX u8, 1 "
                "dimension)");

  const std::string text = dir + "/images";
  WriteRaw(text, "this is not an IDX file at all");
  absl::StatusOr<IdxImages> images = ReadIdxImages(text);
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(std::string(images.status().message()),
              StartsWith(text + ": bad magic 0x74686973, expected 0x00000803"));
}

TEST(IdxReaderTest, TruncatedLabels) {
  const std::string dir = TestDir();
  const std::string path = dir + "/train-labels-idx1-ubyte";
  std::string bytes = IdxBytes(kIdxLabelsMagic, {60000}, Labels(60000, 10));
  bytes.resize(bytes.size() - 10);
  WriteRaw(path, bytes);
  absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(path, 10);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(read.status().message()),
            path +
                ": truncated: header promises 60000 labels, file holds "
                "59990");
}

TEST(IdxReaderTest, TruncatedImages) {
  const std::string dir = TestDir();
  const std::string path = dir + "/images";
  std::string bytes = IdxBytes(kIdxImagesMagic, {3, 28, 28}, Pattern(2352, 0));
  bytes.resize(bytes.size() - 1);
  WriteRaw(path, bytes);
  absl::StatusOr<IdxImages> read = ReadIdxImages(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(std::string(read.status().message()),
            path +
                ": truncated: header promises 3 images of 28x28 (2352 "
                "bytes), file holds 2351 bytes");
}

TEST(IdxReaderTest, ReservesWhatTheHeaderPromisesOnlyIfTheFileCouldHoldIt) {
  const std::string dir = TestDir();
  // 5 MB of images, more than one read chunk, in a file read through zlib
  // (raw; a single gzip member inflates in one pass): read into a buffer
  // reserved once (a growing one would end with spare capacity, after
  // copies).
  const std::string raw = dir + "/images";
  const std::vector<uint32_t> dims = {5, 1000, 1000};
  WriteRaw(raw, IdxBytes(kIdxImagesMagic, dims, Pattern(5000000, 3)));
  absl::StatusOr<IdxImages> read = ReadIdxImages(raw);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pixels_offset, 0u);
  EXPECT_EQ(read->pixels().size(), 5000000u);
  EXPECT_EQ(read->data.capacity(), 5000000u);
  const std::string path = dir + "/images.gz";
  WriteGz(path, IdxBytes(kIdxImagesMagic, dims, Pattern(5000000, 3)));
  EXPECT_EQ(ReservableBytes(Opened(path), 16, 5000000), 5000000u);
  // A raw file holds what it holds.
  WriteRaw(raw, IdxBytes(kIdxImagesMagic, {5, 10, 10}, Pattern(500, 3)));
  EXPECT_EQ(ReservableBytes(Opened(raw), 16, 500), 500u);
  EXPECT_EQ(ReservableBytes(Opened(raw), 16, uint64_t{1} << 40), 500u);
  // Headers promising more than their files hold: a raw one, a gzip one
  // its trailer contradicts, and a gzip one whose trailer agrees mod 2^32
  // but which could not decompress to a terabyte.
  const std::vector<uint32_t> liar = {1 << 20, 28, 28};
  WriteRaw(raw, IdxBytes(kIdxImagesMagic, liar, {}));
  EXPECT_EQ(ReservableBytes(Opened(raw), 16, uint64_t{28 * 28} << 20), 0u);
  WriteGz(path, IdxBytes(kIdxImagesMagic, liar, {}));
  EXPECT_EQ(ReservableBytes(Opened(path), 16, uint64_t{28 * 28} << 20), 0u);
  EXPECT_EQ(ReservableBytes(Opened(path), 16, uint64_t{1} << 40), 0u);
  absl::StatusOr<IdxImages> truncated = ReadIdxImages(path);
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()),
              HasSubstr("truncated: header promises 1048576 images"));
}

TEST(IdxReaderTest, OneGzipMemberInflatesInOnePass) {
  const std::string dir = TestDir();
  const std::string path = dir + "/images.gz";
  const std::vector<uint8_t> pixels = Noise(3 * 28 * 28);
  const std::string bytes = IdxBytes(kIdxImagesMagic, {3, 28, 28}, pixels);
  WriteGz(path, bytes);
  std::optional<UninitializedBytes> whole =
      InflateExactly(Opened(path), bytes.size());
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(std::string(whole->begin(), whole->end()), bytes);
  // Any other size is declined, whatever the trailer says.
  EXPECT_FALSE(InflateExactly(Opened(path), bytes.size() - 1).has_value());
  EXPECT_FALSE(InflateExactly(Opened(path), bytes.size() + 1).has_value());
  // The reader keeps the inflated header in front of the pixels.
  absl::StatusOr<IdxImages> read = ReadIdxImages(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pixels_offset, 16u);
  EXPECT_EQ(read->data.size(), bytes.size());
  EXPECT_THAT(read->pixels(), ::testing::ElementsAreArray(pixels));
}

TEST(IdxReaderTest, WhatOnePassDeclinesZlibReadsOrNames) {
  const std::string dir = TestDir();
  const std::vector<uint8_t> labels = Labels(300, 10);
  const std::string bytes = IdxBytes(kIdxLabelsMagic, {300}, labels);
  // Raw bytes, and two gzip members: declined, read by zlib all the same.
  const std::string raw = dir + "/raw";
  WriteRaw(raw, bytes);
  const std::string members = dir + "/members.gz";
  WriteGzMembers(members, {bytes.substr(0, 100), bytes.substr(100)});
  for (const std::string& path : {raw, members}) {
    EXPECT_FALSE(InflateExactly(Opened(path), bytes.size()).has_value())
        << path;
    absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(path, 10);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, labels) << path;
  }
  // A flipped bit in the CRC: declined, and zlib names it.
  const std::string bad = dir + "/bad-crc.gz";
  WriteGz(bad, bytes);
  std::string file = ReadFileBytes(bad);
  file[file.size() - 8] ^= 1;
  WriteRaw(bad, file);
  EXPECT_FALSE(InflateExactly(Opened(bad), bytes.size()).has_value());
  absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(bad, 10);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()),
              AllOf(StartsWith(bad + ": "), HasSubstr("incorrect data check")));
}

TEST(IdxReaderTest, TruncatedHeader) {
  const std::string dir = TestDir();
  const std::string path = dir + "/images";
  WriteRaw(path, IdxBytes(kIdxImagesMagic, {3, 28}, {}));  // 12 of 16 bytes.
  absl::StatusOr<IdxImages> read = ReadIdxImages(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(std::string(read.status().message()),
            path +
                ": truncated: file holds 12 bytes, less than the 16-byte "
                "IDX header");

  WriteRaw(path, "");
  read = ReadIdxImages(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("truncated: file holds 0 bytes"));
}

TEST(IdxReaderTest, TruncatedGzipStream) {
  const std::string dir = TestDir();
  const std::string full = dir + "/full.gz";
  const std::string path = dir + "/cut.gz";
  WriteGz(full, IdxBytes(kIdxImagesMagic, {100, 28, 28}, Noise(78400)));
  std::ifstream in(full, std::ios::binary);
  std::string compressed((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  WriteRaw(path, compressed.substr(0, compressed.size() / 2));
  absl::StatusOr<IdxImages> read = ReadIdxImages(path);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()),
              StartsWith(path + ": truncated: header promises 100 images of "
                                "28x28 (78400 bytes), file holds "));
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("unexpected end of file"));

  // Only the gzip trailer missing: all data is there, the stream is not.
  WriteRaw(path, compressed.substr(0, compressed.size() - 4));
  read = ReadIdxImages(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(std::string(read.status().message()),
            path +
                ": corrupt gzip stream at its end: unexpected end of "
                "file");

  // A wrong check value is a corrupt stream, not a short file: the data
  // came, and its check failed.
  std::string bad_crc = compressed;
  bad_crc[bad_crc.size() - 8] ^= 0x01;
  WriteRaw(path, bad_crc);
  read = ReadIdxImages(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(std::string(read.status().message()),
            path + ": corrupt gzip stream at its end: incorrect data check");
}

TEST(IdxReaderTest, TrailingBytes) {
  const std::string dir = TestDir();
  const std::string bytes =
      IdxBytes(kIdxLabelsMagic, {10}, Labels(10, 10)) + "xyz";
  WriteRaw(dir + "/labels", bytes);
  WriteGz(dir + "/labels.gz", bytes);
  for (const std::string name : {"labels", "labels.gz"}) {
    const std::string path = dir + "/" + name;
    absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(path, 10);
    ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(read.status().message()),
              path +
                  ": trailing garbage: 3 bytes after the 10 labels the "
                  "header promises");
  }
}

TEST(IdxReaderTest, LabelOutOfRange) {
  const std::string dir = TestDir();
  const std::string path = dir + "/labels.gz";
  WriteGz(path, IdxBytes(kIdxLabelsMagic, {6}, {0, 1, 9, 3, 10, 2}));
  absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(path, 10);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(read.status().message()),
            path + ": label 10 at index 4 is out of range [0, 10)");
  EXPECT_TRUE(ReadIdxLabels(path, 11).ok());
}

TEST(IdxReaderTest, ImplausibleDimensions) {
  const std::string dir = TestDir();
  const std::string path = dir + "/images";
  WriteRaw(path, IdxBytes(kIdxImagesMagic, {0xffffffff, 0xffffffff, 28}, {}));
  absl::StatusOr<IdxImages> read = ReadIdxImages(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("implausible dimensions"));
}

TEST(IdxReaderTest, MissingFile) {
  const std::string path = TestDir() + "/nope.gz";
  absl::StatusOr<IdxImages> read = ReadIdxImages(path);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(read.status().message()),
            path + ": cannot open: No such file or directory");
}

// ----------------------------------------------------------- Fashion-MNIST

void WriteSplit(const std::string& dir, const std::string& prefix, uint32_t n,
                bool gz, uint32_t salt, uint32_t label_count = 0) {
  const std::string images =
      IdxBytes(kIdxImagesMagic, {n, 28, 28}, Pattern(n * 784, salt));
  const uint32_t nl = label_count == 0 ? n : label_count;
  const std::string labels = IdxBytes(kIdxLabelsMagic, {nl}, Labels(nl, 10));
  const std::string ext = gz ? ".gz" : "";
  auto write = gz ? WriteGz : WriteRaw;
  write(dir + "/" + prefix + "-images-idx3-ubyte" + ext, images);
  write(dir + "/" + prefix + "-labels-idx1-ubyte" + ext, labels);
}

void ExpectDatasetMatches(const InMemoryDataset& d, uint32_t n, uint32_t salt) {
  ASSERT_EQ(d.images.shape(), (Shape{n, 28, 28, 1}));
  ASSERT_EQ(d.images.dtype(), DType::kF32);
  ASSERT_EQ(d.labels.shape(), (Shape{n}));
  ASSERT_EQ(d.labels.dtype(), DType::kI32);
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_EQ(d.size(), n);
  const std::vector<uint8_t> pixels = Pattern(n * 784, salt);
  const float* got = d.images.data<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<float>(pixels[i]) / 255.0f) << i;
  }
  const std::vector<uint8_t> labels = Labels(n, 10);
  EXPECT_EQ(d.labels.ToVector<int32_t>(),
            std::vector<int32_t>(labels.begin(), labels.end()));
}

TEST(FashionMnistTest, LoadsRawAndGzip) {
  const std::string dir = TestDir();
  WriteSplit(dir, "train", 7, /*gz=*/false, 1);
  WriteSplit(dir, "t10k", 3, /*gz=*/true, 2);
  absl::StatusOr<InMemoryDataset> train = LoadFashionMnist(dir, true);
  ASSERT_TRUE(train.ok()) << train.status();
  ExpectDatasetMatches(*train, 7, 1);
  EXPECT_EQ(train->name, "fashion_mnist/train");
  absl::StatusOr<InMemoryDataset> test = LoadFashionMnist(dir, false);
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectDatasetMatches(*test, 3, 2);
  EXPECT_EQ(test->name, "fashion_mnist/test");
}

TEST(FashionMnistTest, PrefersGzipWhenBothExist) {
  const std::string dir = TestDir();
  WriteSplit(dir, "t10k", 4, /*gz=*/true, 5);
  WriteSplit(dir, "t10k", 4, /*gz=*/false, 9);
  absl::StatusOr<InMemoryDataset> test = LoadFashionMnist(dir, false);
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectDatasetMatches(*test, 4, 5);
}

TEST(FashionMnistTest, CountMismatch) {
  const std::string dir = TestDir();
  WriteSplit(dir, "t10k", 5, /*gz=*/true, 0, /*label_count=*/4);
  absl::StatusOr<InMemoryDataset> test = LoadFashionMnist(dir, false);
  ASSERT_EQ(test.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(test.status().message()),
            absl::StrCat(dir, "/t10k-images-idx3-ubyte.gz holds 5 images but ",
                         dir, "/t10k-labels-idx1-ubyte.gz holds 4 labels"));
}

TEST(FashionMnistTest, WrongImageSize) {
  const std::string dir = TestDir();
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz",
          IdxBytes(kIdxImagesMagic, {2, 27, 28}, Pattern(2 * 27 * 28, 0)));
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz",
          IdxBytes(kIdxLabelsMagic, {2}, {0, 1}));
  absl::StatusOr<InMemoryDataset> test = LoadFashionMnist(dir, false);
  ASSERT_EQ(test.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(test.status().message()),
              HasSubstr("images are 27x28"));
}

TEST(FashionMnistTest, BadLabelNamesTheFile) {
  const std::string dir = TestDir();
  WriteSplit(dir, "t10k", 2, /*gz=*/false, 0);
  WriteRaw(dir + "/t10k-labels-idx1-ubyte",
           IdxBytes(kIdxLabelsMagic, {2}, {0, 200}));
  absl::StatusOr<InMemoryDataset> test = LoadFashionMnist(dir, false);
  ASSERT_FALSE(test.ok());
  EXPECT_EQ(std::string(test.status().message()),
            dir +
                "/t10k-labels-idx1-ubyte: label 200 at index 1 is out of "
                "range [0, 10)");
}

TEST(FashionMnistTest, MissingDirectory) {
  const std::string dir = TestDir() + "/does-not-exist";
  absl::StatusOr<InMemoryDataset> train = LoadFashionMnist(dir, true);
  ASSERT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(train.status().message()),
            "Fashion-MNIST not found in " + dir +
                ": install it with 'apt-get install dataset-fashion-mnist' "
                "or set data.dir");
}

TEST(FashionMnistTest, MissingFile) {
  const std::string dir = TestDir();
  WriteSplit(dir, "train", 2, /*gz=*/true, 0);
  std::filesystem::remove(dir + "/train-labels-idx1-ubyte.gz");
  absl::StatusOr<InMemoryDataset> train = LoadFashionMnist(dir, true);
  ASSERT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(train.status().message()),
              StartsWith("Fashion-MNIST not found in " + dir +
                         ": install it with 'apt-get install "
                         "dataset-fashion-mnist' or set data.dir"));
  EXPECT_THAT(std::string(train.status().message()),
              HasSubstr("train-labels-idx1-ubyte"));
  // The other split is not there at all.
  EXPECT_EQ(LoadFashionMnist(dir, false).status().code(),
            absl::StatusCode::kNotFound);
}

void CheckRealSplit(bool train, int64_t n) {
  if (!std::filesystem::is_directory(kRealDataDir)) {
    GTEST_SKIP() << kRealDataDir
                 << " is missing: apt-get install dataset-fashion-mnist";
  }
  absl::StatusOr<InMemoryDataset> d = LoadFashionMnist(kRealDataDir, train);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->images.shape(), (Shape{n, 28, 28, 1}));
  ASSERT_EQ(d->labels.shape(), (Shape{n}));
  EXPECT_EQ(d->num_classes, 10);
  const std::vector<float> pixels = d->images.ToVector<float>();
  const auto [lo, hi] = std::minmax_element(pixels.begin(), pixels.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : d->labels.ToVector<int32_t>()) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  // Fashion-MNIST is balanced: 6000 (train) or 1000 (test) per class.
  EXPECT_EQ(per_class, std::vector<int64_t>(10, n / 10));
}

TEST(FashionMnistTest, RealTestSplit) { CheckRealSplit(false, 10000); }

TEST(FashionMnistTest, RealTrainSplit) { CheckRealSplit(true, 60000); }

// --------------------------------------------------------------- synthetic

TEST(SyntheticTest, ShapeRangeAndDeterminism) {
  InMemoryDataset a = MakeSynthetic(200, 10, 7);
  InMemoryDataset b = MakeSynthetic(200, 10, 7);
  InMemoryDataset c = MakeSynthetic(200, 10, 8);
  ASSERT_EQ(a.images.shape(), (Shape{200, 28, 28, 1}));
  ASSERT_EQ(a.labels.shape(), (Shape{200}));
  EXPECT_EQ(a.num_classes, 10);
  EXPECT_EQ(a.images.ToVector<float>(), b.images.ToVector<float>());
  EXPECT_EQ(a.labels.ToVector<int32_t>(), b.labels.ToVector<int32_t>());
  EXPECT_NE(a.images.ToVector<float>(), c.images.ToVector<float>());
  for (float p : a.images.ToVector<float>()) {
    ASSERT_GE(p, 0.0f);
    ASSERT_LE(p, 1.0f);
  }
  std::vector<int> seen(10, 0);
  for (int32_t label : a.labels.ToVector<int32_t>()) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++seen[label];
  }
  for (int count : seen) EXPECT_GT(count, 0);
  EXPECT_EQ(MakeSynthetic(0, 10, 1).size(), 0);
}

// A split starting at `first` is those rows of one longer draw, bit for bit
// (so the source's training and test splits are made separately and still
// share their prototypes), whatever the thread count splits the work into.
TEST(SyntheticTest, SplitsAreRowsOfOneSequence) {
  const InMemoryDataset whole = MakeSynthetic(150, 10, 7);
  const InMemoryDataset tail = MakeSynthetic(100, 10, 7, /*first=*/50);
  const std::vector<float> pixels = whole.images.ToVector<float>();
  const std::vector<int32_t> labels = whole.labels.ToVector<int32_t>();
  EXPECT_EQ(tail.images.ToVector<float>(),
            std::vector<float>(pixels.begin() + 50 * 784, pixels.end()));
  EXPECT_EQ(tail.labels.ToVector<int32_t>(),
            std::vector<int32_t>(labels.begin() + 50, labels.end()));
  const int threads = CpuMathThreads();
  SetCpuMathThreads(1);
  const InMemoryDataset serial = MakeSynthetic(150, 10, 7);
  SetCpuMathThreads(threads);
  EXPECT_EQ(serial.images.ToVector<float>(), pixels);
  EXPECT_EQ(serial.labels.ToVector<int32_t>(), labels);
}

// The registered source: examples of the model's input shape when the config
// gives one (DESIGN.md), only as many as data.*_examples asks for, and a
// shape too large for memory refused naming the key that fixes it.
absl::StatusOr<InMemoryDataset> LoadSyntheticSplit(const SplitRequest& split) {
  const DataSource* source = DataSourceRegistry::Global().Find("synthetic");
  if (source == nullptr) return absl::NotFoundError("synthetic");
  return source->load(Params(), split);
}

TEST(SyntheticTest, SourceMakesTheModelsInputShape) {
  absl::StatusOr<InMemoryDataset> preset =
      LoadSyntheticSplit({.train = false, .seed = 7, .max_examples = 20});
  ASSERT_TRUE(preset.ok()) << preset.status();
  EXPECT_EQ(preset->images.shape(), (Shape{20, 28, 28, 1}));
  absl::StatusOr<InMemoryDataset> colour = LoadSyntheticSplit(
      {.train = true, .seed = 7, .example_shape = {6, 5, 3}});
  ASSERT_TRUE(colour.ok()) << colour.status();
  EXPECT_EQ(colour->images.shape(), (Shape{60000, 6, 5, 3}));
  EXPECT_EQ(colour->num_classes, 10);
  // The first examples of the whole split, made alone.
  absl::StatusOr<InMemoryDataset> first =
      LoadSyntheticSplit({.train = true,
                          .seed = 7,
                          .example_shape = {6, 5, 3},
                          .max_examples = 30});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->images.ToVector<float>(),
            colour->images.SliceRows(0, 30)->ToVector<float>());
  EXPECT_EQ(first->labels.ToVector<int32_t>(),
            colour->labels.SliceRows(0, 30)->ToVector<int32_t>());
  absl::StatusOr<InMemoryDataset> huge = LoadSyntheticSplit(
      {.train = true, .seed = 7, .example_shape = {224, 224, 3}});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge.status().message()),
              ::testing::HasSubstr("60000 examples of [224,224,3]"));
  EXPECT_THAT(std::string(huge.status().message()),
              ::testing::HasSubstr("set data.train_examples lower"));
  // One example, but its class prototypes alone are over the bound.
  absl::StatusOr<InMemoryDataset> wide =
      LoadSyntheticSplit({.train = false,
                          .seed = 7,
                          .example_shape = {1 << 27},
                          .max_examples = 1});
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wide.status().message()),
              ::testing::HasSubstr("1 examples of [134217728]"));
  EXPECT_TRUE(LoadSyntheticSplit({.train = true,
                                  .seed = 7,
                                  .example_shape = {224, 224, 3},
                                  .max_examples = 100})
                  .ok());
}

TEST(SyntheticTest, IsLearnable) {
  // Nearest class mean, fitted on one half, classifies the other half.
  constexpr int64_t kN = 2000, kPixels = 784;
  InMemoryDataset d = MakeSynthetic(kN, 10, 3);
  const float* x = d.images.data<float>();
  const int32_t* y = d.labels.data<int32_t>();
  std::vector<double> means(10 * kPixels, 0.0);
  std::vector<int> counts(10, 0);
  for (int64_t i = 0; i < kN / 2; ++i) {
    ++counts[y[i]];
    for (int64_t k = 0; k < kPixels; ++k) {
      means[y[i] * kPixels + k] += x[i * kPixels + k];
    }
  }
  for (int c = 0; c < 10; ++c) {
    for (int64_t k = 0; k < kPixels; ++k) means[c * kPixels + k] /= counts[c];
  }
  int correct = 0;
  for (int64_t i = kN / 2; i < kN; ++i) {
    int best = 0;
    double best_distance = 1e300;
    for (int c = 0; c < 10; ++c) {
      double distance = 0.0;
      for (int64_t k = 0; k < kPixels; ++k) {
        const double diff = x[i * kPixels + k] - means[c * kPixels + k];
        distance += diff * diff;
      }
      if (distance < best_distance) {
        best_distance = distance;
        best = c;
      }
    }
    correct += best == y[i];
  }
  EXPECT_GT(correct, 0.95 * (kN / 2));
}

// ---------------------------------------------------------------- GzFile

// Reads the whole file through GzFile in reads of `chunk` bytes.
absl::StatusOr<std::string> ReadInChunks(const std::string& path,
                                         size_t chunk) {
  absl::StatusOr<GzFile> file = GzFile::Open(path);
  if (!file.ok()) return file.status();
  std::string data;
  for (;;) {
    const size_t old = data.size();
    data.resize(old + chunk);
    absl::StatusOr<size_t> got = file->Read(data.data() + old, chunk);
    if (!got.ok()) return got.status();
    data.resize(old + *got);
    if (*got < chunk) break;
  }
  if (!file->stream_error().empty()) {
    return absl::InvalidArgumentError(file->stream_error());
  }
  return data;
}

std::string AsString(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

// Members, raw files and reads of every size (across the 128 KiB input
// buffer) give the bytes that were written.
TEST(GzFileTest, ReadsMembersAndRawFilesInAnyChunks) {
  const std::string dir = TestDir();
  const std::string noise = AsString(Noise(700000));
  const std::string text = AsString(Pattern(300000, 3));  // Compresses well.
  WriteGzMembers(dir + "/three.gz",
                 {noise.substr(0, 1), noise.substr(1, 400000),
                  noise.substr(400001) + text});
  WriteRaw(dir + "/raw", noise + text);
  WriteGz(dir + "/empty.gz", "");
  WriteRaw(dir + "/empty", "");
  for (const size_t chunk : {size_t{1} << 20, size_t{131072}, size_t{65537},
                             size_t{4096}, size_t{7}}) {
    SCOPED_TRACE(absl::StrCat("chunk ", chunk));
    for (const char* name : {"three.gz", "raw"}) {
      absl::StatusOr<std::string> read = ReadInChunks(dir + "/" + name, chunk);
      ASSERT_TRUE(read.ok()) << name << ": " << read.status();
      EXPECT_TRUE(*read == noise + text) << name;
    }
  }
  for (const char* name : {"empty.gz", "empty"}) {
    absl::StatusOr<std::string> read = ReadWholeFile(dir + "/" + name);
    ASSERT_TRUE(read.ok()) << name << ": " << read.status();
    EXPECT_EQ(*read, "") << name;
  }
}

// After the last member only zero bytes may follow (tar-style padding, as
// gzip and Python's gzip module accept; Python also reads a member after
// them); other bytes are a corrupt stream, where zlib's gzread ignored them
// silently.
TEST(GzFileTest, OnlyZeroPaddingMayFollowTheLastMember) {
  const std::string dir = TestDir();
  const std::string data = AsString(Pattern(5000, 1));
  WriteGzMembers(dir + "/members.gz",
                 {data.substr(0, 2000), data.substr(2000)});
  const std::string members = ReadFileBytes(dir + "/members.gz");
  const std::string padded = dir + "/padded.gz";
  // More zeros than one input buffer holds.
  WriteRaw(padded, members + std::string(300000, '\0'));
  absl::StatusOr<std::string> read = ReadWholeFile(padded);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == data);
  // Padding between members, then another member.
  WriteRaw(padded, members + std::string(300000, '\0') + members);
  read = ReadWholeFile(padded);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == data + data);

  for (const std::string& tail :
       {std::string("xyz"), std::string(1, '\x1f'), std::string("\x1f\x8bxx"),
        std::string(200000, '\0') + "x"}) {
    SCOPED_TRACE(absl::StrCat("tail of ", tail.size(), " bytes"));
    const std::string path = dir + "/garbage.gz";
    WriteRaw(path, members + tail);
    read = ReadWholeFile(path);
    ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(read.status().message()),
                StartsWith(absl::StrCat(path, ": corrupt gzip stream after ",
                                        data.size(), " bytes: ")));
    // Named at its first byte that is not padding.
    const size_t zeros = tail.find_first_not_of('\0');
    if (tail[zeros] != '\x1f' || tail.size() - zeros < 2) {
      EXPECT_THAT(std::string(read.status().message()),
                  HasSubstr(absl::StrCat("trailing garbage at byte ",
                                         members.size() + zeros,
                                         ", after the gzip data")));
    }
  }
  // An IDX file says so in its own words.
  const std::vector<uint8_t> labels = Labels(10, 10);
  const std::string idx = dir + "/labels.gz";
  WriteGz(idx, IdxBytes(kIdxLabelsMagic, {10}, labels));
  WriteRaw(idx, ReadFileBytes(idx) + "junk");
  absl::StatusOr<std::vector<uint8_t>> labels_read = ReadIdxLabels(idx, 10);
  ASSERT_FALSE(labels_read.ok());
  EXPECT_THAT(std::string(labels_read.status().message()),
              StartsWith(idx + ": corrupt gzip stream at its end: trailing "
                               "garbage at byte "));
}

// A gzip file cut anywhere never reads as whole.
TEST(GzFileTest, EveryTruncationIsAnError) {
  const std::string dir = TestDir();
  const std::string data = AsString(Pattern(3000, 5)) + AsString(Noise(200));
  WriteGz(dir + "/whole.gz", data);
  const std::string whole = ReadFileBytes(dir + "/whole.gz");
  const std::string path = dir + "/cut.gz";
  for (size_t size = 2; size < whole.size(); ++size) {
    WriteRaw(path, whole.substr(0, size));
    absl::StatusOr<std::string> read = ReadWholeFile(path);
    ASSERT_FALSE(read.ok()) << "cut at " << size << " of " << whole.size();
    EXPECT_THAT(std::string(read.status().message()),
                StartsWith(path + ": corrupt gzip stream after "))
        << "cut at " << size;
  }
}

}  // namespace
}  // namespace mirrortrain::trainer
