// Batches over an InMemoryDataset, epoch after epoch, with a deterministic
// shuffle and background prefetch.
//
// Order: epoch e visits the examples in a permutation that depends only on
// (seed, e) (identity without shuffle), on every platform; batches are
// contiguous runs of it, the last one partial unless drop_remainder. So the
// sequence of batches is a pure function of (dataset, options) and a position
// (epoch, batch index) pins it down exactly, which is what a checkpoint
// stores to resume.
//
// Ownership: the iterator does not own the dataset, which must outlive it.
// Batches are fresh host tensors owned by the caller.
//
// Thread contract: Next, Seek, position and BatchesPerEpoch are called from
// one thread at a time (the training loop's). With prefetch > 0 a private
// worker thread gathers up to `prefetch` batches ahead into a bounded queue;
// Seek stops it, drops what it gathered and restarts it at the new position;
// the destructor stops and joins it, also mid-epoch.
#ifndef MIRRORTRAIN_TRAINER_DATA_BATCH_ITERATOR_H_
#define MIRRORTRAIN_TRAINER_DATA_BATCH_ITERATOR_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"
#include "trainer/data/augment.h"
#include "trainer/data/dataset.h"

namespace mirrortrain::trainer {

struct Batch;

struct BatchIteratorOptions {
  int64_t batch_size = 1;
  bool shuffle = true;
  bool drop_remainder = false;
  uint64_t seed = 0;
  int prefetch = 2;  // Batches gathered ahead; 0 gathers inside Next().
  // Applied to each batch as it is gathered (on the worker thread), drawn
  // from (seed, epoch, example index): see augment.h.
  AugmentOptions augment;
  // Runs on each batch right after it is gathered, on the worker thread
  // (inside Next() without prefetch): the trainer copies batches to its GPUs
  // there, so the copies overlap the steps before (see DeviceStager). An
  // error is returned by the Next() that would have returned the batch.
  std::function<absl::Status(Batch&)> stage;
  // Host memory batches are gathered into: the CPU allocator when null;
  // DeviceStager::host_allocator() (pinned) when staging, so the GPU copies
  // read the batch itself.
  Allocator* host_allocator = nullptr;
};

// One replica's rows of a batch already on its GPU (DeviceStager). The
// copies are ordered before `ready`; a stream must wait for it before use.
// They read the batch's host tensors asynchronously, so those live at least
// as long as the shards. The device tensors were allocated on the copy
// stream, whose pool may hand their memory to the next staging copy once
// they are dropped: keep a shard until the work that reads it has finished
// (the trainer holds each batch until its step's completion event).
struct DeviceShard {
  Tensor images, labels;
  std::shared_ptr<cuda::Event> ready;
};

struct Batch {
  Tensor images;  // f32 [b, ...], the dataset's example shape
  Tensor labels;  // i32 [b] or [b, ...] (per-token labels), or f32 targets
  int64_t epoch = 0;
  int64_t index = 0;                       // Batch index within the epoch.
  std::vector<DeviceShard> device_shards;  // Per replica, when staged.
};

// Copies the given rows of the dataset, in that order, into a new batch
// (epoch and index left 0) in memory of `host_allocator` (the CPU's when
// null). InvalidArgument for a row out of range.
absl::StatusOr<Batch> GatherRows(const InMemoryDataset& dataset,
                                 absl::Span<const int64_t> rows,
                                 Allocator* host_allocator = nullptr);

// The order in which epoch `epoch` visits examples [0, num_examples):
// a Fisher-Yates shuffle driven by std::mt19937_64 seeded from (seed, epoch),
// or the identity without shuffle.
std::vector<int64_t> EpochOrder(int64_t num_examples, bool shuffle,
                                uint64_t seed, int64_t epoch);

class BatchIterator {
 public:
  using Options = BatchIteratorOptions;

  // Where the iterator stands: the batch the next call to Next() returns.
  struct Position {
    int64_t epoch = 0;
    int64_t batch = 0;  // In [0, BatchesPerEpoch()).
    bool operator==(const Position&) const = default;
  };

  // InvalidArgument for a null or malformed dataset, batch_size < 1,
  // prefetch < 0, augmentation of data that are not images, or options that
  // leave an epoch without batches (empty dataset, or fewer examples than
  // batch_size with drop_remainder).
  static absl::StatusOr<std::unique_ptr<BatchIterator>> Create(
      const InMemoryDataset* dataset, const Options& options);

  ~BatchIterator();
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;

  int64_t BatchesPerEpoch() const { return batches_per_epoch_; }
  const Options& options() const { return options_; }

  // The batch at position(), then advances; runs across epochs forever.
  absl::StatusOr<Batch> Next();
  Position position() const { return next_; }
  // Makes position() == `position`: the batches that follow are identical to
  // those of an iterator advanced there by Next(). InvalidArgument when the
  // epoch is negative or the batch is not in [0, BatchesPerEpoch()).
  absl::Status Seek(Position position);

 private:
  // Gathers batches in order; used by the worker thread while it runs, else
  // by the caller's thread.
  class Producer {
   public:
    Producer(const InMemoryDataset* dataset, const Options& options,
             int64_t batches_per_epoch)
        : dataset_(dataset),
          options_(options),
          batches_per_epoch_(batches_per_epoch) {}
    void Reset(Position position) { position_ = position; }
    // The batch at the current position; advances only on success.
    absl::StatusOr<Batch> Produce();

   private:
    const InMemoryDataset* dataset_;
    Options options_;
    int64_t batches_per_epoch_;
    Position position_;
    int64_t order_epoch_ = -1;  // The epoch `order_` belongs to.
    std::vector<int64_t> order_;
  };

  BatchIterator(const InMemoryDataset* dataset, const Options& options,
                int64_t batches_per_epoch);
  void StartWorker();
  void StopWorker();
  void WorkerLoop();

  const Options options_;
  const int64_t batches_per_epoch_;
  Position next_;
  Producer producer_;

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable space_cv_;  // Signalled when the queue shrinks.
  std::condition_variable ready_cv_;  // Signalled when a batch or error lands.
  // Guarded by mu_:
  std::deque<Batch> queue_;
  bool stop_ = false;
  bool worker_done_ = false;  // The worker failed and exited.
  absl::Status worker_status_;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_BATCH_ITERATOR_H_
