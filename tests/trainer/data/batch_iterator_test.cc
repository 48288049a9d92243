#include "trainer/data/batch_iterator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/data/dataset.h"

namespace mirrortrain::trainer {
namespace {

using ::testing::HasSubstr;

// Row i has every pixel equal to i and label i % 10, so a batch tells which
// rows it holds.
InMemoryDataset IndexDataset(int64_t n) {
  InMemoryDataset d;
  d.num_classes = 10;
  d.name = "index";
  d.images = Tensor::HostEmpty(DType::kF32, {n, 28, 28, 1});
  d.labels = Tensor::HostEmpty(DType::kI32, {n});
  for (int64_t i = 0; i < n; ++i) {
    std::fill_n(d.images.data<float>() + i * 784, 784, static_cast<float>(i));
    d.labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
  return d;
}

// The rows a batch of an IndexDataset holds, checking it is well formed.
std::vector<int64_t> RowsOf(const Batch& batch) {
  std::vector<int64_t> rows;
  const int64_t b = batch.labels.dim(0);
  EXPECT_EQ(batch.images.shape(), (Shape{b, 28, 28, 1}));
  EXPECT_EQ(batch.labels.dtype(), DType::kI32);
  for (int64_t i = 0; i < b; ++i) {
    const float* image = batch.images.data<float>() + i * 784;
    const int64_t row = static_cast<int64_t>(image[0]);
    EXPECT_TRUE(std::all_of(image, image + 784,
                            [&](float p) { return p == image[0]; }));
    EXPECT_EQ(batch.labels.data<int32_t>()[i], row % 10);
    rows.push_back(row);
  }
  return rows;
}

std::unique_ptr<BatchIterator> MakeIterator(const InMemoryDataset& d,
                                            BatchIteratorOptions options) {
  absl::StatusOr<std::unique_ptr<BatchIterator>> it =
      BatchIterator::Create(&d, options);
  EXPECT_TRUE(it.ok()) << it.status();
  return it.ok() ? *std::move(it) : nullptr;
}

struct Taken {
  int64_t epoch;
  int64_t index;
  std::vector<int64_t> rows;
  bool operator==(const Taken&) const = default;
};

std::vector<Taken> Take(BatchIterator& it, int count) {
  std::vector<Taken> out;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<Batch> batch = it.Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    out.push_back({batch->epoch, batch->index, RowsOf(*batch)});
  }
  return out;
}

BatchIteratorOptions Opts(int64_t batch_size, bool shuffle, bool drop_remainder,
                          int prefetch, uint64_t seed = 42) {
  BatchIteratorOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_remainder = drop_remainder;
  o.seed = seed;
  o.prefetch = prefetch;
  return o;
}

// ------------------------------------------------------------- EpochOrder

TEST(EpochOrderTest, EachEpochIsAPermutation) {
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    std::vector<int64_t> order = EpochOrder(1000, true, 7, epoch);
    EXPECT_NE(order, identity);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, identity);
  }
  EXPECT_EQ(EpochOrder(1000, false, 7, 3), identity);
  EXPECT_TRUE(EpochOrder(0, true, 7, 0).empty());
  EXPECT_EQ(EpochOrder(1, true, 7, 0), std::vector<int64_t>{0});
}

TEST(EpochOrderTest, DependsOnlyOnSeedAndEpoch) {
  EXPECT_EQ(EpochOrder(500, true, 7, 2), EpochOrder(500, true, 7, 2));
  EXPECT_NE(EpochOrder(500, true, 7, 2), EpochOrder(500, true, 7, 3));
  EXPECT_NE(EpochOrder(500, true, 7, 2), EpochOrder(500, true, 8, 2));
}

TEST(EpochOrderTest, PinnedValues) {
  // Checkpoints resume on this order, so it must not change between
  // platforms or releases; the values are this implementation's own.
  EXPECT_EQ(EpochOrder(10, true, 1, 0),
            (std::vector<int64_t>{4, 6, 8, 9, 3, 5, 7, 2, 0, 1}));
  EXPECT_EQ(EpochOrder(10, true, 1, 1),
            (std::vector<int64_t>{4, 3, 6, 5, 8, 7, 2, 0, 1, 9}));
}

// ----------------------------------------------------------- BatchIterator

TEST(BatchIteratorTest, EpochsVisitEveryExampleOnceInEpochOrder) {
  InMemoryDataset d = IndexDataset(103);
  auto it = MakeIterator(d, Opts(10, true, false, 2));
  ASSERT_NE(it, nullptr);
  EXPECT_EQ(it->BatchesPerEpoch(), 11);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (int64_t index = 0; index < 11; ++index) {
      EXPECT_EQ(it->position(), (BatchIterator::Position{epoch, index}));
      absl::StatusOr<Batch> batch = it->Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      EXPECT_EQ(batch->epoch, epoch);
      EXPECT_EQ(batch->index, index);
      EXPECT_EQ(batch->labels.dim(0), index < 10 ? 10 : 3);
      const std::vector<int64_t> rows = RowsOf(*batch);
      seen.insert(seen.end(), rows.begin(), rows.end());
    }
    EXPECT_EQ(seen, EpochOrder(103, true, 42, epoch));
  }
  EXPECT_EQ(it->position(), (BatchIterator::Position{3, 0}));
}

TEST(BatchIteratorTest, NoShuffleIsIdentityOrder) {
  InMemoryDataset d = IndexDataset(25);
  auto it = MakeIterator(d, Opts(10, false, false, 0));
  ASSERT_NE(it, nullptr);
  std::vector<Taken> taken = Take(*it, 4);
  ASSERT_EQ(taken.size(), 4u);
  EXPECT_EQ(taken[2].rows, (std::vector<int64_t>{20, 21, 22, 23, 24}));
  EXPECT_EQ(taken[3].rows,
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(taken[3].epoch, 1);
}

TEST(BatchIteratorTest, SameSeedSameOrderDifferentEpochDifferentOrder) {
  InMemoryDataset d = IndexDataset(64);
  auto a = MakeIterator(d, Opts(8, true, false, 2, 5));
  auto b = MakeIterator(d, Opts(8, true, false, 0, 5));
  auto c = MakeIterator(d, Opts(8, true, false, 2, 6));
  ASSERT_TRUE(a && b && c);
  std::vector<Taken> ta = Take(*a, 16), tb = Take(*b, 16), tc = Take(*c, 16);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  // Epoch 1 is not a replay of epoch 0.
  std::vector<int64_t> epoch0, epoch1;
  for (const Taken& t : ta) {
    (t.epoch == 0 ? epoch0 : epoch1)
        .insert((t.epoch == 0 ? epoch0 : epoch1).end(), t.rows.begin(),
                t.rows.end());
  }
  EXPECT_NE(epoch0, epoch1);
}

TEST(BatchIteratorTest, DropRemainder) {
  InMemoryDataset d = IndexDataset(103);
  auto it = MakeIterator(d, Opts(10, true, true, 2));
  ASSERT_NE(it, nullptr);
  EXPECT_EQ(it->BatchesPerEpoch(), 10);
  std::vector<Taken> taken = Take(*it, 20);
  std::set<int64_t> rows0;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(taken[i].epoch, i / 10);
    EXPECT_EQ(taken[i].index, i % 10);
    EXPECT_EQ(taken[i].rows.size(), 10u);
    if (i < 10) rows0.insert(taken[i].rows.begin(), taken[i].rows.end());
  }
  EXPECT_EQ(rows0.size(), 100u);  // Distinct; 3 dropped.

  // An exact multiple has no remainder to drop either way.
  InMemoryDataset even = IndexDataset(40);
  EXPECT_EQ(MakeIterator(even, Opts(10, true, true, 0))->BatchesPerEpoch(), 4);
  EXPECT_EQ(MakeIterator(even, Opts(10, true, false, 0))->BatchesPerEpoch(), 4);
  // Batch larger than the dataset: one partial batch, or an error.
  auto big = MakeIterator(even, Opts(64, true, false, 1));
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->BatchesPerEpoch(), 1);
  absl::StatusOr<Batch> batch = big->Next();
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->labels.dim(0), 40);
  EXPECT_EQ(
      BatchIterator::Create(&even, Opts(64, true, true, 1)).status().code(),
      absl::StatusCode::kInvalidArgument);
  // Up to the largest batch size (the count once overflowed to none).
  auto most = MakeIterator(
      even, Opts(std::numeric_limits<int64_t>::max(), true, false, 0));
  ASSERT_NE(most, nullptr);
  EXPECT_EQ(most->BatchesPerEpoch(), 1);
}

TEST(BatchIteratorTest, PrefetchDepthDoesNotChangeBatches) {
  InMemoryDataset d = MakeSynthetic(150, 10, 9);
  std::vector<std::vector<float>> reference_images;
  std::vector<std::vector<int32_t>> reference_labels;
  for (int prefetch : {0, 1, 2, 5}) {
    auto it = MakeIterator(d, Opts(32, true, false, prefetch, 3));
    ASSERT_NE(it, nullptr);
    for (int i = 0; i < 12; ++i) {
      absl::StatusOr<Batch> batch = it->Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (prefetch == 0) {
        reference_images.push_back(batch->images.ToVector<float>());
        reference_labels.push_back(batch->labels.ToVector<int32_t>());
      } else {
        EXPECT_EQ(batch->images.ToVector<float>(), reference_images[i]);
        EXPECT_EQ(batch->labels.ToVector<int32_t>(), reference_labels[i]);
      }
    }
  }
}

TEST(BatchIteratorTest, SeekReproducesTheSequence) {
  InMemoryDataset d = IndexDataset(53);
  for (int prefetch : {0, 2}) {
    SCOPED_TRACE(prefetch);
    const BatchIteratorOptions options = Opts(8, true, false, prefetch);
    auto reference_it = MakeIterator(d, options);
    ASSERT_NE(reference_it, nullptr);
    ASSERT_EQ(reference_it->BatchesPerEpoch(), 7);
    const std::vector<Taken> reference = Take(*reference_it, 35);  // 5 epochs.
    for (int start : {0, 3, 6, 7, 13, 14, 20, 27}) {
      SCOPED_TRACE(start);
      auto it = MakeIterator(d, options);
      ASSERT_NE(it, nullptr);
      const BatchIterator::Position p{start / 7, start % 7};
      ASSERT_TRUE(it->Seek(p).ok());
      EXPECT_EQ(it->position(), p);
      const std::vector<Taken> resumed = Take(*it, 35 - start);
      EXPECT_EQ(resumed,
                std::vector<Taken>(reference.begin() + start, reference.end()));
    }
  }
}

TEST(BatchIteratorTest, SeekOnAnAdvancedIterator) {
  InMemoryDataset d = IndexDataset(53);
  auto reference_it = MakeIterator(d, Opts(8, true, false, 0));
  const std::vector<Taken> reference = Take(*reference_it, 28);
  auto it = MakeIterator(d, Opts(8, true, false, 3));
  ASSERT_NE(it, nullptr);
  // Forward past what the worker prefetched, back, across epochs.
  Take(*it, 5);
  ASSERT_TRUE(it->Seek({2, 4}).ok());
  EXPECT_EQ(Take(*it, 6),
            std::vector<Taken>(reference.begin() + 18, reference.begin() + 24));
  ASSERT_TRUE(it->Seek({0, 1}).ok());
  EXPECT_EQ(Take(*it, 10),
            std::vector<Taken>(reference.begin() + 1, reference.begin() + 11));
  EXPECT_EQ(it->position(), (BatchIterator::Position{1, 4}));
  // Seeking to where it stands changes nothing.
  ASSERT_TRUE(it->Seek(it->position()).ok());
  EXPECT_EQ(Take(*it, 3),
            std::vector<Taken>(reference.begin() + 11, reference.begin() + 14));
}

TEST(BatchIteratorTest, SeekRejectsBadPositions) {
  InMemoryDataset d = IndexDataset(53);
  auto it = MakeIterator(d, Opts(8, true, false, 2));
  ASSERT_NE(it, nullptr);
  for (BatchIterator::Position p :
       {BatchIterator::Position{-1, 0}, BatchIterator::Position{0, -1},
        BatchIterator::Position{0, 7}}) {
    absl::Status status = it->Seek(p);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("7 batches"));
  }
  // Still usable after a rejected seek.
  absl::StatusOr<Batch> batch = it->Next();
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->index, 0);
}

TEST(BatchIteratorTest, DestructionDoesNotHang) {
  InMemoryDataset d = MakeSynthetic(1000, 10, 1);
  for (int prefetch : {1, 2, 8}) {
    { auto idle = MakeIterator(d, Opts(16, true, false, prefetch)); }
    auto it = MakeIterator(d, Opts(16, true, false, prefetch));
    ASSERT_NE(it, nullptr);
    ASSERT_TRUE(it->Next().ok());
    it.reset();  // Mid-epoch, with a full queue and a blocked worker.
  }
}

TEST(BatchIteratorTest, CreateRejectsBadArguments) {
  // The message of Create's error, or "" when it succeeds.
  auto create_error = [](const InMemoryDataset* d,
                         const BatchIteratorOptions& options) {
    absl::Status status = BatchIterator::Create(d, options).status();
    EXPECT_TRUE(status.ok() ||
                status.code() == absl::StatusCode::kInvalidArgument)
        << status;
    return std::string(status.message());
  };
  InMemoryDataset d = IndexDataset(10);
  EXPECT_THAT(create_error(nullptr, Opts(2, true, false, 2)),
              HasSubstr("dataset is null"));
  EXPECT_THAT(create_error(&d, Opts(0, true, false, 2)),
              HasSubstr("batch_size must be >= 1"));
  EXPECT_THAT(create_error(&d, Opts(2, true, false, -1)),
              HasSubstr("prefetch must be >= 0"));
  InMemoryDataset empty = IndexDataset(0);
  EXPECT_THAT(create_error(&empty, Opts(2, true, false, 2)),
              HasSubstr("has 0 examples, which make no batch of 2"));
  InMemoryDataset undefined;
  EXPECT_THAT(create_error(&undefined, Opts(2, true, false, 2)),
              HasSubstr("has no tensors"));
  EXPECT_EQ(create_error(&d, Opts(2, true, false, 0)), "");
}

TEST(GatherRowsTest, CopiesRowsInOrder) {
  InMemoryDataset d = IndexDataset(10);
  const std::vector<int64_t> rows = {7, 2, 2, 9};
  absl::StatusOr<Batch> batch = GatherRows(d, rows);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(RowsOf(*batch), rows);
  EXPECT_FALSE(batch->images.SharesBufferWith(d.images));

  absl::StatusOr<Batch> bad = GatherRows(d, std::vector<int64_t>{1, 10});
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("row 10 out of range [0, 10)"));

  absl::StatusOr<Batch> none = GatherRows(d, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->images.shape(), (Shape{0, 28, 28, 1}));
}

// A batch of several megabytes is gathered in chunks on several threads:
// every row lands where the order says, and a bad row anywhere is still
// the error, with nothing gathered.
TEST(GatherRowsTest, LargeBatchesAreGatheredInChunks) {
  InMemoryDataset d = IndexDataset(3000);
  std::vector<int64_t> rows(2500);  // 7.8 MB of images.
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = static_cast<int64_t>((i * 1777 + 11) % 3000);
  }
  absl::StatusOr<Batch> batch = GatherRows(d, rows);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(RowsOf(*batch), rows);
  rows[2400] = -1;
  EXPECT_THAT(std::string(GatherRows(d, rows).status().message()),
              HasSubstr("row -1 out of range [0, 3000)"));
}

}  // namespace
}  // namespace mirrortrain::trainer
