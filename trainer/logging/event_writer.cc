#include "trainer/logging/event_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/logging/crc32c.h"

namespace mirrortrain::trainer {
namespace {

// Protobuf wire types.
constexpr uint32_t kWireVarint = 0;
constexpr uint32_t kWireFixed64 = 1;
constexpr uint32_t kWireLengthDelimited = 2;
constexpr uint32_t kWireFixed32 = 5;

// tensorflow.Event / Summary / Summary.Value field numbers.
constexpr uint32_t kEventWallTime = 1;
constexpr uint32_t kEventStep = 2;
constexpr uint32_t kEventFileVersion = 3;
constexpr uint32_t kEventSummary = 5;
constexpr uint32_t kEventSessionLog = 7;
// tensorflow.SessionLog.
constexpr uint32_t kSessionLogStatus = 1;
constexpr int64_t kSessionLogStart = 1;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1;
constexpr uint32_t kValueSimpleValue = 2;
constexpr uint32_t kValueHisto = 5;
// tensorflow.HistogramProto.
constexpr uint32_t kHistoMin = 1;
constexpr uint32_t kHistoMax = 2;
constexpr uint32_t kHistoNum = 3;
constexpr uint32_t kHistoSum = 4;
constexpr uint32_t kHistoSumSquares = 5;
constexpr uint32_t kHistoBucketLimit = 6;
constexpr uint32_t kHistoBucket = 7;

constexpr char kFileVersion[] = "brain.Event:2";
constexpr int kMaxNameAttempts = 1000;

void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void AppendLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

void AppendKey(std::string* out, uint32_t field, uint32_t wire_type) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

void AppendDoubleField(std::string* out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  AppendKey(out, field, kWireFixed64);
  AppendLittleEndian(out, bits, 8);
}

void AppendFloatField(std::string* out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  AppendKey(out, field, kWireFixed32);
  AppendLittleEndian(out, bits, 4);
}

// int64 fields encode negatives as 10-byte two's-complement varints.
void AppendInt64Field(std::string* out, uint32_t field, int64_t v) {
  AppendKey(out, field, kWireVarint);
  AppendVarint(out, static_cast<uint64_t>(v));
}

void AppendBytesField(std::string* out, uint32_t field,
                      absl::string_view bytes) {
  AppendKey(out, field, kWireLengthDelimited);
  AppendVarint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

double WallTimeSeconds() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Create(
    const std::string& dir) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("EventWriter: empty directory path");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::ErrnoToStatus(
        ec.value(), absl::StrCat(dir, ": cannot create the events directory"));
  }

  const int64_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string base =
      absl::StrCat(dir, "/events.out.tfevents.", seconds, ".", HostName());
  std::string path = base;
  std::FILE* file = nullptr;
  for (int attempt = 1;; ++attempt) {
    // "x": exclusive create, so an existing run's file is never truncated.
    file = std::fopen(path.c_str(), "wbx");
    if (file != nullptr) break;
    const int err = errno;
    if (err != EEXIST || attempt >= kMaxNameAttempts) {
      return absl::ErrnoToStatus(err, absl::StrCat(path, ": cannot create"));
    }
    path = absl::StrCat(base, ".", attempt);
  }

  std::unique_ptr<EventWriter> writer(new EventWriter(std::move(path), file));
  std::string event;
  AppendDoubleField(&event, kEventWallTime, WallTimeSeconds());
  AppendBytesField(&event, kEventFileVersion, kFileVersion);
  MT_RETURN_IF_ERROR(writer->WriteRecord(event));
  // Flushed at once so a TensorBoard pointed at the run sees a valid file.
  MT_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

EventWriter::EventWriter(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file) {}

EventWriter::~EventWriter() { Close().IgnoreError(); }

absl::Status EventWriter::WriteScalar(absl::string_view tag, int64_t step,
                                      double value) {
  std::string summary_value;
  AppendBytesField(&summary_value, kValueTag, tag);
  AppendFloatField(&summary_value, kValueSimpleValue,
                   static_cast<float>(value));
  return WriteSummaryValue(step, summary_value);
}

absl::Status EventWriter::WriteIntegerHistogram(
    absl::string_view tag, int64_t step, absl::Span<const int64_t> counts) {
  double num = 0, sum = 0, sum_squares = 0, min = 0, max = 0;
  bool any = false;
  std::string limits, buckets;  // Packed repeated doubles.
  for (size_t v = 0; v < counts.size(); ++v) {
    const double c = static_cast<double>(counts[v]);
    const double x = static_cast<double>(v);
    if (c > 0) {
      if (!any) min = x;
      max = x;
      any = true;
    }
    num += c;
    sum += c * x;
    sum_squares += c * x * x;
    AppendLittleEndian(&limits, absl::bit_cast<uint64_t>(x + 0.5), 8);
    AppendLittleEndian(&buckets, absl::bit_cast<uint64_t>(c), 8);
  }
  std::string histo;
  AppendDoubleField(&histo, kHistoMin, min);
  AppendDoubleField(&histo, kHistoMax, max);
  AppendDoubleField(&histo, kHistoNum, num);
  AppendDoubleField(&histo, kHistoSum, sum);
  AppendDoubleField(&histo, kHistoSumSquares, sum_squares);
  AppendBytesField(&histo, kHistoBucketLimit, limits);
  AppendBytesField(&histo, kHistoBucket, buckets);
  std::string summary_value;
  AppendBytesField(&summary_value, kValueTag, tag);
  AppendBytesField(&summary_value, kValueHisto, histo);
  return WriteSummaryValue(step, summary_value);
}

absl::Status EventWriter::WriteSessionStart(int64_t step) {
  std::string session_log;
  AppendInt64Field(&session_log, kSessionLogStatus, kSessionLogStart);
  return WriteEvent(step, kEventSessionLog, session_log);
}

absl::Status EventWriter::WriteSummaryValue(int64_t step,
                                            absl::string_view summary_value) {
  std::string summary;
  AppendBytesField(&summary, kSummaryValue, summary_value);
  return WriteEvent(step, kEventSummary, summary);
}

absl::Status EventWriter::WriteEvent(int64_t step, uint32_t field,
                                     absl::string_view message) {
  std::string event;
  AppendDoubleField(&event, kEventWallTime, WallTimeSeconds());
  AppendInt64Field(&event, kEventStep, step);
  AppendBytesField(&event, field, message);
  return WriteRecord(event);
}

absl::Status EventWriter::WriteRecord(absl::string_view data) {
  MT_RETURN_IF_ERROR(error_);
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("EventWriter: ", path_, " is closed"));
  }
  std::string record;
  record.reserve(data.size() + 16);
  AppendLittleEndian(&record, data.size(), 8);
  const uint32_t length_crc = MaskCrc32c(Crc32c(record));
  AppendLittleEndian(&record, length_crc, 4);
  record.append(data.data(), data.size());
  AppendLittleEndian(&record, MaskCrc32c(Crc32c(data)), 4);

  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return Fail(
        absl::ErrnoToStatus(errno, absl::StrCat(path_, ": write failed")));
  }
  written_bytes_ += record.size();
  return absl::OkStatus();
}

absl::Status EventWriter::Fail(absl::Status error) {
  error_ = std::move(error);
  if (file_ == nullptr) return error_;
  // A descriptor of our own survives fclose, which may still push part of
  // the buffer; then the file is cut at the last record known whole.
  const int fd = ::dup(::fileno(file_));
  std::fclose(file_);
  file_ = nullptr;
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(flushed_bytes_)) != 0) {
    error_ = absl::Status(
        error_.code(),
        absl::StrCat(error_.message(),
                     "; cutting it back to its whole records failed too"));
  }
  if (fd >= 0) ::close(fd);
  return error_;
}

absl::Status EventWriter::Flush() {
  MT_RETURN_IF_ERROR(error_);
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("EventWriter: ", path_, " is closed"));
  }
  if (std::fflush(file_) != 0) {
    return Fail(
        absl::ErrnoToStatus(errno, absl::StrCat(path_, ": write failed")));
  }
  flushed_bytes_ = written_bytes_;
  return absl::OkStatus();
}

absl::Status EventWriter::Close() {
  if (file_ == nullptr) return error_;
  // The buffered records first, so a failure can still cut them off.
  MT_RETURN_IF_ERROR(Flush());
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0) {
    error_ = absl::ErrnoToStatus(errno, absl::StrCat(path_, ": close failed"));
  }
  return error_;
}

}  // namespace mirrortrain::trainer
