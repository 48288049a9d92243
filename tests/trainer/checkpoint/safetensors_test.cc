// safetensors write/read: round trips, header layout and bytes, the strict
// reading of the JSON header, every malformed-file case, atomicity, and
// interop with a file written by the Python `safetensors` package
// (scripts/golden/safetensors_interop.py).
//
// Set MT_SAFETENSORS_TEST_KEEP_DIR=<dir> to have RoundTripEveryDtype keep its
// file there as <dir>/mirrortrain_roundtrip.safetensors (for
// `scripts/golden/safetensors_interop.py --check`).
#include "trainer/checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/logging/crc32c.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// --- safetensors -----------------------------------------------------------

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir("safetensors_test"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const {
    return (fs::path(dir_) / name).string();
  }

  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
  // A file with the given header text and data bytes; `header_length`
  // overrides the length field when non-negative.
  std::string WriteRawFile(const std::string& name, const std::string& header,
                           const std::string& data,
                           int64_t header_length = -1) {
    const uint64_t n = header_length >= 0 ? static_cast<uint64_t>(header_length)
                                          : header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    bytes += header;
    bytes += data;
    const std::string path = Path(name);
    WriteBytes(path, bytes);
    return path;
  }
  std::vector<std::string> DirEntries() const {
    return mirrortrain::testing::SortedDirEntries(dir_);
  }

  std::string dir_;
};

template <typename T>
void ExpectTensorEq(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  EXPECT_TRUE(actual.device().is_cpu());
  EXPECT_EQ(actual.ToVector<T>(), expected.ToVector<T>());
}

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  const std::vector<NamedTensor> tensors = {
      {"dense/kernel", Tensor::FromVector<float>(
                           {0.5f, -1.25f, 3.f, -0.f, 1e30f, 1e-30f}, {2, 3})},
      {"dense/bias", Tensor::FromVector<double>({0.1, -0.2, 0.3, 1e300}, {4})},
      {"labels",
       Tensor::FromVector<int32_t>({0, -1, std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min()},
                                   {2, 2})},
      {"global_step", Tensor::Scalar<int64_t>(1234567890123)},
      {"scalar_f32", Tensor::Scalar<float>(-2.5f)},
      {"empty_f32", Tensor::HostZeros(DType::kF32, {0, 3})},
      {"empty_i64", Tensor::HostZeros(DType::kI64, {0})},
      {"offsets",
       Tensor::FromVector<int64_t>({std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), 7},
                                   {3})},
  };
  const std::map<std::string, std::string> metadata = {
      {"format", "mirrortrain/1"}, {"step", "1234"}, {"quote", "a \"b\" \\ é"}};
  const char* keep = std::getenv("MT_SAFETENSORS_TEST_KEEP_DIR");
  const std::string path =
      keep != nullptr
          ? (fs::path(keep) / "mirrortrain_roundtrip.safetensors").string()
          : Path("roundtrip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata(), metadata);
  EXPECT_THAT(file->names(),
              ElementsAre("dense/kernel", "dense/bias", "labels", "global_step",
                          "scalar_f32", "empty_f32", "empty_i64", "offsets"));
  for (const NamedTensor& t : tensors) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE(file->Contains(t.name));
    absl::StatusOr<SafetensorsFile::Info> info = file->GetInfo(t.name);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->dtype, t.tensor.dtype());
    EXPECT_EQ(info->shape, t.tensor.shape());
    absl::StatusOr<Tensor> got = file->Get(t.name);
    ASSERT_TRUE(got.ok()) << got.status();
    switch (t.tensor.dtype()) {
      case DType::kF32:
        ExpectTensorEq<float>(*got, t.tensor);
        break;
      case DType::kF64:
        ExpectTensorEq<double>(*got, t.tensor);
        break;
      case DType::kI32:
        ExpectTensorEq<int32_t>(*got, t.tensor);
        break;
      case DType::kI64:
        ExpectTensorEq<int64_t>(*got, t.tensor);
        break;
    }
  }
  // -0.0 keeps its sign bit.
  EXPECT_TRUE(std::signbit(file->Get("dense/kernel")->data<float>()[3]));
  EXPECT_FALSE(file->Contains("nope"));
  absl::StatusOr<Tensor> missing = file->Get("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'nope'"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
  EXPECT_EQ(file->GetInfo("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, HeaderIsPaddedSoDataIsEightByteAligned) {
  for (int name_length = 1; name_length <= 9; ++name_length) {
    const std::string path = Path("aligned.safetensors");
    const std::vector<NamedTensor> tensors = {
        {std::string(name_length, 'x'),
         Tensor::FromVector<float>({1.f, 2.f}, {2})}};
    ASSERT_TRUE(WriteSafetensors(path, tensors, {}).ok());
    const std::string bytes = testing::ReadFile(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ((8 + n) % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + n + 8);
    const std::string header = bytes.substr(8, n);
    EXPECT_THAT(header, StartsWith("{\""));
    // Only spaces after the JSON, fewer than the alignment.
    const size_t close = header.rfind('}');
    EXPECT_LT(header.size() - close - 1, 8u);
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);
    // No metadata given: no __metadata__ key, as the reference writer does.
    EXPECT_EQ(header.find("__metadata__"), std::string::npos);
    EXPECT_EQ(header.substr(0, close + 1),
              absl::StrCat("{\"", std::string(name_length, 'x'),
                           "\":{\"dtype\":\"F32\",\"shape\":[2],"
                           "\"data_offsets\":[0,8]}}"));
  }
}

TEST_F(SafetensorsTest, HeaderBytesEscapeOnlyWhatJsonRequires) {
  // Compact JSON, members in the order written (metadata first, sorted by
  // key, then the tensors as given), only '"', '\\' and control characters
  // escaped, UTF-8 kept as is.
  const std::string path = Path("escapes.safetensors");
  const std::string odd = "a\"\\/\n\t\x01\x1f\x7f\xC3\xA9\xF0\x9F\x98\x80";
  ASSERT_TRUE(
      WriteSafetensors(path,
                       {{"z", Tensor::Scalar<float>(1.f)},
                        {odd, Tensor::FromVector<int64_t>({1, 2}, {1, 2})}},
                       {{"step", "7"}, {"note", odd}})
          .ok());
  const std::string bytes = testing::ReadFile(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string escaped =
      "a\\\"\\\\/\\n\\t\\u0001\\u001f\x7f\xC3\xA9\xF0\x9F\x98\x80";
  const std::string json =
      R"({"__metadata__":{"note":")" + escaped + R"(","step":"7"},)" +
      R"("z":{"dtype":"F32","shape":[],"data_offsets":[0,4]},")" + escaped +
      R"(":{"dtype":"I64","shape":[1,2],"data_offsets":[4,20]}})";
  EXPECT_EQ(bytes.substr(8, n),
            json + std::string((8 - json.size() % 8) % 8, ' '));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("z", odd));
  EXPECT_EQ(file->metadata().at("note"), odd);
}

TEST_F(SafetensorsTest, ReadsEscapesAndKeepsHeaderOrder) {
  const std::string entry =
      R"({"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  const std::string path = WriteRawFile(
      "order.safetensors",
      R"( {"zeta":)" + entry + R"(, "alpha" : )" + entry +
          R"(,"__metadata__":{"s":"q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 raw é"},)"
          R"("m\u0069d":)" +
          entry + "}\n\t",
      "");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("zeta", "alpha", "mid"));
  EXPECT_EQ(file->metadata().at("s"),
            "q\" b\\ s/ \b\f\n\r\t \xC3\xA9 \xF0\x9F\x98\x80 raw \xC3\xA9");
}

TEST_F(SafetensorsTest, EmptyFileListRoundTrips) {
  const std::string path = Path("nothing.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}, {{"k", "v"}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->names().empty());
  EXPECT_EQ(file->metadata().at("k"), "v");
}

TEST_F(SafetensorsTest, WriteRejectsBadNamesAndCreatesNothing) {
  const Tensor t = Tensor::Scalar<float>(1.f);
  const std::string path = Path("bad.safetensors");
  const std::vector<std::pair<std::vector<NamedTensor>, std::string>> cases = {
      {{{"a", t}, {"a", t}}, "duplicate tensor name 'a'"},
      {{{"", t}}, "invalid tensor name ''"},
      {{{"__metadata__", t}}, "invalid tensor name '__metadata__'"},
      {{{"a", Tensor()}}, "tensor 'a' is undefined"},
      {{{"\xC0\xAF", t}}, "invalid tensor name '\xC0\xAF'"},  // Overlong '/'.
  };
  for (const auto& [tensors, expected] : cases) {
    absl::Status s = WriteSafetensors(path, tensors, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << expected;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path));
    EXPECT_THAT(std::string(s.message()), HasSubstr(expected));
  }
  for (const std::string bad : {"\xF4\x90\x80\x80",  // Above U+10FFFF.
                                "\xED\xA0\x80",      // A UTF-16 surrogate.
                                "\xE2\x82"}) {       // Truncated.
    absl::Status s = WriteSafetensors(path, {{"a", t}}, {{"k", bad}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("metadata entry 'k' is not valid UTF-8"));
  }
  EXPECT_TRUE(DirEntries().empty());
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryFailsAndCreatesNothing) {
  const std::string missing_dir = Path("no/such/dir");
  const std::string path = missing_dir + "/x.safetensors";
  absl::Status s =
      WriteSafetensors(path, {{"a", Tensor::Scalar<float>(1.f)}}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_FALSE(fs::exists(Path("no")));
  EXPECT_TRUE(DirEntries().empty());
}

TEST_F(SafetensorsTest, OverwriteReplacesWholeFileAndLeavesNoTemporary) {
  const std::string path = Path("x.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"a", Tensor::Scalar<float>(1.f)}}, {}).ok());
  ASSERT_TRUE(WriteSafetensors(
                  path, {{"b", Tensor::FromVector<double>({2, 3}, {2})}}, {})
                  .ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("b"));
  EXPECT_THAT(DirEntries(), ElementsAre("x.safetensors"));
}

TEST_F(SafetensorsTest, FailedCommitRemovesTemporaryAndKeepsTarget) {
  // rename() of a file over a non-empty directory fails, which exercises
  // the failure path after the temporary file was fully written.
  const std::string path = Path("occupied.safetensors");
  fs::create_directories(path);
  WriteBytes(path + "/keep", "precious");
  absl::Status s =
      WriteSafetensors(path, {{"a", Tensor::Scalar<float>(1.f)}}, {});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(DirEntries(), ElementsAre("occupied.safetensors"));
  EXPECT_EQ(testing::ReadFile(path + "/keep"), "precious");
}

// Until Commit the file has no name (O_TMPFILE): a process killed while
// writing leaves nothing in the directory. Commit names it and renames it
// over the target.
TEST_F(SafetensorsTest, AnUncommittedFileHasNoName) {
  const int probe = ::open(Path("").c_str(), O_TMPFILE | O_WRONLY, 0644);
  if (probe < 0) GTEST_SKIP() << "this file system has no O_TMPFILE";
  ::close(probe);
  if (::access("/proc/self/fd", X_OK) != 0) GTEST_SKIP() << "no /proc";
  const std::string path = Path("y.bin");
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->Append("some bytes").ok());
  EXPECT_THAT(DirEntries(), ::testing::IsEmpty());
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_TRUE(writer->renamed());
  EXPECT_THAT(DirEntries(), ElementsAre("y.bin"));
  EXPECT_EQ(testing::ReadFile(path), "some bytes");
  // The mode a named file gets: 0644 under the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(fs::status(path).permissions(),
            static_cast<fs::perms>(0644 & ~mask));
  // Destroyed uncommitted: still nothing, and the target is kept.
  {
    absl::StatusOr<AtomicFileWriter> dropped = AtomicFileWriter::Create(path);
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    ASSERT_TRUE(dropped->Append("other bytes").ok());
  }
  EXPECT_THAT(DirEntries(), ElementsAre("y.bin"));
  EXPECT_EQ(testing::ReadFile(path), "some bytes");
}

// A symbolic link at the temporary name (a leftover, or planted) is
// removed, not followed: the file it names keeps its bytes.
TEST_F(SafetensorsTest, ALinkAtTheTemporaryNameIsNotFollowed) {
  const std::string path = Path("x.safetensors");
  const std::string victim = Path("victim.txt");
  WriteBytes(victim, "precious");
  fs::create_symlink(victim, absl::StrCat(path, ".tmp.", getpid()));
  ASSERT_TRUE(
      WriteSafetensors(path, {{"a", Tensor::Scalar<float>(1.f)}}, {}).ok());
  EXPECT_EQ(testing::ReadFile(victim), "precious");
  EXPECT_THAT(DirEntries(), ElementsAre("victim.txt", "x.safetensors"));
  EXPECT_TRUE(SafetensorsFile::Open(path).ok());
}

TEST_F(SafetensorsTest, OpenMissingFileIsNotFound) {
  const std::string path = Path("absent.safetensors");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
}

struct BadFileCase {
  std::string label;
  std::string header;
  std::string data;
  int64_t header_length;  // -1: the header's size.
  absl::StatusCode code;
  std::string reason;
};

TEST_F(SafetensorsTest, RejectsMalformedFiles) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string eight(8, '\x01');
  const std::vector<BadFileCase> cases = {
      {"header length beyond the file", "{}", "", 1000,
       absl::StatusCode::kDataLoss, "header length 1000 exceeds the 2 bytes"},
      {"not JSON", "{nope}", "", -1, absl::StatusCode::kInvalidArgument,
       "header is not valid JSON (JSON parse error at byte 2: syntax error"},
      {"zero-filled", std::string(16, '\0'), "", -1,
       absl::StatusCode::kInvalidArgument,
       "header holds a NUL byte at offset 0 of its 16 bytes (a zero-filled or "
       "damaged file?)"},
      {"not UTF-8", "{\"\xFF\":1}", "", -1, absl::StatusCode::kInvalidArgument,
       "ill-formed UTF-8"},
      {"not an object", "[1,2]", "", -1, absl::StatusCode::kInvalidArgument,
       "header is an array, not a JSON object"},
      {"entry not an object", R"({"a":3})", "", -1,
       absl::StatusCode::kInvalidArgument,
       "tensor 'a': entry is an integer, not an object"},
      {"missing dtype", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight,
       -1, absl::StatusCode::kInvalidArgument, "tensor 'a': missing 'dtype'"},
      {"missing shape", R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight,
       -1, absl::StatusCode::kInvalidArgument, "tensor 'a': missing 'shape'"},
      {"missing offsets", R"({"a":{"dtype":"F32","shape":[2]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "tensor 'a': missing 'data_offsets'"},
      {"extra key", "{\"a\":{" + f32x2 + R"(,"x":1}})", eight, -1,
       absl::StatusCode::kInvalidArgument, "tensor 'a': unexpected key 'x'"},
      {"unknown dtype",
       R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "tensor 'a': unsupported dtype 'Q7'"},
      {"unsupported dtype",
       R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "tensor 'a': unsupported dtype 'U8' (mirrortrain reads F32, F64, I32 "
       "and I64, and F16 and BF16 as F32)"},
      {"half size mismatch",
       R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "data_offsets [0,8] span 8 bytes but dtype BF16 and shape [2] need 4"},
      {"dtype not a string",
       R"({"a":{"dtype":1,"shape":[2],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument, "dtype is not a string"},
      {"negative dim",
       R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "shape must hold non-negative integers, got -2"},
      {"shape not array",
       R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument, "shape is an integer, not an array"},
      {"three offsets",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "data_offsets [0,4,8] is not [begin, end]"},
      {"reversed offsets",
       R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "data_offsets [8,0] is not [begin, end]"},
      {"size mismatch",
       R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "data_offsets [0,8] span 8 bytes but dtype F32 and shape [3] need 12"},
      {"size overflow",
       R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
       eight, -1, absl::StatusCode::kInvalidArgument, "need more than 2^64"},
      {"offsets past the end", "{\"a\":{" + f32x2 + "}}", "1234", -1,
       absl::StatusCode::kDataLoss,
       "tensor 'a': data_offsets [0,8] run past the end of the 4-byte data "
       "section (truncated file?)"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), -1, absl::StatusCode::kInvalidArgument,
       "data of tensors 'a' and 'b' overlap"},
      {"gap",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       std::string(12, '\0'), -1, absl::StatusCode::kInvalidArgument,
       "non-contiguous data: 4 unused bytes before tensor 'b'"},
      {"not starting at 0",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       std::string(8, '\0'), -1, absl::StatusCode::kInvalidArgument,
       "non-contiguous data: 4 unused bytes before tensor 'a'"},
      {"trailing bytes", "{\"a\":{" + f32x2 + "}}", eight + "xyz", -1,
       absl::StatusCode::kInvalidArgument,
       "3 unused bytes after the last tensor's data"},
      {"metadata value not a string",
       R"({"__metadata__":{"step":12},"a":{)" + f32x2 + "}}", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "__metadata__ value for 'step' is an integer, not a string"},
      {"metadata not an object", R"({"__metadata__":"x"})", "", -1,
       absl::StatusCode::kInvalidArgument, "__metadata__ is not an object"},
      {"duplicate tensor", "{\"a\":{" + f32x2 + "},\"a\":{" + f32x2 + "}}",
       eight, -1, absl::StatusCode::kInvalidArgument, "duplicate key \"a\""},
      {"duplicate entry key", "{\"a\":{" + f32x2 + R"(,"shape":[2]}})", eight,
       -1, absl::StatusCode::kInvalidArgument, "duplicate key \"shape\""},
      {"duplicate metadata key",
       R"({"__metadata__":{"k":"1","k":"2"},"a":{)" + f32x2 + "}}", eight, -1,
       absl::StatusCode::kInvalidArgument, "duplicate key \"k\""},
      {"fraction in shape",
       R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "shape must hold integers, got 2.0 (a number with a fraction or "
       "exponent"},
      {"exponent in offsets",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}})", eight, -1,
       absl::StatusCode::kInvalidArgument,
       "data_offsets must hold integers, got 8.0"},
      {"offset of 2^64",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}})",
       eight, -1, absl::StatusCode::kInvalidArgument,
       "data_offsets must hold integers, got 1.8446744073709552e+19"},
      {"dim of 2^63",
       R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})",
       eight, -1, absl::StatusCode::kInvalidArgument,
       "shape must hold integers below 2^63, got 9223372036854775808"},
      {"entry a number", R"({"a":1.5})", "", -1,
       absl::StatusCode::kInvalidArgument,
       "tensor 'a': entry is a number, not an object"},
      {"checksum not hex",
       R"({"__metadata__":{"data_crc32c":"0000000g"},"a":{)" + f32x2 + "}}",
       eight, -1, absl::StatusCode::kInvalidArgument,
       "metadata 'data_crc32c' is not 8 lowercase hex digits: '0000000g'"},
      {"checksum in upper case",
       R"({"__metadata__":{"data_crc32c":"ABCDEF01"},"a":{)" + f32x2 + "}}",
       eight, -1, absl::StatusCode::kInvalidArgument,
       "is not 8 lowercase hex digits"},
      {"checksum too short",
       R"({"__metadata__":{"data_crc32c":"123"},"a":{)" + f32x2 + "}}", eight,
       -1, absl::StatusCode::kInvalidArgument, "is not 8 lowercase hex digits"},
  };
  for (const BadFileCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path =
        WriteRawFile("bad.safetensors", c.header, c.data, c.header_length);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), c.code) << file.status();
    EXPECT_THAT(std::string(file.status().message()), StartsWith(path + ": "));
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(c.reason));
  }
}

// A header longer than the reference implementation's 100 MB cap is
// refused before it is read or parsed; here the file is sparse, so it takes
// no disk. Before the cap it was read whole and parsed.
TEST_F(SafetensorsTest, AHeaderOverTheCapIsRefusedUnread) {
  const uint64_t length = 100'000'001;
  const std::string path = WriteRawFile("huge.safetensors", "", "", length);
  fs::resize_file(path, 8 + length);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(file.status().message()),
            path +
                ": header length 100000001 exceeds the limit of 100000000 "
                "bytes");
}

// A file carrying data_crc32c opens only while its data matches: any
// flipped data bit is DataLoss naming both checksums.
TEST_F(SafetensorsTest, DataChecksumIsVerifiedWhenPresent) {
  const std::string data = "\x01\x02\x03\x04\x05\x06\x07\x08";
  const std::string crc = absl::StrFormat("%08x", Crc32c(data));
  const std::string header =
      R"({"__metadata__":{"data_crc32c":")" + crc +
      R"("},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_TRUE(
      SafetensorsFile::Open(WriteRawFile("ok.safetensors", header, data)).ok());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    std::string flipped = data;
    flipped[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    const std::string path = WriteRawFile("bad.safetensors", header, flipped);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << bit;
    EXPECT_THAT(
        std::string(file.status().message()),
        HasSubstr(absl::StrCat(path,
                               ": the tensor data does not match its checksum "
                               "(data_crc32c ",
                               crc, ", computed ",
                               absl::StrFormat("%08x", Crc32c(flipped)))));
  }
}

TEST_F(SafetensorsTest, TensorDataCrc32cCoversTheTensorsInOrder) {
  const Tensor a = Tensor::FromVector<float>({1, 2}, {2});
  const Tensor b = Tensor::FromVector<int64_t>({7}, {});
  std::string bytes(static_cast<const char*>(a.raw_data()), a.bytes());
  bytes.append(static_cast<const char*>(b.raw_data()), b.bytes());
  EXPECT_EQ(*TensorDataCrc32c({{"a", a}, {"b", b}}),
            absl::StrFormat("%08x", Crc32c(bytes)));
  EXPECT_NE(*TensorDataCrc32c({{"b", b}, {"a", a}}),
            *TensorDataCrc32c({{"a", a}, {"b", b}}));
}

TEST_F(SafetensorsTest, RejectsHeadersThatAreNotStrictJson) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"",
       "JSON parse error at byte 0: syntax error while parsing value - "
       "unexpected end of input"},
      {"{} {}",
       "JSON parse error at byte 3: syntax error while parsing value - "
       "unexpected '{'; expected end of input"},
      {R"({"a":1,})", "at byte 7: syntax error while parsing object key"},
      {R"({"a":[1,]})", "at byte 8: syntax error while parsing value"},
      {R"({"a":[01]})", "at byte 7: syntax error"},
      {R"({"a":1e400})",
       "JSON parse error at byte 9: number overflow parsing '1e400'"},
      {R"({"a":NaN})", "at byte 5: syntax error"},
      {R"({/* c */})", "at byte 1: syntax error"},
      {"{\"a\nb\":1}", "control character U+000A (LF) must be escaped"},
      {"{\"\xC0\xAF\":1}", "ill-formed UTF-8"},          // Overlong '/'.
      {"{\"\xED\xA0\x80\":1}", "ill-formed UTF-8"},      // Raw surrogate.
      {"{\"\xF4\x90\x80\x80\":1}", "ill-formed UTF-8"},  // Above U+10FFFF.
      {"{\"\xE2\x82\":1}", "ill-formed UTF-8"},          // Truncated.
      {R"({"\ud800":1})", "surrogate U+D800..U+DBFF must be followed"},
      {R"({"\udc00":1})", "surrogate U+DC00..U+DFFF must follow"},
      {R"({"\x":1})", "forbidden character after backslash"},
      // The first problem in the text is the one reported.
      {R"({"a":1,"a":2,})", "JSON parse error: duplicate key \"a\""},
      {"{\"a\":" + std::string(257, '[') + std::string(257, ']') + "}",
       "JSON parse error: nesting deeper than 256"},
      {std::string(300, '['), "JSON parse error: nesting deeper than 256"},
      // Depth 256 is parsed (and the entry then rejected).
      {"{\"a\":" + std::string(256, '[') + std::string(256, ']') + "}",
       "tensor 'a': entry is an array, not an object"},
  };
  for (const auto& [header, expected] : cases) {
    SCOPED_TRACE(header.substr(0, 40));
    const std::string path = WriteRawFile("bad.safetensors", header, "");
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(file.status().message()), StartsWith(path + ": "));
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(expected));
  }
}

TEST_F(SafetensorsTest, RejectsFilesShorterThanTheLengthField) {
  for (size_t size = 0; size < 8; ++size) {
    const std::string path = Path("short.safetensors");
    WriteBytes(path, std::string(size, '\0'));
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << size;
    EXPECT_THAT(
        std::string(file.status().message()),
        HasSubstr(absl::StrCat(path, ": file is ", size, " bytes, too short")));
  }
}

TEST_F(SafetensorsTest, EveryTruncationOfAValidFileIsRejected) {
  const std::string path = Path("good.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path,
                       {{"w", Tensor::FromVector<float>({1, 2, 3}, {3})},
                        {"b", Tensor::Scalar<double>(4)}},
                       {{"step", "7"}})
          .ok());
  const std::string bytes = testing::ReadFile(path);
  const std::string cut = Path("cut.safetensors");
  for (size_t size = 0; size < bytes.size(); ++size) {
    WriteBytes(cut, bytes.substr(0, size));
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(cut);
    ASSERT_FALSE(file.ok()) << "accepted a file cut to " << size << " bytes";
    // Whether the cut is in the length field, the header or the data, it
    // is reported as truncation, never as some other malformation.
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << size;
    EXPECT_THAT(std::string(file.status().message()), StartsWith(cut + ": "))
        << size;
    EXPECT_THAT(std::string(file.status().message()),
                HasSubstr("truncated file?"))
        << size;
  }
}

TEST_F(SafetensorsTest, ReadsFileWrittenByPythonSafetensors) {
  // Written by scripts/golden/safetensors_interop.py (safetensors package);
  // the values here mirror golden_tensors() there.
  const std::string path =
      mirrortrain::testing::GoldenPath("safetensors_python.safetensors");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{
                                  {"format", "mirrortrain-test"},
                                  {"step", "1234"},
                                  {"note", "quote \" and \xC3\xA9"}}));
  std::vector<std::string> names = file->names();
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ElementsAre("dense/bias", "dense/kernel", "empty",
                                 "global_step", "labels", "offsets"));
  ExpectTensorEq<float>(
      *file->Get("dense/kernel"),
      Tensor::FromVector<float>(
          {0.5f, -1.25f, 3.0f, -0.0f, static_cast<float>(1e30),
           static_cast<float>(std::ldexp(1.0, -20))},
          {2, 3}));
  ExpectTensorEq<double>(*file->Get("dense/bias"),
                         Tensor::FromVector<double>({0.1, -0.2, 0.3}, {3}));
  ExpectTensorEq<int32_t>(*file->Get("labels"),
                          Tensor::FromVector<int32_t>(
                              {0, -1, 2147483647, -2147483647 - 1}, {2, 2}));
  ExpectTensorEq<int64_t>(*file->Get("global_step"),
                          Tensor::Scalar<int64_t>(1234567890123));
  ExpectTensorEq<int64_t>(
      *file->Get("offsets"),
      Tensor::FromVector<int64_t>({std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(), 7},
                                  {3}));
  ExpectTensorEq<float>(*file->Get("empty"),
                        Tensor::HostZeros(DType::kF32, {0, 4}));
}

// F16 and BF16 (scripts/golden/safetensors_half.py, written by the Python
// package as PyTorch writes them) read as F32 with the bits numpy's
// widening gives: subnormals, signed zeros, infinities and NaN payloads.
TEST_F(SafetensorsTest, ReadsHalfPrecisionAsFloat32) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(
      mirrortrain::testing::GoldenPath("safetensors_half.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  std::ifstream golden(
      mirrortrain::testing::GoldenPath("safetensors_half.txt"));
  ASSERT_TRUE(golden.good());
  std::map<std::string, std::string> file_dtype = {{"dense/kernel", "F16"},
                                                   {"dense/bias", "BF16"}};
  int checked = 0;
  for (std::string line; std::getline(golden, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(": ");
    ASSERT_NE(colon, std::string::npos) << line;
    const std::string name = line.substr(0, colon);
    SCOPED_TRACE(name);
    std::vector<uint32_t> want;
    std::istringstream bits(line.substr(colon + 2));
    for (std::string word; bits >> word;) {
      want.push_back(static_cast<uint32_t>(std::stoul(word, nullptr, 16)));
    }
    absl::StatusOr<SafetensorsFile::Info> info = file->GetInfo(name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->dtype, DType::kF32);
    EXPECT_EQ(info->file_dtype, file_dtype.at(name));
    absl::StatusOr<Tensor> t = file->Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->dtype(), DType::kF32);
    ASSERT_EQ(t->shape(), info->shape);
    ASSERT_EQ(t->num_elements(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(t->data<float>()[i]), want[i]) << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST_F(SafetensorsTest, WritesTensorsFromAGpu) {
  if (!cuda::Built()) GTEST_SKIP() << "built without CUDA";
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  const Tensor host = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  absl::StatusOr<Tensor> gpu = host.To(Device::Cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::string path = Path("gpu.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", *gpu}}, {}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectTensorEq<float>(*file->Get("w"), host);
}

}  // namespace
}  // namespace mirrortrain::trainer
