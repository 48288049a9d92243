// Deferred index checks: Gather's indices and the float-to-integer Cast of
// token ids are checked on the host before a GPU kernel trusts them (a
// copy and a wait in the middle of the forward pass, which a CUDA graph
// cannot hold). Inside a ScopedIndexChecks the ops check on the device
// instead: an invalid index or value gives zeros in the output and is
// written into an IndexCheckRecord, which the caller reads after the step
// (with the loss) and turns into the error the op would have returned.
// Outside a scope nothing changes.
//
// The record keeps the first failure in program order: every checked call
// in the scope gets the next site number, and the record keeps the
// smallest (site, position); so eager steps and replays of a recorded step
// (which repeat the same sites) report the same failure.
//
// Thread contract: a scope is per thread (a replica's); the record is
// written in the order of the thread's current stream.
#ifndef MIRRORTRAIN_TENSOR_OPS_INDEX_CHECKS_H_
#define MIRRORTRAIN_TENSOR_OPS_INDEX_CHECKS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// For the checked ops (array_ops.cc); first, for IndexCheckRecord's friend.
namespace internal {

// What a checked op writes: the record's int64 slots and the op's site.
enum class IndexCheckOp : int64_t { kGather = 1, kCast = 2 };
struct IndexCheckSite {
  int64_t* record;
  uint64_t site;
};
// The site of the calling op, which checks `elements` values on `device`,
// when a scope with a record on that device is active on this thread (each
// call takes the next); else nullopt: check on the host. Also nullopt when
// the key could not hold the site or a position. On a GPU, the first site
// after a Reset first enqueues the record's clearing on the current stream
// (an error here is that memset's).
absl::StatusOr<std::optional<IndexCheckSite>> NextIndexCheckSite(
    Device device, int64_t elements);

// The record's layout: slot 0 the key, (site << kSiteShift) | position,
// all ones when clean; then the offending value (an integer index, or a
// float's value as double bits), the bound (Gather's rows; Cast's integer
// bits), and the op.
inline constexpr int kSiteShift = 40;
inline constexpr int64_t kRecordSlots = 4;

// CPU ops: records a failure at `position` unless the record already holds
// an earlier one.
void RecordOnHost(const IndexCheckSite& site, int64_t position, IndexCheckOp op,
                  int64_t value, int64_t bound);

}  // namespace internal

class IndexCheckRecord {
 public:
  // Clean, on `device`.
  static absl::StatusOr<IndexCheckRecord> Create(Device device);
  IndexCheckRecord() = default;

  // Clean again before the next checked op. On a CPU at once. On a GPU
  // lazily: the clearing memset is enqueued (or recorded) on the current
  // stream by the next checked op given the record, right before it, so a
  // step or recording without checked ops holds none. Nothing to clear
  // when no checked op has been given the record since the last Reset (no
  // kernel can have written it), unless the current stream is being
  // recorded: a graph's replays need the memset before their checked ops
  // (a recorded Reset leaves written() as it was: it runs at the replays).
  absl::Status Reset();
  // Whether a checked op has been given this record since the last Reset:
  // only then can it hold a failure, and need reading. A model without
  // checked ops never sets it, so its steps neither reset nor read the
  // record. (Replays of a recorded step run the recording's ops: it stays
  // as the recording left it.)
  bool written() const { return written_; }
  // The record's storage (i64[4]), for copying it to the host.
  const Tensor& tensor() const { return record_; }
  // The error a host copy of the record holds (as Gather or Cast would
  // have returned it, after the label its site was called under), or OK
  // when it is clean.
  absl::Status ErrorIn(const Tensor& host_record) const;

 private:
  friend absl::StatusOr<std::optional<internal::IndexCheckSite>>
  internal::NextIndexCheckSite(Device device, int64_t elements);
  Tensor record_;
  // Per site, the ScopedIndexCheckLabel it was called under (written by
  // the scope's thread while it runs; read between steps).
  std::vector<std::string> labels_;
  bool written_ = true;  // Until the first Reset.
  // GPU: a Reset's memset, left to the next checked op.
  bool clear_pending_ = false;
};

// While alive, the checked ops called on this thread are recorded with
// `label` (a layer's context, as it prefixes an immediate error, e.g.
// "embedding: token ids (input_dim 8): "). Inner labels replace outer ones.
class ScopedIndexCheckLabel {
 public:
  explicit ScopedIndexCheckLabel(std::string label);
  ~ScopedIndexCheckLabel();
  ScopedIndexCheckLabel(const ScopedIndexCheckLabel&) = delete;
  ScopedIndexCheckLabel& operator=(const ScopedIndexCheckLabel&) = delete;

 private:
  std::string label_;
  const std::string* previous_;
};

// While alive, Gather and float-to-integer Cast on this thread, on the
// record's device, record into `record` (which must outlive the scope)
// instead of failing. An inner scope replaces the outer one until it ends.
class ScopedIndexChecks {
 public:
  explicit ScopedIndexChecks(IndexCheckRecord* record);
  ~ScopedIndexChecks();
  ScopedIndexChecks(const ScopedIndexChecks&) = delete;
  ScopedIndexChecks& operator=(const ScopedIndexChecks&) = delete;

 private:
  IndexCheckRecord* previous_record_;
  uint64_t previous_site_;
};

}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_INDEX_CHECKS_H_
