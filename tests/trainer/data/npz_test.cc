// The npz data source: .npz files written by numpy (committed fixtures,
// scripts/golden/npz_fixtures.py) and by the test's own writer, both ZIP
// methods, directories of .npy files, and every kind of bad input.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
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
#include "trainer/data/npy.h"
#include "trainer/data/zip_archive.h"

namespace mirrortrain::trainer {
namespace {

using ::mirrortrain::testing::FreshTestDir;
using ::mirrortrain::testing::GoldenPath;
using ::mirrortrain::testing::NpyBytes;
using ::mirrortrain::testing::RawBytes;
using ::mirrortrain::testing::WriteBytes;
using ::mirrortrain::testing::ZipBytes;
using ::mirrortrain::testing::ZipMember;
using ::testing::HasSubstr;

absl::StatusOr<InMemoryDataset> Load(const std::string& path, bool train,
                                     std::optional<int64_t> classes = {},
                                     const Shape& model_example = {}) {
  const DataSource* source = DataSourceRegistry::Global().Find("npz");
  if (source == nullptr) return absl::NotFoundError("npz not registered");
  std::vector<std::pair<std::string, ParamValue>> values = {{"path", path}};
  if (classes) values.push_back({"num_classes", *classes});
  absl::StatusOr<Params> params = MakeParams(source->params, values);
  if (!params.ok()) return params.status();
  return source->load(
      *params, {.train = train, .seed = 1, .example_shape = model_example});
}

// The fixtures' arrays, as scripts/golden/npz_fixtures.py defines them.
void ExpectFixture(const std::string& path) {
  SCOPED_TRACE(path);
  absl::StatusOr<InMemoryDataset> train = Load(path, true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->images.shape(), (Shape{3, 2, 4, 3}));
  EXPECT_EQ(train->num_classes, 5);  // max(y_test) + 1: both splits count.
  EXPECT_EQ(train->name, "npz/train");
  EXPECT_EQ(train->labels.ToVector<int32_t>(), (std::vector<int32_t>{2, 0, 1}));
  const float* x = train->images.data<float>();
  for (int i = 0; i < 72; ++i) {
    ASSERT_EQ(x[i], static_cast<float>((37 * i + 5) % 256) / 255.0f) << i;
  }
  absl::StatusOr<InMemoryDataset> test = Load(path, false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->images.shape(), (Shape{2, 2, 4, 3}));
  EXPECT_EQ(test->num_classes, 5);
  EXPECT_EQ(test->labels.ToVector<int32_t>(), (std::vector<int32_t>{4, 3}));
  const float* xt = test->images.data<float>();
  for (int i = 0; i < 48; ++i) {
    ASSERT_EQ(xt[i], static_cast<float>(i - 7) / 8.0f) << i;  // Float as is.
  }
}

TEST(NpzTest, ReadsNumpySavezStored) {
  ExpectFixture(GoldenPath("npz_stored.npz"));
}

TEST(NpzTest, ReadsNumpySavezCompressedDeflate) {
  ExpectFixture(GoldenPath("npz_deflated.npz"));
}

// The four arrays of a small valid set: x_train uint8 [4, 3, 2] (a channel
// is added), y_train int16 [4, 1], x_test float32 [2, 3, 2], y_test u8.
std::vector<ZipMember> Arrays(bool deflate) {
  std::vector<uint8_t> x_train(24);
  for (size_t i = 0; i < x_train.size(); ++i) x_train[i] = 10 * i;
  std::vector<float> x_test(12);
  for (size_t i = 0; i < x_test.size(); ++i) x_test[i] = 0.25f * i - 1.0f;
  return {
      {"x_train.npy", NpyBytes("|u1", {4, 3, 2}, RawBytes(x_train)), deflate},
      {"y_train.npy",
       NpyBytes("<i2", {4, 1}, RawBytes(std::vector<int16_t>{1, 0, 6, 2})),
       deflate},
      {"x_test.npy", NpyBytes("<f4", {2, 3, 2}, RawBytes(x_test)), deflate},
      {"y_test.npy", NpyBytes("|u1", {2}, RawBytes(std::vector<uint8_t>{3, 1})),
       deflate}};
}

void ExpectArrays(const InMemoryDataset& train, const InMemoryDataset& test) {
  EXPECT_EQ(train.images.shape(), (Shape{4, 3, 2, 1}));
  EXPECT_EQ(train.labels.ToVector<int32_t>(),
            (std::vector<int32_t>{1, 0, 6, 2}));
  EXPECT_EQ(train.num_classes, 7);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(train.images.data<float>()[i], (10.0f * i) / 255.0f);
  }
  EXPECT_EQ(test.images.shape(), (Shape{2, 3, 2, 1}));
  EXPECT_EQ(test.labels.ToVector<int32_t>(), (std::vector<int32_t>{3, 1}));
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(test.images.data<float>()[i], 0.25f * i - 1.0f);
  }
}

// NpyHeaderBytes (what `mirrortrain predict` writes) is byte for byte the
// header numpy wrote for each array of the fixture: uint8 and float32
// images, int64 labels of one dimension.
TEST(NpzTest, NpyHeaderBytesAreNumpys) {
  absl::StatusOr<ZipArchive> zip =
      ZipArchive::Open(GoldenPath("npz_stored.npz"));
  ASSERT_TRUE(zip.ok()) << zip.status();
  for (const char* name : {"x_train", "y_train", "x_test", "y_test"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::string> bytes = zip->Read(absl::StrCat(name, ".npy"));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<NpyHeader> header = ParseNpyHeader(*bytes, name);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(NpyHeaderBytes(header->descr, header->shape),
              bytes->substr(0, header->data_offset));
  }
}

TEST(NpzTest, StoredAndDeflatedArchivesReadTheSame) {
  const std::string dir = FreshTestDir("npz");
  for (bool deflate : {false, true}) {
    SCOPED_TRACE(deflate ? "deflate" : "stored");
    const std::string path = dir + (deflate ? "/d.npz" : "/s.npz");
    WriteBytes(path, ZipBytes(Arrays(deflate)));
    absl::StatusOr<InMemoryDataset> train = Load(path, true);
    absl::StatusOr<InMemoryDataset> test = Load(path, false);
    ASSERT_TRUE(train.ok()) << train.status();
    ASSERT_TRUE(test.ok()) << test.status();
    ExpectArrays(*train, *test);
  }
}

TEST(NpzTest, Zip64CentralDirectory) {
  const std::string path = FreshTestDir("npz") + "/z64.npz";
  WriteBytes(path, ZipBytes(Arrays(true), /*zip64=*/true));
  absl::StatusOr<InMemoryDataset> train = Load(path, true);
  absl::StatusOr<InMemoryDataset> test = Load(path, false);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectArrays(*train, *test);
}

TEST(NpzTest, ReadsADirectoryOfNpyFiles) {
  const std::string dir = FreshTestDir("npz");
  for (const ZipMember& m : Arrays(false)) {
    WriteBytes(dir + "/" + m.name, m.bytes);
  }
  absl::StatusOr<InMemoryDataset> train = Load(dir, true);
  absl::StatusOr<InMemoryDataset> test = Load(dir, false);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectArrays(*train, *test);
}

TEST(NpzTest, FeatureVectorsKeepTheirRank) {
  const std::string dir = FreshTestDir("npz");
  std::vector<ZipMember> arrays = Arrays(false);
  arrays[0].bytes = NpyBytes("|u1", {4, 6}, std::string(24, '\x01'));
  arrays[2].bytes = NpyBytes("<f4", {2, 6}, std::string(48, '\0'));
  WriteBytes(dir + "/f.npz", ZipBytes(arrays));
  absl::StatusOr<InMemoryDataset> train = Load(dir + "/f.npz", true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->images.shape(), (Shape{4, 6}));
}

TEST(NpzTest, NumClassesKeyBoundsTheLabels) {
  const std::string dir = FreshTestDir("npz");
  WriteBytes(dir + "/a.npz", ZipBytes(Arrays(true)));
  absl::StatusOr<InMemoryDataset> wide = Load(dir + "/a.npz", true, 10);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->num_classes, 10);
  absl::StatusOr<InMemoryDataset> narrow = Load(dir + "/a.npz", false, 5);
  ASSERT_FALSE(narrow.ok());
  // y_train's 6 is out of range even when loading the test split.
  EXPECT_EQ(narrow.status().message(),
            dir +
                "/a.npz: y_train: label 6 at index 2 is out of range "
                "[0, 5) (data.num_classes)");
}

// Writes `arrays` (with `change` applied) and expects loading `split` to
// fail with a one-line InvalidArgument containing `expected`.
void ExpectBad(std::vector<ZipMember> arrays, bool train,
               const std::string& expected) {
  const std::string path = FreshTestDir("npz_bad") + "/bad.npz";
  WriteBytes(path, ZipBytes(arrays));
  absl::StatusOr<InMemoryDataset> data = Load(path, train);
  ASSERT_FALSE(data.ok()) << expected;
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(data.status().message());
  EXPECT_THAT(message, HasSubstr(path + ": " + expected));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(NpzTest, WrongDtypesNameTheArray) {
  std::vector<ZipMember> a = Arrays(false);
  a[0].bytes = NpyBytes("<f8", {4, 3, 2}, std::string(192, '\0'));
  ExpectBad(a, true, "x_train: dtype '<f8' is neither uint8");
  // A float y holds regression targets: both splits alike.
  a = Arrays(true);
  a[1].bytes = NpyBytes("<f4", {4}, std::string(16, '\0'));
  ExpectBad(a, true,
            "y_train: holds real values but y_test class labels (integers)");
  ExpectBad(a, false,
            "y_test holds class labels (integers) but y_train real values");
  a[3].bytes = NpyBytes("<f2", {2}, std::string(4, '\0'));
  ExpectBad(a, true, "y_test: dtype '<f2' is neither float32 nor float64");
  // The other split's x is checked too: both feed one model.
  a = Arrays(false);
  a[2].bytes = NpyBytes("<i4", {2, 3, 2}, std::string(48, '\0'));
  ExpectBad(a, true, "x_test: dtype '<i4' is neither uint8");
  a = Arrays(false);
  a[0].bytes = NpyBytes(">f4", {4, 3, 2}, std::string(96, '\0'));
  ExpectBad(a, true, "x_train: dtype '>f4' is big-endian");
}

TEST(NpzTest, MissingArray) {
  std::vector<ZipMember> a = Arrays(false);
  a.pop_back();
  ExpectBad(a, false,
            "no array y_test (the archive has x_test.npy, x_train.npy, "
            "y_train.npy; it needs x_train, y_train, x_test, y_test)");
}

TEST(NpzTest, AMemberTwiceIsRefused) {
  std::vector<ZipMember> a = Arrays(false);
  a.push_back(a[1]);
  ExpectBad(a, true, "member y_train.npy appears twice");
}

TEST(NpzTest, ShapeMismatches) {
  // An empty training split, found while loading the test split (which
  // loads first and would otherwise count the classes without it).
  std::vector<ZipMember> empty = Arrays(false);
  empty[0].bytes = NpyBytes("|u1", {0, 3, 2}, "");
  ExpectBad(empty, false, "x_train: holds no examples");
  ExpectBad(empty, true, "x_train: holds no examples");
  std::vector<ZipMember> a = Arrays(false);
  a[1].bytes = NpyBytes("<i2", {3}, RawBytes(std::vector<int16_t>{1, 0, 6}));
  ExpectBad(a, true,
            "y_train has 3 examples' labels but x_train has 4 examples");
  a = Arrays(false);
  a[2].bytes = NpyBytes("<f4", {2, 2, 3}, std::string(48, '\0'));
  ExpectBad(a, false,
            "x_test has examples of shape [2,3,1] but x_train has [3,2,1]");
  // Several labels per example: both splits alike (a one-hot y_train
  // beside class labels in y_test is caught here).
  a = Arrays(false);
  a[1].bytes = NpyBytes("<i2", {4, 2}, std::string(16, '\0'));
  ExpectBad(a, true,
            "y_train has labels of shape [2] per example but y_test has []");
  ExpectBad(a, false,
            "y_test has labels of shape [] per example but y_train has [2]");
  a[1].bytes = NpyBytes("<i2", {4, 0}, "");
  ExpectBad(a, true, "y_train: shape (4, 0) holds no labels per example");
  a[1].bytes = NpyBytes("<i2", {}, std::string(2, '\0'));
  ExpectBad(a, true, "y_train: is a scalar");
  a = Arrays(false);
  a[0].bytes = NpyBytes("|u1", {24}, std::string(24, '\0'));
  ExpectBad(a, true, "x_train: shape (24,) is not [n, features]");
}

// Examples of more than three axes (clips [n, frames, h, w, c]) load where
// the model's examples have that rank (model.input_shape), and are refused
// otherwise, the error saying how.
TEST(NpzTest, ClipsLoadWhenTheModelTakesThem) {
  std::vector<ZipMember> a = Arrays(false);
  a[0].bytes = NpyBytes("|u1", {4, 2, 3, 2, 1}, std::string(48, '\x80'));
  a[2].bytes = NpyBytes("|u1", {2, 2, 3, 2, 1}, std::string(24, '\x80'));
  const std::string path = FreshTestDir("npz_clips") + "/clips.npz";
  WriteBytes(path, ZipBytes(a));
  absl::StatusOr<InMemoryDataset> clips =
      Load(path, true, std::nullopt, Shape{2, 3, 2, 1});
  ASSERT_TRUE(clips.ok()) << clips.status();
  EXPECT_EQ(clips->images.shape(), (Shape{4, 2, 3, 2, 1}));
  const absl::Status images = Load(path, true).status();
  EXPECT_THAT(std::string(images.message()),
              HasSubstr("x_train: shape (4, 2, 3, 2, 1) is not [n, features], "
                        "[n, h, w] or [n, h, w, c] (or [n, ...] of "
                        "model.input_shape's rank)"));
}

// y [n, k]: k labels per example (multi-label 0/1 labels, or a sequence's),
// kept in their shape; the classes count every label of both splits.
// A float y holds regression targets: f32 labels in their shape (float64
// narrowed as numpy's astype), no classes; non-finite targets and
// data.num_classes are refused.
TEST(NpzTest, FloatLabelsAreRegressionTargets) {
  std::vector<ZipMember> a = Arrays(false);
  a[1].bytes = NpyBytes(
      "<f8", {4, 2},
      RawBytes(std::vector<double>{0.1, -2, 3.5, 1e-3, 0, 7, -0.25, 1e30}));
  a[3].bytes =
      NpyBytes("<f4", {2, 2}, RawBytes(std::vector<float>{1, 2, 3, 4}));
  const std::string path = FreshTestDir("npz_real") + "/r.npz";
  WriteBytes(path, ZipBytes(a));
  absl::StatusOr<InMemoryDataset> train = Load(path, true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->labels.dtype(), DType::kF32);
  EXPECT_EQ(train->labels.shape(), (Shape{4, 2}));
  EXPECT_EQ(train->labels.ToVector<float>(),
            (std::vector<float>{0.1f, -2, 3.5f, 1e-3f, 0, 7, -0.25f, 1e30f}));
  EXPECT_EQ(train->num_classes, 0);
  absl::StatusOr<InMemoryDataset> test = Load(path, false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->labels.ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_FALSE(Load(path, true, 3).ok());  // data.num_classes
  a[3].bytes = NpyBytes("<f4", {2, 2},
                        RawBytes(std::vector<float>{
                            1, std::numeric_limits<float>::quiet_NaN(), 3, 4}));
  ExpectBad(a, true, "y_test: example 0 target 1 is not a finite float32");
  a[3].bytes = NpyBytes("<f4", {2, 3}, std::string(24, '\0'));
  ExpectBad(a, true,
            "y_train: has targets of shape [2] per example but y_test has [3]");
}

TEST(NpzTest, SeveralLabelsPerExampleKeepTheirShape) {
  std::vector<ZipMember> a = Arrays(false);
  a[1].bytes = NpyBytes(
      "|u1", {4, 3},
      RawBytes(std::vector<uint8_t>{1, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0}));
  a[3].bytes =
      NpyBytes("<i8", {2, 3}, RawBytes(std::vector<int64_t>{0, 1, 0, 1, 1, 1}));
  const std::string path = FreshTestDir("npz_multi") + "/m.npz";
  WriteBytes(path, ZipBytes(a));
  absl::StatusOr<InMemoryDataset> train = Load(path, true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->labels.shape(), (Shape{4, 3}));
  EXPECT_EQ(train->labels.ToVector<int32_t>(),
            (std::vector<int32_t>{1, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0}));
  EXPECT_EQ(train->labels_per_example(), 3);
  EXPECT_EQ(train->num_classes, 2);
  absl::StatusOr<InMemoryDataset> test = Load(path, false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->labels.shape(), (Shape{2, 3}));
  EXPECT_EQ(test->labels.ToVector<int32_t>(),
            (std::vector<int32_t>{0, 1, 0, 1, 1, 1}));
}

// x [n, h, w] gains a channel (grayscale images), unless the model takes
// [h, w] examples: sequences [n, steps, channels] for conv1d or attention.
TEST(NpzTest, ThreeAxesAreSequencesForAModelThatTakesThem) {
  const std::string path = FreshTestDir("npz_seq") + "/s.npz";
  WriteBytes(path, ZipBytes(Arrays(false)));
  for (const bool train : {true, false}) {
    absl::StatusOr<InMemoryDataset> images = Load(path, train);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->images.shape(), (Shape{train ? 4 : 2, 3, 2, 1}));
    absl::StatusOr<InMemoryDataset> sequences =
        Load(path, train, std::nullopt, {3, 2});
    ASSERT_TRUE(sequences.ok()) << sequences.status();
    EXPECT_EQ(sequences->images.shape(), (Shape{train ? 4 : 2, 3, 2}));
    EXPECT_EQ(sequences->images.ToVector<float>(),
              images->images.ToVector<float>());
  }
}

TEST(NpzTest, NegativeLabel) {
  std::vector<ZipMember> a = Arrays(true);
  a[3].bytes = NpyBytes("|i1", {2}, RawBytes(std::vector<int8_t>{0, -1}));
  ExpectBad(a, false, "y_test: label -1 at index 1 is negative");
}

// A u64 label past int64's range is named as it is in the file.
TEST(NpzTest, HugeUnsignedLabel) {
  std::vector<ZipMember> a = Arrays(true);
  a[3].bytes =
      NpyBytes("<u8", {2}, RawBytes(std::vector<uint64_t>{0, ~uint64_t{0}}));
  ExpectBad(a, false,
            "y_test: label 18446744073709551615 at index 1 is implausibly "
            "large");
}

TEST(NpzTest, FortranOrder) {
  std::vector<ZipMember> a = Arrays(false);
  a[0].bytes = NpyBytes("|u1", {4, 3, 2}, std::string(24, '\0'), true);
  ExpectBad(a, true, "x_train: fortran_order is True");
}

TEST(NpzTest, NonFiniteFloatInputs) {
  std::vector<ZipMember> a = Arrays(false);
  std::vector<float> x(12, 0.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  a[2].bytes = NpyBytes("<f4", {2, 3, 2}, RawBytes(x));
  ExpectBad(a, false, "x_test: element 5 is nan");
}

TEST(NpzTest, BadMagicAndBadHeader) {
  std::vector<ZipMember> a = Arrays(false);
  a[0].bytes = "not an array at all";
  ExpectBad(a, true, "x_train: bad magic");
  a = Arrays(false);
  std::string broken = NpyBytes("|u1", {4, 3, 2}, std::string(24, '\0'));
  broken.replace(broken.find("'shape'"), 7, "'shope'");
  a[0].bytes = broken;
  ExpectBad(a, true, "x_train: bad .npy header: no 'shape'");
  a = Arrays(false);
  broken = NpyBytes("|u1", {4, 3, 2}, std::string(24, '\0'));
  broken[10] = '[';  // The dict's opening brace.
  a[0].bytes = broken;
  ExpectBad(a, true, "x_train: bad .npy header: expected '{'");
}

TEST(NpzTest, TruncatedArrayInsideTheArchive) {
  std::vector<ZipMember> a = Arrays(true);
  a[0].bytes.resize(a[0].bytes.size() - 5);
  ExpectBad(a, true,
            "x_train: truncated: shape (4, 3, 2) of |u1 needs 24 bytes, the "
            "file holds 19");
}

TEST(NpzTest, TruncatedArchiveFile) {
  for (bool deflate : {false, true}) {
    const std::string dir = FreshTestDir("npz");
    const std::string path = dir + "/cut.npz";
    const std::string whole = ZipBytes(Arrays(deflate));
    WriteBytes(path, whole.substr(0, whole.size() / 2));
    absl::StatusOr<InMemoryDataset> data = Load(path, true);
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().message(),
              path +
                  ": truncated, or not a ZIP archive (.npz): no "
                  "end-of-central-directory record");
  }
}

TEST(NpzTest, TruncatedNpyFileInADirectory) {
  const std::string dir = FreshTestDir("npz");
  for (const ZipMember& m : Arrays(false)) {
    WriteBytes(dir + "/" + m.name, m.name == "y_test.npy"
                                       ? m.bytes.substr(0, m.bytes.size() - 1)
                                       : m.bytes);
  }
  absl::StatusOr<InMemoryDataset> data = Load(dir, true);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(),
              HasSubstr(dir + "/y_test.npy: truncated: shape (2,) of |u1 "
                              "needs 2 bytes, the file holds 1"));
}

TEST(NpzTest, CorruptMembersFailTheirCrc) {
  const std::string dir = FreshTestDir("npz");
  const std::string path = dir + "/crc.npz";
  std::string bytes = ZipBytes(Arrays(false));
  // The last element of x_train (stored): the archive still parses.
  const size_t x_train_end = 30 + 11 + Arrays(false)[0].bytes.size();
  bytes[x_train_end - 1] ^= 0x40;
  WriteBytes(path, bytes);
  absl::StatusOr<InMemoryDataset> data = Load(path, true);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().message(),
            path + ": member x_train.npy: CRC mismatch (corrupt)");
}

TEST(NpzTest, CorruptDeflateStream) {
  const std::string dir = FreshTestDir("npz");
  const std::string path = dir + "/bad_deflate.npz";
  std::string bytes = ZipBytes(Arrays(true));
  bytes[30 + 11] = '\xff';  // x_train's first deflate byte: a bad block.
  WriteBytes(path, bytes);
  absl::StatusOr<InMemoryDataset> data = Load(path, true);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(),
              HasSubstr(path + ": member x_train.npy: corrupt deflate data"));
}

TEST(NpzTest, MissingPathAndNpyInsteadOfNpz) {
  const std::string dir = FreshTestDir("npz");
  absl::StatusOr<InMemoryDataset> none = Load(dir + "/none.npz", true);
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr(dir + "/none.npz: no such"));
  WriteBytes(dir + "/x.npy", Arrays(false)[0].bytes);
  absl::StatusOr<InMemoryDataset> npy = Load(dir + "/x.npy", true);
  ASSERT_FALSE(npy.ok());
  EXPECT_THAT(npy.status().message(),
              HasSubstr(dir + "/x.npy: is a .npy array, not an .npz"));
}

TEST(NpyTest, ParsesNumpyHeaders) {
  // As numpy writes them, version 1.0 and 2.0 (4-byte length), and a
  // Python 2 header with long integers.
  std::string v1 = NpyBytes("<i8", {5}, std::string(40, '\0'));
  absl::StatusOr<NpyArray> a = ParseNpy(v1, "v1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->header.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(a->header.kind, 'i');
  EXPECT_EQ(a->header.item_bytes, 8);
  EXPECT_EQ(a->header.data_offset, 128u);  // 10 + 57 + '\n', padded to 64s.

  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, "
      "'shape': (2L, 3L), }\n";
  std::string v2("\x93NUMPY\x02\x00", 8);
  v2 += std::string({static_cast<char>(dict.size()), 0, 0, 0}) + dict;
  absl::StatusOr<NpyHeader> h = ParseNpyHeader(v2, "v2");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->data_offset, 12 + dict.size());

  // A scalar, and a rank-1 array in Fortran order (the same layout).
  EXPECT_TRUE(ParseNpy(NpyBytes("|u1", {}, "x"), "s").ok());
  EXPECT_TRUE(ParseNpy(NpyBytes("|u1", {3}, "abc", true), "f").ok());
}

TEST(NpyTest, RejectsWhatItCannotRead) {
  auto error = [](const std::string& bytes) {
    return std::string(ParseNpy(bytes, "a.npy").status().message());
  };
  EXPECT_EQ(error(NpyBytes("|u1", {2}, "abc")),
            "a.npy: trailing bytes: 1 after the 2 bytes of shape (2,) of |u1");
  EXPECT_EQ(error(NpyBytes("|O", {2}, "ab")),
            "a.npy: dtype '|O' is not a numeric dtype");
  std::string structured = NpyBytes("|u1", {2}, "ab");
  structured.replace(structured.find("'|u1'"), 5, "[('a', '<i4')]");
  EXPECT_THAT(error(structured), HasSubstr("structured dtype"));
  std::string v9 = NpyBytes("|u1", {2}, "ab");
  v9[6] = 9;
  EXPECT_THAT(error(v9), HasSubstr("unsupported .npy version 9.0"));
  EXPECT_THAT(error(NpyBytes("|u1", {2}, "ab").substr(0, 20)),
              HasSubstr("truncated: the .npy header is"));
  EXPECT_THAT(error("\x93NUM"), HasSubstr("truncated"));
  EXPECT_THAT(error(NpyBytes("|u1", {int64_t{1} << 30, int64_t{1} << 30}, "")),
              HasSubstr("implausible shape"));
}

TEST(ZipArchiveTest, ReadsPrefixesAndListsMembers) {
  const std::string path = FreshTestDir("zip") + "/a.zip";
  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i % 251);
  WriteBytes(path, ZipBytes({{"big", big, true}, {"small", "hello", false}}));
  absl::StatusOr<ZipArchive> zip = ZipArchive::Open(path);
  ASSERT_TRUE(zip.ok()) << zip.status();
  EXPECT_EQ(zip->ListMembers(), "big, small");
  EXPECT_EQ(*zip->Read("big"), big);
  EXPECT_EQ(*zip->Read("big", 1000), big.substr(0, 1000));
  EXPECT_EQ(*zip->Read("small", 2), "he");
  EXPECT_EQ(zip->Read("other").status().message(),
            path + ": no member other (it has big, small)");
  // numpy's archive opens too (its local headers carry ZIP64 extras).
  absl::StatusOr<ZipArchive> numpy =
      ZipArchive::Open(GoldenPath("npz_deflated.npz"));
  ASSERT_TRUE(numpy.ok()) << numpy.status();
  EXPECT_EQ(numpy->ListMembers(),
            "x_test.npy, x_train.npy, y_test.npy, y_train.npy");
  // A 128-byte .npy header (numpy pads to 64) and 2 uint8 labels.
  EXPECT_EQ(numpy->Read("y_test.npy")->size(), 130u);
}

}  // namespace
}  // namespace mirrortrain::trainer
