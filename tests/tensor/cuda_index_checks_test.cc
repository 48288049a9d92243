// Deferred index checks on the GPU: the kernels check, give zeros for a bad
// index or value and record the first failure as the CPU does
// (tests/tensor/index_checks_test.cc), with no host copy of the indices, so
// a Gather inside a CUDA graph checks on every replay.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/index_checks.h"
#include "tests/tensor/cuda_test_util.h"

namespace mirrortrain::ops {
namespace {

class CudaIndexChecksTest : public testing::CudaTest {};

const Device kGpu = Device::Cuda(0);

Tensor Table() {
  return *Tensor::FromVector<float>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2})
              .To(kGpu);
}

// The record's error, read on the host.
absl::Status RecordedError(const IndexCheckRecord& record) {
  absl::StatusOr<Tensor> host = record.tensor().To(Device::Cpu());
  if (!host.ok()) return host.status();
  return record.ErrorIn(*host);
}

TEST_F(CudaIndexChecksTest, KernelsRecordTheFirstFailureAsTheCpuDoes) {
  absl::StatusOr<IndexCheckRecord> record = IndexCheckRecord::Create(kGpu);
  ASSERT_TRUE(record.ok()) << record.status();
  Tensor gathered, cast;
  {
    ScopedIndexChecks scope(&*record);
    gathered = *Gather(
        Table(), *Tensor::FromVector<int64_t>({3, 7, 1, -1}, {4}).To(kGpu));
    cast = *Cast(*Tensor::FromVector<float>({2.5f, NAN}, {2}).To(kGpu),
                 DType::kI32);
  }
  EXPECT_EQ(gathered.To(Device::Cpu())->ToVector<float>(),
            (std::vector<float>{30, 31, 0, 0, 10, 11, 0, 0}));
  EXPECT_EQ(cast.To(Device::Cpu())->ToVector<int32_t>(),
            (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(RecordedError(*record).message(),
            "Gather: index 7 at position 1 is out of range [0, 4)");
  ASSERT_TRUE(record->Reset().ok());
  {
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(Cast(*Tensor::FromVector<double>({1, 2, -3e30}, {3}).To(kGpu),
                     DType::kI64)
                    .ok());
  }
  EXPECT_EQ(RecordedError(*record).message(),
            "Cast: element 2 is -2.9999999999999998e+30, which has no value "
            "in i64");
}

TEST_F(CudaIndexChecksTest, ARecordedGatherChecksOnEveryReplay) {
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  cuda::ScopedCurrentStream current(stream->handle());
  const Tensor table = Table();
  Tensor indices = *Tensor::FromVector<int64_t>({0, 1, 2}, {3}).To(kGpu);
  absl::StatusOr<IndexCheckRecord> record = IndexCheckRecord::Create(kGpu);
  ASSERT_TRUE(record.ok()) << record.status();
  const uint64_t pool = cuda::NewGraphMemoryPoolId();
  Tensor y;
  absl::StatusOr<cuda::CudaGraph> graph;
  {
    cuda::ScopedCapture capture(0, pool);
    cuda::ScopedGraphMemoryPool memory(pool);
    ASSERT_TRUE(capture.Begin().ok());
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(record->Reset().ok());
    absl::StatusOr<Tensor> gathered = Gather(table, indices);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    y = *gathered;
    graph = capture.End();
  }
  ASSERT_TRUE(graph.ok()) << graph.status();
  const struct {
    std::vector<int64_t> ids;
    std::string error;
  } replays[] = {
      {{0, 1, 2}, ""},
      {{0, 9, 2}, "Gather: index 9 at position 1 is out of range [0, 4)"},
      {{3, 3, -2}, "Gather: index -2 at position 2 is out of range [0, 4)"},
      {{3, 2, 1}, ""},
  };
  for (const auto& replay : replays) {
    ASSERT_TRUE(
        indices.CopyFrom(Tensor::FromVector<int64_t>(replay.ids, {3})).ok());
    ASSERT_TRUE(graph->Launch().ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    EXPECT_EQ(std::string(RecordedError(*record).message()), replay.error);
    const std::vector<float> rows = y.To(Device::Cpu())->ToVector<float>();
    for (int i = 0; i < 3; ++i) {
      const int64_t id = replay.ids[i];
      const bool valid = id >= 0 && id < 4;
      EXPECT_EQ(rows[2 * i], valid ? 10.0f * id : 0.0f) << "row " << i;
      EXPECT_EQ(rows[2 * i + 1], valid ? 10.0f * id + 1 : 0.0f) << "row " << i;
    }
  }
}

// A Reset enqueues nothing itself: the clearing memset comes with the next
// checked op, right before it, so steps and recordings without checked ops
// (the CNN's, the MLP's) hold none.
TEST_F(CudaIndexChecksTest, TheClearingComesWithTheNextCheckedOp) {
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  cuda::ScopedCurrentStream current(stream->handle());
  const Tensor table = Table();
  const Tensor bad = *Tensor::FromVector<int64_t>({5}, {1}).To(kGpu);
  const Tensor good = *Tensor::FromVector<int64_t>({1}, {1}).To(kGpu);
  absl::StatusOr<IndexCheckRecord> record = IndexCheckRecord::Create(kGpu);
  ASSERT_TRUE(record.ok()) << record.status();
  {
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(Gather(table, bad).ok());
  }
  EXPECT_FALSE(RecordedError(*record).ok());
  ASSERT_TRUE(record->Reset().ok());
  EXPECT_FALSE(record->written());
  EXPECT_FALSE(RecordedError(*record).ok()) << "cleared before an op needs it";
  {
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(Cast(table, DType::kF64).ok());  // Not a checked op.
  }
  EXPECT_FALSE(record->written());
  EXPECT_FALSE(RecordedError(*record).ok());
  {
    ScopedIndexChecks scope(&*record);
    ASSERT_TRUE(Gather(table, good).ok());
  }
  EXPECT_TRUE(record->written());
  EXPECT_TRUE(RecordedError(*record).ok()) << "not cleared before the Gather";

  // The nodes of a recording of Reset (or not) and one op.
  const auto nodes = [&](bool reset, bool checked) -> int64_t {
    const uint64_t pool = cuda::NewGraphMemoryPoolId();
    absl::StatusOr<cuda::CudaGraph> graph;
    {
      cuda::ScopedCapture capture(0, pool);
      cuda::ScopedGraphMemoryPool memory(pool);
      EXPECT_TRUE(capture.Begin().ok());
      ScopedIndexChecks scope(&*record);
      if (reset) {
        EXPECT_TRUE(record->Reset().ok());
      }
      EXPECT_TRUE(
          (checked ? Gather(table, good) : Cast(table, DType::kF64)).ok());
      graph = capture.End();
    }
    EXPECT_TRUE(graph.ok()) << graph.status();
    return graph.ok() ? graph->num_nodes() : -1;
  };
  // In this order: the first recorded Reset leaves its clearing pending
  // (nothing checked took it), the third's Gather takes it, so none is
  // pending for the fourth.
  const int64_t reset_unchecked = nodes(true, false);
  const int64_t unchecked = nodes(false, false);
  EXPECT_EQ(reset_unchecked, unchecked);
  // The recorded Reset's memset goes in front of the recorded Gather; with
  // nothing pending a recorded Gather holds none.
  const int64_t reset_checked = nodes(true, true);
  const int64_t checked = nodes(false, true);
  EXPECT_EQ(reset_checked, checked + 1);
}

}  // namespace
}  // namespace mirrortrain::ops
