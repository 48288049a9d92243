#include "trainer/metrics_logger.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

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

// The step of a metrics.jsonl line (ToJson's `{"step": N, ...`), or nullopt
// for a line of another form (kept as it is).
std::optional<int64_t> StepOf(absl::string_view line) {
  if (!absl::ConsumePrefix(&line, "{\"step\": ")) return std::nullopt;
  int64_t step = 0;
  if (!absl::SimpleAtoi(line.substr(0, line.find(',')), &step)) {
    return std::nullopt;
  }
  return step;
}

// Rewrites `path` without its lines of steps after `step` (atomically: a
// crash leaves the old file or the new one), unless it has none.
absl::Status DropLinesAfter(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::OkStatus();  // No file yet.
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const std::optional<int64_t> at = StepOf(line);
    if (at.has_value() && *at > step) {
      dropped = true;
      continue;
    }
    absl::StrAppend(&kept, line, "\n");
  }
  if (in.bad()) {
    return absl::InternalError(absl::StrCat(path, ": read failed"));
  }
  return dropped ? WriteFileAtomically(path, kept) : absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::Create(
    const std::string& run_dir, std::optional<int64_t> resumed_at) {
  std::string path = absl::StrCat(run_dir, "/metrics.jsonl");
  if (resumed_at.has_value()) {
    MT_RETURN_IF_ERROR(DropLinesAfter(path, *resumed_at));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<EventWriter> events,
                      EventWriter::Create(run_dir));
  // Append: a resumed run continues the same file.
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsLogger>(
      new MetricsLogger(f, std::move(path), std::move(events)));
}

MetricsLogger::~MetricsLogger() {
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

absl::Status MetricsLogger::Log(const MetricsRecord& record) {
  std::string line = ToJson(record) + "\n";
  if (std::fputs(line.c_str(), jsonl_) < 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed"));
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

absl::Status MetricsLogger::Flush() {
  if (std::fflush(jsonl_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": flush failed"));
  }
  return events_->Flush();
}

}  // namespace mirrortrain::trainer
