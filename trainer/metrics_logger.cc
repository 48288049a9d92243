#include "trainer/metrics_logger.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"

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

absl::StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::Create(
    const std::string& run_dir) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<EventWriter> events,
                      EventWriter::Create(run_dir));
  std::string path = absl::StrCat(run_dir, "/metrics.jsonl");
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
