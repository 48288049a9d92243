#include "trainer/metrics_logger.h"

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"

namespace mirrortrain::trainer {
std::string FormatJsonNumber(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Infinity.
  return absl::StrFormat("%.8g", v);
}

std::string ToJson(const MetricsRecord& r) {
  std::string out =
      absl::StrCat("{\"step\": ", r.step, ", \"epoch\": ", r.epoch,
                   ", \"split\": \"", r.split, "\"");
  if (!r.weights.empty()) {
    absl::StrAppend(&out, ", \"weights\": \"", r.weights, "\"");
  }
  for (const auto& [name, value] : r.values) {
    absl::StrAppend(&out, ", \"", name, "\": ", FormatJsonNumber(value));
  }
  for (const auto& [name, counts] : r.histograms) {
    absl::StrAppend(&out, ", \"", name, "_histogram\": [",
                    absl::StrJoin(counts, ", "), "]");
  }
  absl::StrAppend(&out, "}");
  return out;
}

namespace {

// "<path>: <what>: <errno's reason>".
absl::Status ErrnoError(const std::string& path, absl::string_view what) {
  const int error_number = errno;
  return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": ", what));
}

// The step and split of a whole metrics.jsonl line (ToJson's `{"step": N,
// "epoch": E, "split": "S", ...}`), or nullopt for a line of another form:
// a write torn by a crash or a full disk (ToJson's only '}' is its last
// character).
struct LineKey {
  int64_t step = 0;
  absl::string_view split;
};
std::optional<LineKey> KeyOf(absl::string_view line) {
  LineKey key;
  if (!absl::ConsumePrefix(&line, "{\"step\": ") ||
      !absl::EndsWith(line, "}")) {
    return std::nullopt;
  }
  const size_t comma = line.find(',');
  if (!absl::SimpleAtoi(line.substr(0, comma), &key.step)) return std::nullopt;
  const size_t split = line.find("\"split\": \"");
  if (split == absl::string_view::npos) return std::nullopt;
  key.split = line.substr(split + 10);
  key.split = key.split.substr(0, key.split.find('"'));
  return key;
}

// Rewrites `path` without the lines `drop` picks and without torn ones
// (atomically: a crash leaves the old file or the new one), unless it has
// none. A whole last line that lost only its newline keeps its record.
absl::Status DropLines(const std::string& path,
                       absl::FunctionRef<bool(const LineKey&)> drop) {
  std::error_code error;
  const std::filesystem::file_status status =
      std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) {
    return absl::OkStatus();  // No file yet.
  }
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat(path, ": cannot read"));
  }
  if (status.type() != std::filesystem::file_type::regular) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError(path, "cannot open");
  std::string kept, line;
  bool rewrite = false;
  while (std::getline(in, line)) {
    const std::optional<LineKey> key = KeyOf(line);
    const bool keep = key.has_value() && !drop(*key);
    if (keep) absl::StrAppend(&kept, line, "\n");
    // Without a newline the last line is rewritten with one.
    if (!keep || in.eof()) rewrite = true;
  }
  if (in.bad()) return ErrnoError(path, "read failed");
  return rewrite ? WriteFileAtomically(path, kept) : absl::OkStatus();
}

std::FILE* OpenForAppend(const std::string& path) {
  return std::fopen(path.c_str(), "a");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::Create(
    const std::string& run_dir, std::optional<int64_t> resumed_at) {
  std::string path = absl::StrCat(run_dir, "/metrics.jsonl");
  // A fresh run's file starts empty: lines there are from a run that ended
  // before its first checkpoint (train starts fresh nowhere else), logged
  // again now.
  const int64_t after = resumed_at.value_or(-1);
  MT_RETURN_IF_ERROR(
      DropLines(path, [&](const LineKey& key) { return key.step > after; }));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<EventWriter> events,
                      EventWriter::Create(run_dir));
  // TensorBoard drops what earlier event files hold from here on, as
  // metrics.jsonl dropped those lines.
  MT_RETURN_IF_ERROR(events->WriteSessionStart(after + 1));
  MT_RETURN_IF_ERROR(events->Flush());
  // Append: a resumed run continues the same file.
  std::FILE* f = OpenForAppend(path);
  if (f == nullptr) return ErrnoError(path, "cannot open");
  return std::unique_ptr<MetricsLogger>(
      new MetricsLogger(f, std::move(path), std::move(events)));
}

MetricsLogger::~MetricsLogger() {
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

absl::Status MetricsLogger::Log(const MetricsRecord& record) {
  std::string line = ToJson(record) + "\n";
  if (std::fputs(line.c_str(), jsonl_) < 0) {
    return ErrnoError(path_, "write failed");
  }
  std::string prefix = record.weights.empty()
                           ? record.split
                           : absl::StrCat(record.split, "/", record.weights);
  for (const auto& [name, value] : record.values) {
    MT_RETURN_IF_ERROR(events_->WriteScalar(absl::StrCat(prefix, "/", name),
                                            record.step, value));
  }
  for (const auto& [name, counts] : record.histograms) {
    MT_RETURN_IF_ERROR(events_->WriteIntegerHistogram(
        absl::StrCat(prefix, "/", name), record.step, counts));
  }
  return Flush();
}

absl::Status MetricsLogger::DropEvaluationsAt(int64_t step) {
  MT_RETURN_IF_ERROR(Flush());
  std::fclose(jsonl_);
  jsonl_ = nullptr;
  absl::Status dropped = DropLines(path_, [&](const LineKey& key) {
    return key.step == step && key.split != "train";
  });
  jsonl_ = OpenForAppend(path_);
  if (jsonl_ == nullptr) return ErrnoError(path_, "cannot open");
  return dropped;
}

absl::Status MetricsLogger::Flush() {
  if (std::fflush(jsonl_) != 0) return ErrnoError(path_, "write failed");
  return events_->Flush();
}

}  // namespace mirrortrain::trainer
