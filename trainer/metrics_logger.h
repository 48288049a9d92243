// Writes a run's scalars twice: one JSON object per line to metrics.jsonl
// and the same numbers as TensorBoard scalars ("<split>/<name>" tags, with
// "test/ema/accuracy" style tags for evaluations).
//
// Thread contract: used by the training loop's thread only.
#ifndef MIRRORTRAIN_TRAINER_METRICS_LOGGER_H_
#define MIRRORTRAIN_TRAINER_METRICS_LOGGER_H_

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/logging/event_writer.h"

namespace mirrortrain::trainer {

struct MetricsRecord {
  int64_t step = 0;
  int64_t epoch = 0;
  std::string split;    // "train" | "test"
  std::string weights;  // "" for train; "raw" | "ema" for evaluations.
  std::vector<std::pair<std::string, double>> values;  // In output order.
  // Integer histograms: counts[v] of value v. metrics.jsonl gets
  // "<name>_histogram": [counts...], TensorBoard a histogram "<split>/<name>".
  std::vector<std::pair<std::string, std::vector<int64_t>>> histograms;
};

// A number as metrics.jsonl and `eval` print it (%.8g; null if not finite),
// so an evaluation can be compared with the logged line as text.
std::string FormatJsonNumber(double v);

// One JSON object, keys in DESIGN.md's order.
std::string ToJson(const MetricsRecord& record);

class MetricsLogger {
 public:
  // Appends to run_dir's metrics.jsonl. A run resumed at step
  // `resumed_at` first drops the file's lines of later steps (what the
  // interrupted run logged after its checkpoint is logged again), so the
  // file holds one line per logged step as an uninterrupted run's does; a
  // fresh run (nullopt) drops every line.
  static absl::StatusOr<std::unique_ptr<MetricsLogger>> Create(
      const std::string& run_dir,
      std::optional<int64_t> resumed_at = std::nullopt);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  absl::Status Log(const MetricsRecord& record);
  absl::Status Flush();
  // Drops the file's evaluation records (every split but "train") of
  // `step`: a run's final evaluation, made again by a rerun of the
  // finished run, replaces the earlier one.
  absl::Status DropEvaluationsAt(int64_t step);

 private:
  MetricsLogger(std::FILE* jsonl, std::string path,
                std::unique_ptr<EventWriter> events)
      : jsonl_(jsonl), path_(std::move(path)), events_(std::move(events)) {}
  std::FILE* jsonl_;
  std::string path_;
  std::unique_ptr<EventWriter> events_;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_METRICS_LOGGER_H_
