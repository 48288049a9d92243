// TensorBoard event-file writer: scalars as `tf.summary.scalar` would log
// them, in a file TensorBoard's EventAccumulator reads.
//
// File layout: TFRecord framing (u64 little-endian length, u32 masked
// CRC-32C of those 8 bytes, the data, u32 masked CRC-32C of the data) around
// hand-encoded `tensorflow.Event` protobufs. The first record carries only
// wall_time and file_version "brain.Event:2".
//
// Thread contract: not synchronised. One thread (the trainer's logging
// thread) owns an EventWriter and makes every call on it.
#ifndef MIRRORTRAIN_TRAINER_LOGGING_EVENT_WRITER_H_
#define MIRRORTRAIN_TRAINER_LOGGING_EVENT_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mirrortrain::trainer {

class EventWriter {
 public:
  // Creates `dir` (and parents) if needed and a new file
  // `<dir>/events.out.tfevents.<unix seconds>.<hostname>`, then writes and
  // flushes the file_version record. Never overwrites: if that name exists
  // (two writers in one second) a ".<n>" suffix is added. Errors name the
  // path.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Create(
      const std::string& dir);

  // Flushes and closes; errors are dropped here (call Close() to see them).
  ~EventWriter();

  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Appends Event{wall_time, step, summary{value{tag, simple_value}}}.
  // `value` is stored as float, as TensorBoard's simple_value is. Buffered:
  // call Flush() to make it visible to readers.
  absl::Status WriteScalar(absl::string_view tag, int64_t step, double value);

  // Appends a histogram (tf.summary.histogram's HistogramProto) of integer
  // values: counts[v] values equal v, bucket v spanning (v - 0.5, v + 0.5].
  absl::Status WriteIntegerHistogram(absl::string_view tag, int64_t step,
                                     absl::Span<const int64_t> counts);

  // Appends Event{wall_time, step, session_log{status: START}}: a run
  // (re)starts at `step`. TensorBoard then drops the points at `step` and
  // later that earlier files of the directory hold (its
  // purge_orphaned_data), so a resumed run's rewritten steps are shown once,
  // as metrics.jsonl holds them.
  absl::Status WriteSessionStart(int64_t step);

  // Pushes buffered records to the OS. After a failed write, flush or close
  // the file is cut back to the records of the last successful Flush, so
  // readers never meet a torn record (a disk that filled mid-record), and
  // the writer takes no more.
  absl::Status Flush();

  // Flushes and closes the file; later writes fail. Idempotent.
  absl::Status Close();

  // The event file's full path.
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, std::FILE* file);

  // Appends Event{wall_time, step, summary{`summary_value`}}.
  absl::Status WriteSummaryValue(int64_t step, absl::string_view summary_value);
  // Appends Event{wall_time, step, <field>: `message`} (one of Event's
  // message fields: summary, session_log).
  absl::Status WriteEvent(int64_t step, uint32_t field,
                          absl::string_view message);
  // Frames `data` as one TFRecord and appends it.
  absl::Status WriteRecord(absl::string_view data);
  // Records `error`, closes the file and cuts it back to flushed_bytes_.
  absl::Status Fail(absl::Status error);

  std::string path_;
  std::FILE* file_;  // Owned; null once closed.
  // The file's length after the last successful Flush: whole records.
  uint64_t flushed_bytes_ = 0;
  uint64_t written_bytes_ = 0;  // Records handed to fwrite so far.
  // First write/flush failure. Sticky: after a partial record, further
  // records would be misframed, so the file takes no more.
  absl::Status error_;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_LOGGING_EVENT_WRITER_H_
