// CRC-32C vectors and an EventWriter round trip through an independent
// TFRecord + protobuf reader written here.
//
// Set MT_EVENT_WRITER_TEST_KEEP_DIR=<dir> to have RoundTrip write its file
// there and keep it (for scripts/check_tensorboard.py).
#include "trainer/logging/event_writer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tensor/status_macros.h"
#include "trainer/logging/crc32c.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;

// --- CRC-32C ---------------------------------------------------------------

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<char>(i);
    descending[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendEqualsWholeAtEverySplit) {
  std::string data(67, '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>(i * 37 + 11);
  }
  const uint32_t whole = Crc32c(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t head = Crc32c(absl::string_view(data).substr(0, split));
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split),
              whole)
        << "split " << split;
  }
}

TEST(Crc32cTest, MaskMatchesFormulaAndRoundTrips) {
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xffffffffu, 0x80000000u}) {
    EXPECT_EQ(MaskCrc32c(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
  }
}

// --- Independent reader ------------------------------------------------------

uint64_t LoadLittleEndian(absl::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return v;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// Splits a TFRecord file into its records, checking both CRCs of each.
absl::StatusOr<std::vector<std::string>> ReadRecords(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const std::string file, ReadFile(path));
  absl::string_view rest(file);
  std::vector<std::string> records;
  while (!rest.empty()) {
    if (rest.size() < 12) return absl::DataLossError("truncated header");
    const uint64_t length = LoadLittleEndian(rest.substr(0, 8));
    const uint32_t length_crc = LoadLittleEndian(rest.substr(8, 4));
    if (UnmaskCrc32c(length_crc) != Crc32c(rest.substr(0, 8))) {
      return absl::DataLossError("bad length crc");
    }
    rest.remove_prefix(12);
    if (rest.size() < length + 4) return absl::DataLossError("truncated data");
    const absl::string_view data = rest.substr(0, length);
    const uint32_t data_crc = LoadLittleEndian(rest.substr(length, 4));
    if (UnmaskCrc32c(data_crc) != Crc32c(data)) {
      return absl::DataLossError("bad data crc");
    }
    records.emplace_back(data);
    rest.remove_prefix(length + 4);
  }
  return records;
}

// Minimal protobuf wire-format cursor.
class ProtoReader {
 public:
  explicit ProtoReader(absl::string_view data) : rest_(data) {}
  bool done() const { return rest_.empty(); }

  absl::StatusOr<uint64_t> Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (rest_.empty()) return absl::DataLossError("truncated varint");
      const auto byte = static_cast<unsigned char>(rest_[0]);
      rest_.remove_prefix(1);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return absl::DataLossError("varint too long");
  }
  absl::StatusOr<absl::string_view> Bytes(size_t n) {
    if (rest_.size() < n) return absl::DataLossError("truncated field");
    const absl::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  absl::StatusOr<absl::string_view> LengthDelimited() {
    MT_ASSIGN_OR_RETURN(const uint64_t n, Varint());
    return Bytes(n);
  }

 private:
  absl::string_view rest_;
};

struct ScalarValue {
  std::string tag;
  float simple_value = 0;
};

struct Event {
  double wall_time = 0;
  bool has_step = false;
  int64_t step = 0;
  std::string file_version;
  std::vector<ScalarValue> values;
  int64_t session_status = 0;  // SessionLog.status; 0 without a session_log.
};

absl::Status ExpectWireType(uint64_t key, uint64_t wire_type) {
  if ((key & 7) != wire_type) {
    return absl::DataLossError(absl::StrCat("field ", key >> 3, " wire type ",
                                            key & 7, ", want ", wire_type));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScalarValue> ParseValue(absl::string_view data) {
  ProtoReader r(data);
  ScalarValue value;
  bool has_simple_value = false;
  while (!r.done()) {
    MT_ASSIGN_OR_RETURN(const uint64_t key, r.Varint());
    if (key >> 3 == 1) {
      MT_RETURN_IF_ERROR(ExpectWireType(key, 2));
      MT_ASSIGN_OR_RETURN(const absl::string_view tag, r.LengthDelimited());
      value.tag = std::string(tag);
    } else if (key >> 3 == 2) {
      MT_RETURN_IF_ERROR(ExpectWireType(key, 5));
      MT_ASSIGN_OR_RETURN(const absl::string_view bytes, r.Bytes(4));
      const auto bits = static_cast<uint32_t>(LoadLittleEndian(bytes));
      std::memcpy(&value.simple_value, &bits, 4);
      has_simple_value = true;
    } else {
      return absl::DataLossError(
          absl::StrCat("unexpected Value field ", key >> 3));
    }
  }
  if (!has_simple_value) return absl::DataLossError("no simple_value");
  return value;
}

absl::StatusOr<Event> ParseEvent(absl::string_view data) {
  ProtoReader r(data);
  Event event;
  while (!r.done()) {
    MT_ASSIGN_OR_RETURN(const uint64_t key, r.Varint());
    switch (key >> 3) {
      case 1: {
        MT_RETURN_IF_ERROR(ExpectWireType(key, 1));
        MT_ASSIGN_OR_RETURN(const absl::string_view bytes, r.Bytes(8));
        const uint64_t bits = LoadLittleEndian(bytes);
        std::memcpy(&event.wall_time, &bits, 8);
        break;
      }
      case 2: {
        MT_RETURN_IF_ERROR(ExpectWireType(key, 0));
        MT_ASSIGN_OR_RETURN(const uint64_t step, r.Varint());
        event.step = static_cast<int64_t>(step);
        event.has_step = true;
        break;
      }
      case 3: {
        MT_RETURN_IF_ERROR(ExpectWireType(key, 2));
        MT_ASSIGN_OR_RETURN(const absl::string_view v, r.LengthDelimited());
        event.file_version = std::string(v);
        break;
      }
      case 5: {
        MT_RETURN_IF_ERROR(ExpectWireType(key, 2));
        MT_ASSIGN_OR_RETURN(const absl::string_view summary,
                            r.LengthDelimited());
        ProtoReader s(summary);
        while (!s.done()) {
          MT_ASSIGN_OR_RETURN(const uint64_t skey, s.Varint());
          if (skey >> 3 != 1) {
            return absl::DataLossError("unexpected Summary field");
          }
          MT_RETURN_IF_ERROR(ExpectWireType(skey, 2));
          MT_ASSIGN_OR_RETURN(const absl::string_view v, s.LengthDelimited());
          MT_ASSIGN_OR_RETURN(ScalarValue value, ParseValue(v));
          event.values.push_back(std::move(value));
        }
        break;
      }
      case 7: {
        MT_RETURN_IF_ERROR(ExpectWireType(key, 2));
        MT_ASSIGN_OR_RETURN(const absl::string_view log, r.LengthDelimited());
        ProtoReader s(log);
        while (!s.done()) {
          MT_ASSIGN_OR_RETURN(const uint64_t skey, s.Varint());
          if (skey >> 3 != 1) {
            return absl::DataLossError("unexpected SessionLog field");
          }
          MT_RETURN_IF_ERROR(ExpectWireType(skey, 0));
          MT_ASSIGN_OR_RETURN(const uint64_t status, s.Varint());
          event.session_status = static_cast<int64_t>(status);
        }
        break;
      }
      default:
        return absl::DataLossError(
            absl::StrCat("unexpected Event field ", key >> 3));
    }
  }
  return event;
}

absl::StatusOr<std::vector<Event>> ReadEvents(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const std::vector<std::string> records,
                      ReadRecords(path));
  std::vector<Event> events;
  for (const std::string& record : records) {
    MT_ASSIGN_OR_RETURN(Event event, ParseEvent(record));
    events.push_back(std::move(event));
  }
  return events;
}

// --- EventWriter -------------------------------------------------------------

double Now() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class EventWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (fs::path(::testing::TempDir()) / "event_writer_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    tmp_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  std::string tmp_;
};

struct Scalar {
  std::string tag;
  int64_t step;
  double value;
};

TEST_F(EventWriterTest, RoundTrip) {
  const char* keep = std::getenv("MT_EVENT_WRITER_TEST_KEEP_DIR");
  // A not-yet-existing nested directory: Create makes the parents.
  const std::string dir =
      keep != nullptr ? std::string(keep) : tmp_ + "/run/logs";

  std::vector<Scalar> scalars;
  for (int64_t step = 0; step <= 500; step += 100) {
    scalars.push_back({"train/loss", step, 2.3 / (1.0 + 0.01 * step)});
    scalars.push_back({"train/learning_rate", step, 0.05});
  }
  scalars.push_back({"test/accuracy", 469, 0.8812});
  scalars.push_back({"edge/negative_step", -7, -1.5});
  scalars.push_back(
      {"edge/large_step", std::numeric_limits<int64_t>::max(), 1e30});
  scalars.push_back({"edge/inf", 1, std::numeric_limits<double>::infinity()});

  const double before = Now();
  auto writer_or = EventWriter::Create(dir);
  ASSERT_TRUE(writer_or.ok()) << writer_or.status();
  std::unique_ptr<EventWriter> writer = std::move(writer_or).value();
  const std::string path = writer->path();

  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir));
  ASSERT_TRUE(absl::StartsWith(name, "events.out.tfevents.")) << name;
  EXPECT_TRUE(absl::EndsWith(name, absl::StrCat(".", host))) << name;
  const std::string seconds =
      name.substr(20, name.size() - 20 - std::strlen(host) - 1);
  ASSERT_FALSE(seconds.empty());
  EXPECT_NEAR(std::stod(seconds), before, 2.0);

  // The header is flushed by Create: readable before any write.
  {
    auto events = ReadEvents(path);
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_EQ(events->size(), 1u);
  }

  for (const Scalar& s : scalars) {
    ASSERT_TRUE(writer->WriteScalar(s.tag, s.step, s.value).ok());
  }
  ASSERT_TRUE(writer->Flush().ok());
  {
    auto events = ReadEvents(path);
    ASSERT_TRUE(events.ok()) << events.status();
    EXPECT_EQ(events->size(), scalars.size() + 1);
  }
  writer.reset();  // Destructor closes.
  const double after = Now();

  auto events_or = ReadEvents(path);
  ASSERT_TRUE(events_or.ok()) << events_or.status();
  const std::vector<Event>& events = *events_or;
  ASSERT_EQ(events.size(), scalars.size() + 1);

  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].values.empty());
  EXPECT_GE(events[0].wall_time, before - 1e-3);
  EXPECT_LE(events[0].wall_time, after + 1e-3);

  for (size_t i = 0; i < scalars.size(); ++i) {
    const Event& e = events[i + 1];
    SCOPED_TRACE(scalars[i].tag);
    EXPECT_TRUE(e.file_version.empty());
    EXPECT_GE(e.wall_time, events[i].wall_time);
    EXPECT_LE(e.wall_time, after + 1e-3);
    EXPECT_TRUE(e.has_step);
    EXPECT_EQ(e.step, scalars[i].step);
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].tag, scalars[i].tag);
    EXPECT_EQ(e.values[0].simple_value, static_cast<float>(scalars[i].value));
  }
}

// A SessionLog START at the step a run (re)starts: what TensorBoard's purge
// of orphaned points looks for in brain.Event:2 files. The bytes after the
// wall_time are TensorFlow's serialization of
// Event{step: 301, session_log: {status: START}}
// (scripts/golden/event_records.py).
TEST_F(EventWriterTest, SessionStartIsTensorFlowsSessionLogStart) {
  auto writer = EventWriter::Create(tmp_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteSessionStart(301).ok());
  ASSERT_TRUE((*writer)->WriteScalar("train/loss", 310, 0.5).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  auto records = ReadRecords((*writer)->path());
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  constexpr int kWallTimeBytes = 9;  // Key 0x09 and a little-endian double.
  ASSERT_EQ((*records)[1][0], '\x09');
  EXPECT_EQ(absl::BytesToHexString((*records)[1].substr(kWallTimeBytes)),
            "10ad023a020801");
  auto events = ReadEvents((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  const Event& start = (*events)[1];
  EXPECT_TRUE(start.has_step);
  EXPECT_EQ(start.step, 301);
  EXPECT_EQ(start.session_status, 1);
  EXPECT_TRUE(start.values.empty());
  EXPECT_EQ((*events)[2].session_status, 0);
  EXPECT_EQ((*events)[2].step, 310);
}

TEST_F(EventWriterTest, TwoWritersInOneDirectoryKeepSeparateFiles) {
  auto a = EventWriter::Create(tmp_);
  auto b = EventWriter::Create(tmp_);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)->path(), (*b)->path());
  ASSERT_TRUE((*a)->WriteScalar("a", 1, 1.0).ok());
  ASSERT_TRUE((*b)->WriteScalar("b", 2, 2.0).ok());
  a->reset();
  b->reset();
  int files = 0;
  for (const auto& entry : fs::directory_iterator(tmp_)) {
    auto events = ReadEvents(entry.path().string());
    ASSERT_TRUE(events.ok()) << events.status();
    EXPECT_EQ(events->size(), 2u);
    ++files;
  }
  EXPECT_EQ(files, 2);
}

TEST_F(EventWriterTest, UnwritableDirectoryErrorNamesPath) {
  // A directory under a regular file cannot be created, even as root.
  const std::string blocker = tmp_ + "/not_a_dir";
  std::ofstream(blocker) << "x";
  const std::string dir = blocker + "/logs";
  auto writer = EventWriter::Create(dir);
  ASSERT_FALSE(writer.ok());
  EXPECT_TRUE(absl::StrContains(writer.status().message(), dir))
      << writer.status();
}

TEST_F(EventWriterTest, WriteAfterCloseFailsNamingPath) {
  auto writer = EventWriter::Create(tmp_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_TRUE((*writer)->Close().ok());
  const absl::Status status = (*writer)->WriteScalar("x", 0, 0.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(status.message(), (*writer)->path())) << status;
  EXPECT_FALSE((*writer)->Flush().ok());
}

// A disk that fills in the middle of a record (here the file-size limit,
// whose writes fail past it as a full disk's do, with EFBIG): the file is
// cut back to the records of the last successful flush, which TensorBoard
// reads whole; before, it ended in a torn record.
TEST_F(EventWriterTest, AFailedWriteLeavesOnlyWholeRecords) {
  auto writer = EventWriter::Create(tmp_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  ASSERT_TRUE((*writer)->WriteScalar("first", 1, 1.0).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  const uintmax_t flushed = fs::file_size(path);

  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = flushed + 100;  // Inside the second or third record.
  // Past the limit a write raises SIGXFSZ, which would end the test.
  const sighandler_t old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  absl::Status status;
  for (int step = 2; step < 200 && status.ok(); ++step) {
    status = (*writer)->WriteScalar("train/loss", step, 0.5);
    if (status.ok() && step % 4 == 0) status = (*writer)->Flush();
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::StartsWith(status.message(), path + ": write failed"))
      << status;
  EXPECT_EQ((*writer)->Close(), status);
  EXPECT_EQ(fs::file_size(path), flushed);
  absl::StatusOr<std::vector<Event>> events = ReadEvents(path);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);  // The version record and "first".
}

TEST_F(EventWriterTest, ReaderRejectsCorruption) {
  // Guards the round trip: the reader above really checks both CRCs.
  std::string path;
  {
    auto writer = EventWriter::Create(tmp_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->WriteScalar("loss", 3, 0.5).ok());
    path = (*writer)->path();
  }
  auto file = ReadFile(path);
  ASSERT_TRUE(file.ok());
  for (size_t offset : {size_t{0}, size_t{13}, file->size() - 5}) {
    std::string corrupt = *file;
    corrupt[offset] ^= 0x01;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << corrupt;
    EXPECT_FALSE(ReadRecords(path).ok()) << "offset " << offset;
  }
}

}  // namespace
}  // namespace mirrortrain::trainer
