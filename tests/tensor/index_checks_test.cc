// Deferred index checks (ops::ScopedIndexChecks): inside a scope Gather and
// the float-to-integer Cast record a bad index or value instead of failing,
// the first one in program order wins, and the record's error reads as the
// op's own; outside a scope they fail at once, as always. On the CPU here;
// the GPU kernels' column is tests/tensor/cuda_index_checks_test.cc.
#include "tensor/ops/index_checks.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/reduction_ops.h"

namespace mirrortrain::ops {
namespace {

const Tensor kTable = Tensor::FromVector<float>({0, 1, 10, 11, 20, 21, 30, 31},
                                                {4, 2});  // 4 rows of 2

TEST(IndexChecksTest, OutsideAScopeTheOpsFailAtOnce) {
  const absl::StatusOr<Tensor> gathered =
      Gather(kTable, Tensor::FromVector<int64_t>({0, 4}, {2}));
  ASSERT_FALSE(gathered.ok());
  EXPECT_NE(gathered.status().message().find(
                "index 4 at position 1 is out of range [0, 4)"),
            std::string::npos);
  EXPECT_FALSE(Cast(Tensor::FromVector<float>({NAN}, {1}), DType::kI32).ok());
}

TEST(IndexChecksTest, InAScopeABadIndexGivesZerosAndIsRecorded) {
  absl::StatusOr<IndexCheckRecord> record =
      IndexCheckRecord::Create(Device::Cpu());
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_TRUE(record->ErrorIn(record->tensor()).ok());
  {
    ScopedIndexChecks scope(&*record);
    const absl::StatusOr<Tensor> y =
        Gather(kTable, Tensor::FromVector<int64_t>({3, 7, 1, -1}, {4}));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->ToVector<float>(),
              (std::vector<float>{30, 31, 0, 0, 10, 11, 0, 0}));
  }
  const absl::Status error = record->ErrorIn(record->tensor());
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(error.message(),
            "Gather: index 7 at position 1 is out of range [0, 4)");
  ASSERT_TRUE(record->Reset().ok());
  EXPECT_TRUE(record->ErrorIn(record->tensor()).ok());
  // The scope is gone: the op fails at once again.
  EXPECT_FALSE(Gather(kTable, Tensor::FromVector<int64_t>({9}, {1})).ok());
}

// A record is written only by the ops given it: without them it needs no
// reset (and the trainer no read); after them it does, once.
TEST(IndexChecksTest, OnlyARecordGivenToOpsNeedsAReset) {
  absl::StatusOr<IndexCheckRecord> record =
      IndexCheckRecord::Create(Device::Cpu());
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_FALSE(record->written());
  {
    ScopedIndexChecks scope(&*record);
    // Ops the record does not check: a float cast, a sum.
    ASSERT_TRUE(Cast(kTable, DType::kF64).ok());
    ASSERT_TRUE(ReduceSum(kTable).ok());
  }
  EXPECT_FALSE(record->written());
  {
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({2, 5}, {2})).ok());
  }
  EXPECT_TRUE(record->written());
  EXPECT_FALSE(record->ErrorIn(record->tensor()).ok());
  ASSERT_TRUE(record->Reset().ok());
  EXPECT_FALSE(record->written());
  EXPECT_TRUE(record->ErrorIn(record->tensor()).ok());
  // A good index writes nothing, but the record was given to the op.
  {
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({1}, {1})).ok());
  }
  EXPECT_TRUE(record->written());
  ASSERT_TRUE(record->Reset().ok());
  EXPECT_TRUE(record->ErrorIn(record->tensor()).ok());
  // With nothing given since, a Reset leaves the clean record alone; a bad
  // value written behind its back (no op does that) stays.
  record->tensor().data<int64_t>()[0] = 0;
  ASSERT_TRUE(record->Reset().ok());
  EXPECT_FALSE(record->ErrorIn(record->tensor()).ok());
}

TEST(IndexChecksTest, TheFirstBadCallInProgramOrderIsKept) {
  absl::StatusOr<IndexCheckRecord> record =
      IndexCheckRecord::Create(Device::Cpu());
  ASSERT_TRUE(record.ok()) << record.status();
  {
    ScopedIndexChecks scope(&*record);
    // A good call, a cast with a NaN at element 2, then a Gather that fails
    // at an earlier position: the cast's failure is the one kept.
    ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({1}, {1})).ok());
    const absl::StatusOr<Tensor> ids = Cast(
        Tensor::FromVector<float>({2.5f, 1.0f, NAN, 3e10f}, {4}), DType::kI32);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->ToVector<int32_t>(), (std::vector<int32_t>{2, 1, 0, 0}));
    ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({5}, {1})).ok());
  }
  EXPECT_EQ(record->ErrorIn(record->tensor()).message(),
            "Cast: element 2 is nan, which has no value in i32");
}

// A layer's label (its context for an immediate error) comes with the
// site, so the recorded error reads as the immediate one did.
TEST(IndexChecksTest, TheLabelOfTheFailingSiteLeadsTheError) {
  absl::StatusOr<IndexCheckRecord> record =
      IndexCheckRecord::Create(Device::Cpu());
  ASSERT_TRUE(record.ok()) << record.status();
  {
    ScopedIndexChecks scope(&*record);
    {
      ScopedIndexCheckLabel label("first: ");
      ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({0}, {1})).ok());
    }
    ScopedIndexCheckLabel label("second: ");
    ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({6}, {1})).ok());
  }
  EXPECT_EQ(record->ErrorIn(record->tensor()).message(),
            "second: Gather: index 6 at position 0 is out of range [0, 4)");
}

TEST(IndexChecksTest, AnInnerScopeRecordsUntilItEnds) {
  absl::StatusOr<IndexCheckRecord> outer =
      IndexCheckRecord::Create(Device::Cpu());
  absl::StatusOr<IndexCheckRecord> inner =
      IndexCheckRecord::Create(Device::Cpu());
  ASSERT_TRUE(outer.ok() && inner.ok());
  {
    ScopedIndexChecks outer_scope(&*outer);
    {
      ScopedIndexChecks inner_scope(&*inner);
      ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({4}, {1})).ok());
    }
    ASSERT_TRUE(Gather(kTable, Tensor::FromVector<int64_t>({0, 5}, {2})).ok());
  }
  EXPECT_EQ(inner->ErrorIn(inner->tensor()).message(),
            "Gather: index 4 at position 0 is out of range [0, 4)");
  EXPECT_EQ(outer->ErrorIn(outer->tensor()).message(),
            "Gather: index 5 at position 1 is out of range [0, 4)");
  EXPECT_FALSE(Gather(kTable, Tensor::FromVector<int64_t>({4}, {1})).ok());
}

// The backward pass runs before the record is read: a bad index's row of
// the output gradient goes to no row of the table (a zeroed forward row
// used none), and nothing is written outside it.
TEST(IndexChecksTest, ABadIndexGetsNoGradient) {
  absl::StatusOr<IndexCheckRecord> record =
      IndexCheckRecord::Create(Device::Cpu());
  ASSERT_TRUE(record.ok()) << record.status();
  GradientTape tape;
  tape.Watch(kTable);
  Tensor y;
  {
    ScopedIndexChecks scope(&*record);
    y = *Gather(kTable, Tensor::FromVector<int64_t>({2, 1000000, 2, -5}, {4}));
  }
  absl::StatusOr<std::vector<std::optional<Tensor>>> g =
      tape.Gradient(*ReduceSum(y), {kTable});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE((*g)[0].has_value());
  EXPECT_EQ((*g)[0]->ToVector<float>(),
            (std::vector<float>{0, 0, 0, 0, 2, 2, 0, 0}));
  EXPECT_FALSE(record->ErrorIn(record->tensor()).ok());
}

}  // namespace
}  // namespace mirrortrain::ops
