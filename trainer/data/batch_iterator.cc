#include "trainer/data/batch_iterator.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"
#include "trainer/data/counter_hash.h"

namespace mirrortrain::trainer {
namespace {

// Uniform in [0, bound) by rejection. std::uniform_int_distribution's
// algorithm is left to the library, which would make the order differ
// between standard libraries; mt19937_64's output is fixed by the standard.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  // [0, limit) holds a whole number of copies of [0, bound).
  const uint64_t limit = kMax - kMax % bound;
  for (;;) {
    const uint64_t x = rng();
    if (x < limit) return x % bound;
  }
}

absl::Status CheckDataset(const InMemoryDataset* dataset) {
  if (dataset == nullptr) {
    return absl::InvalidArgumentError("BatchIterator: dataset is null");
  }
  const Tensor& images = dataset->images;
  const Tensor& labels = dataset->labels;
  if (!images.defined() || !labels.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchIterator: dataset '", dataset->name, "' has no tensors"));
  }
  if (images.dtype() != DType::kF32 || images.rank() < 1 ||
      (labels.dtype() != DType::kI32 && labels.dtype() != DType::kF32) ||
      labels.rank() < 1 || images.dim(0) != labels.dim(0) ||
      !images.device().is_cpu() || !labels.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchIterator: dataset '", dataset->name,
        "' needs host f32 images [N,...] and i32 (or f32) labels [N,...], "
        "has ",
        images.DebugString(), " and ", labels.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Batch> GatherRows(const InMemoryDataset& dataset,
                                 absl::Span<const int64_t> rows,
                                 Allocator* host_allocator) {
  MT_RETURN_IF_ERROR(CheckDataset(&dataset));
  const int64_t n = dataset.labels.dim(0);
  const int64_t b = static_cast<int64_t>(rows.size());
  Shape image_shape = dataset.images.shape();
  const int64_t row_elements =
      NumElements(absl::MakeConstSpan(image_shape).subspan(1));
  image_shape[0] = b;

  auto empty = [host_allocator](DType dtype, Shape shape) {
    return host_allocator != nullptr
               ? Tensor::EmptyWith(host_allocator, dtype, std::move(shape))
               : Tensor::Empty(dtype, std::move(shape));
  };
  Shape label_shape = dataset.labels.shape();
  const int64_t row_labels = dataset.labels_per_example();
  label_shape[0] = b;
  Batch batch;
  MT_ASSIGN_OR_RETURN(batch.images, empty(DType::kF32, std::move(image_shape)));
  // Class labels (i32) or real-valued targets (f32): four bytes each.
  MT_ASSIGN_OR_RETURN(batch.labels,
                      empty(dataset.labels.dtype(), std::move(label_shape)));
  const float* src_images = dataset.images.data<float>();
  const char* src_labels = static_cast<const char*>(dataset.labels.raw_data());
  float* dst_images = batch.images.data<float>();
  char* dst_labels = static_cast<char*>(batch.labels.raw_data());
  const int64_t label_row_bytes =
      row_labels * static_cast<int64_t>(DTypeSize(dataset.labels.dtype()));
  for (const int64_t row : rows) {
    if (row < 0 || row >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("GatherRows: row ", row, " out of range [0, ", n,
                       ") of dataset '", dataset.name, "'"));
    }
  }
  // Large batches are gathered on several threads (small ones, up to about
  // 2 MB, inline): the 784-4096 MLP's bf16 step on an H200 (2.9 ms) found
  // its 12.8 MB batch not yet gathered, the GPU idle 6.5% of the time and
  // the training thread not waiting for it.
  ParallelFor(b, RowsPerChunk(row_elements + row_labels, int64_t{1} << 18),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  const int64_t row = rows[i];
                  std::memcpy(dst_images + i * row_elements,
                              src_images + row * row_elements,
                              row_elements * sizeof(float));
                  std::memcpy(dst_labels + i * label_row_bytes,
                              src_labels + row * label_row_bytes,
                              label_row_bytes);
                }
              });
  return batch;
}

std::vector<int64_t> EpochOrder(int64_t num_examples, bool shuffle,
                                uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(std::max<int64_t>(num_examples, 0));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (!shuffle || order.size() < 2) return order;
  // Mix64 spreads (seed, epoch) over the generator's seed.
  std::mt19937_64 rng(Mix64(seed ^ Mix64(static_cast<uint64_t>(epoch))));
  for (size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[UniformBelow(rng, i + 1)]);
  }
  return order;
}

absl::StatusOr<Batch> BatchIterator::Producer::Produce() {
  const int64_t n = dataset_->size();
  if (order_epoch_ != position_.epoch) {
    order_ = EpochOrder(n, options_.shuffle, options_.seed, position_.epoch);
    order_epoch_ = position_.epoch;
  }
  const int64_t start = position_.batch * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, n - start);
  const absl::Span<const int64_t> rows =
      absl::MakeConstSpan(order_).subspan(start, count);
  MT_ASSIGN_OR_RETURN(Batch batch,
                      GatherRows(*dataset_, rows, options_.host_allocator));
  MT_RETURN_IF_ERROR(AugmentBatch(options_.augment, options_.seed,
                                  position_.epoch, rows, batch.images));
  batch.epoch = position_.epoch;
  batch.index = position_.batch;
  // Staged before the position moves: it advances only on success.
  if (options_.stage) MT_RETURN_IF_ERROR(options_.stage(batch));
  if (++position_.batch == batches_per_epoch_) {
    position_.batch = 0;
    ++position_.epoch;
  }
  return batch;
}

absl::StatusOr<std::unique_ptr<BatchIterator>> BatchIterator::Create(
    const InMemoryDataset* dataset, const Options& options) {
  MT_RETURN_IF_ERROR(CheckDataset(dataset));
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchIterator: batch_size must be >= 1, got ", options.batch_size));
  }
  if (options.prefetch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchIterator: prefetch must be >= 0, got ", options.prefetch));
  }
  MT_RETURN_IF_ERROR(
      CheckAugmentable(options.augment, dataset->images.shape()));
  const int64_t n = dataset->size();
  // Rounded up without forming n + batch_size - 1 (it overflows for a
  // batch size near 2^63).
  const int64_t batches =
      n / options.batch_size +
      (!options.drop_remainder && n % options.batch_size != 0 ? 1 : 0);
  if (batches == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchIterator: dataset '", dataset->name, "' has ", n,
                     " examples, which make no batch of ", options.batch_size,
                     options.drop_remainder ? " with drop_remainder" : ""));
  }
  std::unique_ptr<BatchIterator> iterator(
      new BatchIterator(dataset, options, batches));
  iterator->StartWorker();
  return iterator;
}

BatchIterator::BatchIterator(const InMemoryDataset* dataset,
                             const Options& options, int64_t batches_per_epoch)
    : options_(options),
      batches_per_epoch_(batches_per_epoch),
      producer_(dataset, options, batches_per_epoch) {}

BatchIterator::~BatchIterator() { StopWorker(); }

absl::StatusOr<Batch> BatchIterator::Next() {
  Batch batch;
  if (options_.prefetch == 0) {
    MT_ASSIGN_OR_RETURN(batch, producer_.Produce());
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [this] { return !queue_.empty() || worker_done_; });
    // Batches gathered before a failure are still handed out first.
    if (queue_.empty()) return worker_status_;
    batch = std::move(queue_.front());
    queue_.pop_front();
    space_cv_.notify_one();
  }
  next_ = {batch.epoch, batch.index + 1};
  if (next_.batch == batches_per_epoch_) next_ = {batch.epoch + 1, 0};
  return batch;
}

absl::Status BatchIterator::Seek(Position position) {
  if (position.epoch < 0 || position.batch < 0 ||
      position.batch >= batches_per_epoch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchIterator::Seek: position (epoch ", position.epoch, ", batch ",
        position.batch, ") is outside epochs >= 0 with ", batches_per_epoch_,
        " batches each"));
  }
  StopWorker();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.clear();
    stop_ = false;
    worker_done_ = false;
    worker_status_ = absl::OkStatus();
  }
  producer_.Reset(position);
  next_ = position;
  StartWorker();
  return absl::OkStatus();
}

void BatchIterator::StartWorker() {
  if (options_.prefetch == 0) return;
  worker_ = std::thread([this] { WorkerLoop(); });
}

void BatchIterator::StopWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_cv_.notify_all();
  ready_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void BatchIterator::WorkerLoop() {
  const size_t capacity = static_cast<size_t>(options_.prefetch);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      space_cv_.wait(lock, [&] { return stop_ || queue_.size() < capacity; });
      if (stop_) return;
    }
    // Gathering runs unlocked so Next() can take queued batches meanwhile;
    // only this thread touches producer_ while it runs. An exception (a
    // batch's memory not to be had) is the consumer's error, not
    // std::terminate on this thread.
    absl::StatusOr<Batch> batch;
    if (absl::Status thrown = CatchExceptions([&] {
          batch = producer_.Produce();
          return absl::OkStatus();
        });
        !thrown.ok()) {
      batch = thrown;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (!batch.ok()) {
      worker_status_ = batch.status();
      worker_done_ = true;
      ready_cv_.notify_all();
      return;
    }
    queue_.push_back(*std::move(batch));
    ready_cv_.notify_one();
  }
}

}  // namespace mirrortrain::trainer
