// Collectives on GPU buffers: the local all-reduce as a device kernel for
// logical replicas sharing one GPU, NCCL with a one-GPU communicator, and
// MirroredStrategy's stream-ordered AllReduceAsync. Labelled `gpu`; skips
// with the reason when no GPU is visible.
#include <algorithm>
#include <thread>

#include "distribute/device_set.h"
#include "distribute/gradient_buckets.h"
#include "distribute/local_all_reduce.h"
#include "distribute/mirrored_strategy.h"
#include "distribute/nccl_all_reduce.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"
#include "tests/tensor/cuda_test_util.h"

namespace mirrortrain::distribute {
namespace {

using std::chrono::milliseconds;

class CudaAllReduceTest : public testing::CudaTest,
                          public ::testing::WithParamInterface<int> {};

// Replica r's element i is (r + 1) * (i + 1) as a host tensor.
Tensor RankFilled(int r, int64_t size, DType dtype) {
  Tensor t = Tensor::HostEmpty(DType::kF64, {size});
  for (int64_t i = 0; i < size; ++i) {
    t.data<double>()[i] = static_cast<double>((r + 1) * (i + 1));
  }
  return *ops::Cast(t, dtype);
}

// Logical replicas on gpu:0, each on its own thread and stream, as the
// mirrored strategy runs them: replica r all-reduces RankFilled(r, size),
// stored `offset` elements into its device buffer (offset 1 leaves the
// slices unaligned for 16-byte accesses). With `as_list`, each replica
// posts its buffer as a list of views cut at its own places (as when some
// replicas pack a gradient bucket and others reduce it in place). Returns
// each replica's result as f64 on the host.
std::vector<Tensor> AllReduceOnOneGpu(int n, DType dtype, int64_t size,
                                      ReduceOp op, int64_t offset,
                                      bool as_list = false) {
  LocalAllReduce ops(n, milliseconds(30000));
  std::vector<Tensor> buffers(n);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(0);
      if (!stream.ok()) {
        status[r] = stream.status();
        return;
      }
      cuda::ScopedCurrentStream current(stream->handle());
      Tensor host = *ops::Concat(
          {Tensor::HostZeros(dtype, {offset}), RankFilled(r, size, dtype)}, 0);
      absl::StatusOr<Tensor> b = host.To(Device::Cuda(0));
      if (b.ok()) b = b->SliceRows(offset, size);
      if (!b.ok()) {
        status[r] = b.status();
        return;
      }
      buffers[r] = *b;
      if (!as_list) {
        status[r] = ops.AllReduce(r, op, buffers[r]);
        return;
      }
      // Three cuts (one twice: an empty piece), then 20 more past the
      // middle: more segments than one launch takes.
      std::vector<int64_t> cuts = {int64_t{3} * r + 1, size / 2 + r,
                                   size / 2 + r};
      for (int64_t k = 1; k <= 20; ++k) {
        cuts.push_back(size / 2 + r + k * std::max<int64_t>(1, size / 50));
      }
      std::vector<Tensor> pieces;
      int64_t begin = 0;
      for (int64_t cut : cuts) {
        cut = std::min(cut, size);
        if (cut < begin) continue;
        pieces.push_back(*buffers[r].SliceRows(begin, cut - begin));
        begin = cut;
      }
      pieces.push_back(*buffers[r].SliceRows(begin, size - begin));
      status[r] =
          ops.AllReduceList(r, op, absl::MakeSpan(pieces), ListCuts::kAny);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<Tensor> out;
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(status[r].ok()) << status[r];
    if (!status[r].ok()) return {};
    out.push_back(*ops::Cast(*buffers[r].To(Device::Cpu()), DType::kF64));
  }
  return out;
}

TEST_P(CudaAllReduceTest, LocalAllReduceOfLogicalReplicasOnOneGpu) {
  const int n = GetParam();
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    for (int64_t size : {0, 1, 7, 1001, 65537}) {
      SCOPED_TRACE(::testing::Message()
                   << DTypeName(dtype) << " size " << size);
      std::vector<Tensor> got =
          AllReduceOnOneGpu(n, dtype, size, ReduceOp::kSum, 0);
      ASSERT_EQ(got.size(), static_cast<size_t>(n));
      const Tensor want = RankFilled(0, size, DType::kF64);
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < size; ++i) {
          ASSERT_EQ(got[r].data<double>()[i],
                    want.data<double>()[i] * n * (n + 1) / 2)
              << "replica " << r << " element " << i;
        }
      }
    }
  }
}

// The mean, on buffers whose slices are and are not 16-byte aligned (the
// kernel's two access widths). Every value is exact in f32.
TEST_P(CudaAllReduceTest, MeanOnAlignedAndUnalignedBuffers) {
  const int n = GetParam();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (int64_t offset : {0, 1}) {
      for (int64_t size : {5, 1001, 65537}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " size "
                                          << size << " offset " << offset);
        std::vector<Tensor> got =
            AllReduceOnOneGpu(n, dtype, size, ReduceOp::kMean, offset);
        ASSERT_EQ(got.size(), static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < size; ++i) {
            ASSERT_EQ(got[r].data<double>()[i], (i + 1) * (n + 1) / 2.0)
                << "replica " << r << " element " << i;
          }
        }
      }
    }
  }
}

// Lists cut differently per replica (an empty piece among them), with and
// without 16-byte alignment: the same sums as one buffer.
TEST_P(CudaAllReduceTest, ListsCutDifferentlyPerReplica) {
  const int n = GetParam();
  for (DType dtype : {DType::kF32, DType::kI64}) {
    for (int64_t offset : {0, 1}) {
      for (int64_t size : {1, 9, 1001, 65537}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " size "
                                          << size << " offset " << offset);
        std::vector<Tensor> got = AllReduceOnOneGpu(
            n, dtype, size, ReduceOp::kSum, offset, /*as_list=*/true);
        ASSERT_EQ(got.size(), static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < size; ++i) {
            ASSERT_EQ(got[r].data<double>()[i], (i + 1.0) * n * (n + 1) / 2)
                << "replica " << r << " element " << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, CudaAllReduceTest, ::testing::Values(2, 4));

class CudaCollectivesTest : public CudaAllReduceTest {};

TEST_F(CudaCollectivesTest, NcclWithOneGpuCommunicator) {
  if (!NcclBuilt()) GTEST_SKIP() << "built without NCCL";
  absl::StatusOr<std::unique_ptr<CrossDeviceOps>> nccl = MakeNcclAllReduce({0});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  Tensor buffer = *RankFilled(2, 4099, DType::kF32).To(Device::Cuda(0));
  ASSERT_TRUE((*nccl)->AllReduce(0, ReduceOp::kSum, buffer).ok());
  ASSERT_TRUE(cuda::Synchronize(0).ok());
  // One rank: the sum is the buffer itself.
  EXPECT_EQ(buffer.To(Device::Cpu())->ToVector<float>(),
            RankFilled(2, 4099, DType::kF32).ToVector<float>());
}

TEST_F(CudaCollectivesTest, HighPriorityStreamsRankAboveNormalOnes) {
  absl::StatusOr<cuda::Stream> high =
      cuda::Stream::Create(0, cuda::StreamPriority::kHigh);
  absl::StatusOr<cuda::Stream> normal = cuda::Stream::Create(0);
  ASSERT_TRUE(high.ok()) << high.status();
  ASSERT_TRUE(normal.ok()) << normal.status();
  ASSERT_TRUE(normal->Priority().ok());
  ASSERT_TRUE(high->Priority().ok());
  EXPECT_EQ(*normal->Priority(), 0);
  // Every GPU with compute capability 3.5 or later has a range.
  EXPECT_LT(*high->Priority(), 0);
}

TEST_F(CudaCollectivesTest, RepeatedGpuEntriesAreLogicalReplicas) {
  absl::StatusOr<std::vector<Device>> d = ResolveDevices({"gpu:0", "gpu:0"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, (std::vector<Device>{Device::Cuda(0), Device::Cuda(0)}));
  EXPECT_FALSE(ResolveDevices({"cpu:0", "cpu:0"}).ok());
}

// Two logical replicas on gpu:0 through the strategy: the all-reduce waits
// for the compute stream's kernels (no host sync in between) and its
// result is visible to the compute stream after the future.
TEST_F(CudaCollectivesTest, MirroredStrategyOnTwoLogicalGpus) {
  auto strategy =
      MirroredStrategy::Create({Device::Cuda(0), Device::Cuda(0)},
                               MirroredOptions{"auto", 1 << 20, 60.0});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  EXPECT_EQ((*strategy)->cross_device_ops().name(), "local");
  std::vector<Tensor> results(2);
  absl::Status s = (*strategy)->Run([&](ReplicaContext& ctx) -> absl::Status {
    const int r = ctx.replica_id();
    MT_ASSIGN_OR_RETURN(Tensor x,
                        RankFilled(r, 100000, DType::kF32).To(ctx.device()));
    // Kernels queued on the compute stream right before the all-reduce.
    MT_ASSIGN_OR_RETURN(Tensor y, ops::Scale(x, 2.0));
    MT_RETURN_IF_ERROR(ctx.AllReduceAsync(ReduceOp::kSum, y).get());
    MT_ASSIGN_OR_RETURN(results[r], ops::Scale(y, 0.5));
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> want = [] {
    std::vector<float> v = RankFilled(0, 100000, DType::kF32).ToVector<float>();
    for (float& x : v) x *= 3;  // 1 + 2 for two replicas.
    return v;
  }();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].To(Device::Cpu())->ToVector<float>(), want) << r;
  }
}

// One step of three logical replicas on gpu:0, as a training step uses
// collectives: x_r holds the replica's state; a bucket packs 2*x_r and x_r
// into one all-reduce (PackAndAllReduceAsync), a second all-reduce is a
// blocking one (ctx.AllReduce, as synchronized batch norm makes), and the
// state is updated in place from both sums.
absl::Status LogicalReplicaStep(ReplicaContext& ctx, std::vector<Tensor>& x) {
  Tensor& mine = x[ctx.replica_id()];
  MT_ASSIGN_OR_RETURN(Tensor twice, ops::Scale(mine, 2.0));
  MT_ASSIGN_OR_RETURN(
      Tensor bucket,
      Tensor::Empty(DType::kF32, {2 * mine.num_elements()}, ctx.device()));
  std::shared_future<absl::Status> packed =
      ctx.PackAndAllReduceAsync(ReduceOp::kSum, {twice, mine}, bucket);
  // And two tensors reduced in place as one list, where the replicas' ops
  // take lists (local ones do).
  MT_ASSIGN_OR_RETURN(Tensor thrice, ops::Scale(mine, 3.0));
  MT_ASSIGN_OR_RETURN(Tensor negated, ops::Scale(mine, -1.0));
  if (!ctx.reduces_lists()) return absl::InternalError("expected list ops");
  std::shared_future<absl::Status> listed =
      ctx.AllReduceListAsync(ReduceOp::kSum, {thrice, negated});
  MT_ASSIGN_OR_RETURN(Tensor squared, ops::Mul(mine, mine));
  std::vector<Tensor> blocking = {squared};
  MT_RETURN_IF_ERROR(ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(blocking)));
  MT_RETURN_IF_ERROR(packed.get());
  MT_RETURN_IF_ERROR(listed.get());
  MT_RETURN_IF_ERROR(ctx.OrderAfterCollectives());
  MT_ASSIGN_OR_RETURN(Tensor first, bucket.SliceRows(0, mine.num_elements()));
  MT_ASSIGN_OR_RETURN(Tensor both, ops::Add(thrice, negated));
  MT_ASSIGN_OR_RETURN(Tensor partial, ops::Add(first, blocking[0]));
  MT_ASSIGN_OR_RETURN(Tensor sum, ops::Add(partial, both));
  MT_ASSIGN_OR_RETURN(Tensor next, ops::Scale(sum, 1.0 / 64));
  return mine.CopyFrom(next);
}

// Three replicas' states, replica r's filled with RankFilled(r) / 1000.
std::vector<Tensor> LogicalReplicaStates() {
  std::vector<Tensor> x;
  for (int r = 0; r < 3; ++r) {
    x.push_back(*ops::Scale(
        *RankFilled(r, 5000, DType::kF32).To(Device::Cuda(0)), 1e-3));
  }
  // Made on this thread's stream; the replicas' streams read them.
  EXPECT_TRUE(cuda::Synchronize(0).ok());
  return x;
}

// Replays `graph` three times, waits, and expects each replica's state
// `b` equal to the three eager steps' `a`, and every replica alike.
void ExpectReplaysMatchEager(MirroredStrategy& graphed,
                             const cuda::CudaGraph& graph,
                             const std::vector<Tensor>& a,
                             const std::vector<Tensor>& b) {
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(graphed.Replay(graph).ok());
  }
  // Replay does not wait; the host reads below are on another stream.
  absl::StatusOr<DeviceFence> done = graphed.Fence();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->Wait().ok());
  for (size_t r = 0; r < a.size(); ++r) {
    EXPECT_EQ(a[r].To(Device::Cpu())->ToVector<float>(),
              b[r].To(Device::Cpu())->ToVector<float>())
        << "replica " << r;
  }
  // Every replica holds the same (reduced) state.
  EXPECT_EQ(b.front().To(Device::Cpu())->ToVector<float>(),
            b.back().To(Device::Cpu())->ToVector<float>());
}

// With the communication streams at either priority (the graph keeps its
// kernels' priorities): the order comes from events, not from priorities.
TEST_F(CudaCollectivesTest, RecordedStepsOfLogicalReplicasReplayAsEagerRuns) {
  for (const auto priority :
       {cuda::StreamPriority::kHigh, cuda::StreamPriority::kNormal}) {
    SCOPED_TRACE(priority == cuda::StreamPriority::kHigh ? "high" : "normal");
    const std::vector<Device> devices(3, Device::Cuda(0));
    const MirroredOptions options{"auto", 1 << 20, 60.0, priority};
    auto eager = MirroredStrategy::Create(devices, options);
    auto graphed = MirroredStrategy::Create(devices, options);
    ASSERT_TRUE(eager.ok()) << eager.status();
    ASSERT_TRUE(graphed.ok()) << graphed.status();
    ASSERT_TRUE((*graphed)->CanCaptureRuns().ok());
    std::vector<Tensor> a = LogicalReplicaStates(), b = LogicalReplicaStates();
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE((*eager)
                      ->Run([&](ReplicaContext& ctx) {
                        return LogicalReplicaStep(ctx, a);
                      })
                      .ok());
    }
    absl::StatusOr<cuda::CudaGraph> graph = (*graphed)->CaptureRun(
        [&](ReplicaContext& ctx) { return LogicalReplicaStep(ctx, b); });
    ASSERT_TRUE(graph.ok()) << graph.status();
    // Recording ran nothing.
    EXPECT_EQ(b[1].To(Device::Cpu())->ToVector<float>(),
              LogicalReplicaStates()[1].To(Device::Cpu())->ToVector<float>());
    ExpectReplaysMatchEager(**graphed, *graph, a, b);
  }
}

// One gradient bucket of three odd-sized gradients per replica (k + 1 times
// slice k of the replica's state). Replica 0 keeps a handle to one of its
// gradients, so it packs its bucket; the others' local ops reduce theirs
// where they are, as one list, and the collective pairs them all the same.
// The state becomes the reduced gradients / 64.
absl::Status BucketStep(ReplicaContext& ctx, std::vector<Tensor>& x) {
  Tensor& mine = x[ctx.replica_id()];
  const std::vector<int64_t> sizes = {1000, 999, 1001},
                             starts = {0, 1000, 1999};
  const BucketPlan plan = PlanBuckets({4000, 3996, 4004}, 1 << 20, 1 << 20);
  GradientBuckets buckets(&plan, &ctx, {{1000}, {999}, {1001}}, DType::kF32);
  Tensor kept;
  for (size_t k = sizes.size(); k-- > 0;) {
    MT_ASSIGN_OR_RETURN(Tensor slice, mine.SliceRows(starts[k], sizes[k]));
    MT_ASSIGN_OR_RETURN(Tensor g, ops::Scale(slice, k + 1.0));
    if (ctx.replica_id() == 0 && k == 1) kept = g;
    MT_RETURN_IF_ERROR(buckets.Ready(k, std::move(g)));
  }
  MT_ASSIGN_OR_RETURN(std::vector<Tensor> reduced, buckets.Finish());
  for (size_t k = 0; k < sizes.size(); ++k) {
    MT_ASSIGN_OR_RETURN(Tensor slice, mine.SliceRows(starts[k], sizes[k]));
    MT_ASSIGN_OR_RETURN(Tensor next, ops::Scale(reduced[k], 1.0 / 64));
    MT_RETURN_IF_ERROR(slice.CopyFrom(next));
  }
  return absl::OkStatus();
}

TEST_F(CudaCollectivesTest, PackedAndListBucketsPairInRecordedSteps) {
  const std::vector<Device> devices(3, Device::Cuda(0));
  auto eager = MirroredStrategy::Create(devices, {"auto", 1 << 20, 60.0});
  auto graphed = MirroredStrategy::Create(devices, {"auto", 1 << 20, 60.0});
  ASSERT_TRUE(eager.ok()) << eager.status();
  ASSERT_TRUE(graphed.ok()) << graphed.status();
  auto states = [] {
    std::vector<Tensor> x;
    for (int r = 0; r < 3; ++r) {
      x.push_back(*ops::Scale(
          *RankFilled(r, 3000, DType::kF32).To(Device::Cuda(0)), 1e-3));
    }
    EXPECT_TRUE(cuda::Synchronize(0).ok());
    return x;
  };
  std::vector<Tensor> a = states(), b = states();
  ASSERT_TRUE((*eager)
                  ->Run([&](ReplicaContext& ctx) { return BucketStep(ctx, a); })
                  .ok());
  // One eager step: element i of slice k is (k + 1) * 6e-3 * (i' + 1) / 64
  // on every replica (i' its index in the state), the sum of 1, 2 and 3
  // times the same values.
  const std::vector<float> first = a[2].To(Device::Cpu())->ToVector<float>();
  // (A few f32 roundings from the exact value.)
  EXPECT_NEAR(first[1000], 2 * 6e-3 * 1001 / 64, 1e-6 * first[1000]);
  EXPECT_NEAR(first[2999], 3 * 6e-3 * 3000 / 64, 1e-6 * first[2999]);
  for (int step = 1; step < 3; ++step) {
    ASSERT_TRUE(
        (*eager)
            ->Run([&](ReplicaContext& ctx) { return BucketStep(ctx, a); })
            .ok());
  }
  absl::StatusOr<cuda::CudaGraph> graph = (*graphed)->CaptureRun(
      [&](ReplicaContext& ctx) { return BucketStep(ctx, b); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ExpectReplaysMatchEager(**graphed, *graph, a, b);
}

// Zero, after a chain of products of `slow` (ones: each product is ones
// again) that keeps this replica's stream busy for a while.
absl::StatusOr<Tensor> SlowZero(const Tensor& slow) {
  Tensor y = slow;
  for (int i = 0; i < 8; ++i) {
    MT_ASSIGN_OR_RETURN(y, ops::MatMul(y, slow));
    MT_ASSIGN_OR_RETURN(y, ops::Scale(y, 1.0 / slow.dim(0)));
  }
  MT_ASSIGN_OR_RETURN(Tensor zero, ops::ReduceSum(y));
  return ops::Scale(zero, 0.0);
}

// The replicas share what they computed (distribute.sum_in_update's
// collective). A blocking all-reduce first (it orders the replicas by
// itself), then each makes its shared tensor behind a slow chain (a peer
// not ordered after it by Share would read it early), reads every
// replica's tensors in replica order behind a slow chain of its own, and
// overwrites its shared tensor after EndShare (which must order that after
// every peer's reads). The state becomes the sum / 64.
absl::Status SharingStep(ReplicaContext& ctx, const Tensor& slow,
                         std::vector<Tensor>& x) {
  if (!ctx.shares_memory()) return absl::InternalError("expected sharing");
  Tensor& mine = x[ctx.replica_id()];
  MT_ASSIGN_OR_RETURN(Tensor h, ops::Mul(mine, mine));
  std::vector<Tensor> blocking = {h};
  MT_RETURN_IF_ERROR(ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(blocking)));
  MT_ASSIGN_OR_RETURN(const Tensor before, SlowZero(slow));
  MT_ASSIGN_OR_RETURN(Tensor g, ops::Add(mine, before));
  MT_ASSIGN_OR_RETURN(g, ops::Scale(g, ctx.replica_id() + 1.0));
  std::vector<Tensor> posted = {g, blocking[0]};
  MT_ASSIGN_OR_RETURN(const std::vector<std::vector<Tensor>> lists,
                      ctx.Share(absl::MakeSpan(posted)));
  MT_ASSIGN_OR_RETURN(const Tensor late, SlowZero(slow));
  MT_ASSIGN_OR_RETURN(Tensor sum, ops::Add(lists[0][0], late));
  for (size_t r = 1; r < lists.size(); ++r) {
    MT_ASSIGN_OR_RETURN(sum, ops::Add(sum, lists[r][0]));
  }
  MT_ASSIGN_OR_RETURN(sum, ops::Add(sum, lists.back()[1]));
  MT_ASSIGN_OR_RETURN(Tensor next, ops::Scale(sum, 1.0 / 64));
  MT_RETURN_IF_ERROR(mine.CopyFrom(next));
  MT_RETURN_IF_ERROR(ctx.EndShare());
  return g.CopyFrom(h);
}

// One SharingStep from `start` (three replicas' states) against the host:
// every replica's (r + 1) x summed in replica order, plus the all-reduced
// squares, over 64, bit for bit.
void ExpectASharedStepSumsAsTheHost(MirroredStrategy& strategy,
                                    const Tensor& square,
                                    const std::vector<Tensor>& start) {
  std::vector<Tensor> x;
  std::vector<std::vector<float>> x0;
  for (const Tensor& t : start) {
    x.push_back(*t.Clone());
    x0.push_back(t.To(Device::Cpu())->ToVector<float>());
  }
  // Cloned on this thread's stream; the replicas' streams read them.
  if (start[0].device().is_cuda()) {
    ASSERT_TRUE(cuda::Synchronize(0).ok());
  }
  ASSERT_TRUE(
      strategy
          .Run([&](ReplicaContext& ctx) { return SharingStep(ctx, square, x); })
          .ok());
  for (int replica = 0; replica < 3; ++replica) {
    const std::vector<float> got =
        x[replica].To(Device::Cpu())->ToVector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      float sum = x0[0][i];
      for (int r = 1; r < 3; ++r) sum += x0[r][i] * static_cast<float>(r + 1);
      float squares = x0[0][i] * x0[0][i];
      for (int r = 1; r < 3; ++r) squares += x0[r][i] * x0[r][i];
      ASSERT_EQ(got[i], (sum + squares) * (1.0f / 64))
          << "replica " << replica << " element " << i;
    }
  }
}

TEST_F(CudaCollectivesTest, SharedTensorsAreReadInOrderEagerAndRecorded) {
  const std::vector<Device> devices(3, Device::Cuda(0));
  const MirroredOptions options{"auto", 1 << 20, 60.0};
  auto eager = MirroredStrategy::Create(devices, options);
  auto graphed = MirroredStrategy::Create(devices, options);
  ASSERT_TRUE(eager.ok()) << eager.status();
  ASSERT_TRUE(graphed.ok()) << graphed.status();
  // Ones: every product of the chain is ones again (1024 x 1 / 1024).
  const Tensor square =
      *Tensor::HostFull(DType::kF32, {1024, 1024}, 1.0).To(Device::Cuda(0));
  std::vector<Tensor> a = LogicalReplicaStates(), b = LogicalReplicaStates();
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*eager)
                    ->Run([&](ReplicaContext& ctx) {
                      return SharingStep(ctx, square, a);
                    })
                    .ok());
  }
  absl::StatusOr<cuda::CudaGraph> graph = (*graphed)->CaptureRun(
      [&](ReplicaContext& ctx) { return SharingStep(ctx, square, b); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ExpectReplaysMatchEager(**graphed, *graph, a, b);
  ExpectASharedStepSumsAsTheHost(**eager, square, LogicalReplicaStates());
}

// The same step on three logical CPU devices (this test's host twin).
TEST(SharingOnLogicalCpusTest, ASharedStepSumsAsTheHost) {
  std::vector<Device> devices;
  for (int r = 0; r < 3; ++r) devices.push_back(Device::Cpu(r));
  auto strategy = MirroredStrategy::Create(devices, {"auto", 1 << 20, 60.0});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  std::vector<Tensor> start;
  for (int r = 0; r < 3; ++r) {
    start.push_back(*ops::Scale(RankFilled(r, 5000, DType::kF32), 1e-3));
  }
  ExpectASharedStepSumsAsTheHost(
      **strategy, Tensor::HostFull(DType::kF32, {32, 32}, 1.0), start);
}

// A step that reads its input late: a chain of products first (a few
// milliseconds on the GPU), then x += sum of the input's rows. Staging the
// next input while a replay of this one still runs would change the sum.
absl::Status LateReadingStep(ReplicaContext& ctx, const Tensor& slow,
                             std::vector<Tensor>& inputs,
                             std::vector<Tensor>& x) {
  Tensor y = slow;
  for (int i = 0; i < 24; ++i) {
    MT_ASSIGN_OR_RETURN(y, ops::MatMul(y, slow));
    MT_ASSIGN_OR_RETURN(y, ops::Scale(y, 1.0 / 1024));
  }
  const int id = ctx.replica_id();
  MT_ASSIGN_OR_RETURN(Tensor rows, ops::ReduceSum(inputs[id], {0}));
  MT_ASSIGN_OR_RETURN(Tensor zero, ops::ReduceSum(y, {0}));
  MT_ASSIGN_OR_RETURN(zero, ops::Scale(zero, 0.0));
  MT_ASSIGN_OR_RETURN(Tensor next, ops::Add(x[id], rows));
  MT_ASSIGN_OR_RETURN(next, ops::Add(next, zero));
  return x[id].CopyFrom(next);
}

TEST_F(CudaCollectivesTest, EnqueuedStagingAndReplaysKeepTheirOrderUnwaited) {
  const std::vector<Device> devices(3, Device::Cuda(0));
  auto strategy = MirroredStrategy::Create(devices, {"auto", 1 << 20, 60.0});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  const Device gpu = Device::Cuda(0);
  const Tensor slow = *Tensor::HostFull(DType::kF32, {1024, 1024}, 1.0).To(gpu);
  constexpr int kSteps = 6;
  // Step k's input for replica r: 1024 rows of (k + 1) * (r + 1).
  std::vector<std::vector<Tensor>> sources(kSteps);
  for (int k = 0; k < kSteps; ++k) {
    for (int r = 0; r < 3; ++r) {
      sources[k].push_back(
          *Tensor::HostFull(DType::kF32, {1024, 1024}, (k + 1) * (r + 1))
               .To(gpu));
    }
  }
  std::vector<Tensor> inputs, x;
  for (int r = 0; r < 3; ++r) {
    inputs.push_back(*Tensor::Zeros(DType::kF32, {1024, 1024}, gpu));
    x.push_back(*Tensor::Zeros(DType::kF32, {1024}, gpu));
  }
  // Each replica thread's cuBLAS handle is made before the capture, as the
  // trainer's eager warm-up steps make them.
  ASSERT_TRUE((*strategy)
                  ->Run([&](ReplicaContext&) {
                    return ops::MatMul(slow, slow).status();
                  })
                  .ok());
  ASSERT_TRUE(cuda::Synchronize(0).ok());  // As in LogicalReplicaStates.
  absl::StatusOr<cuda::CudaGraph> graph =
      (*strategy)->CaptureRun([&](ReplicaContext& ctx) {
        return LateReadingStep(ctx, slow, inputs, x);
      });
  ASSERT_TRUE(graph.ok()) << graph.status();
  Allocator* pinned = *cuda::PinnedHostAllocator();
  // x after each step, copied to the host by each replica after the
  // replay, as the trainer copies its loss.
  std::vector<std::vector<Tensor>> seen(kSteps, std::vector<Tensor>(3));
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_TRUE((*strategy)
                    ->Enqueue([&](ReplicaContext& ctx) {
                      const int r = ctx.replica_id();
                      return inputs[r].CopyFrom(sources[k][r]);
                    })
                    .ok());
    ASSERT_TRUE((*strategy)->Replay(*graph).ok());
    ASSERT_TRUE(
        (*strategy)
            ->Enqueue([&](ReplicaContext& ctx) -> absl::Status {
              const int r = ctx.replica_id();
              MT_ASSIGN_OR_RETURN(
                  seen[k][r], Tensor::EmptyWith(pinned, DType::kF32, {1024}));
              return cuda::CopyAsync(seen[k][r].raw_data(), Device::Cpu(),
                                     x[r].raw_data(), gpu, x[r].bytes());
            })
            .ok());
  }
  absl::StatusOr<DeviceFence> done = (*strategy)->Fence();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->Wait().ok());
  for (int r = 0; r < 3; ++r) {
    double want = 0;
    for (int k = 0; k < kSteps; ++k) {
      want += 1024.0 * (k + 1) * (r + 1);
      const std::vector<float> got = seen[k][r].ToVector<float>();
      EXPECT_EQ(got.front(), want) << "replica " << r << " step " << k;
      EXPECT_EQ(got.back(), want) << "replica " << r << " step " << k;
    }
  }
}

TEST_F(CudaCollectivesTest, AFailedRecordingLeavesTheStrategyUsable) {
  auto strategy = MirroredStrategy::Create({Device::Cuda(0), Device::Cuda(0)},
                                           {"auto", 1 << 20, 60.0});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  std::vector<Tensor> x = LogicalReplicaStates();
  // Replica 1 reads a value on the host after the first collective: the
  // capture is invalidated, replica 0 is aborted out of the second one.
  absl::StatusOr<cuda::CudaGraph> graph =
      (*strategy)->CaptureRun([&](ReplicaContext& ctx) -> absl::Status {
        std::vector<Tensor> t = {x[ctx.replica_id()]};
        MT_RETURN_IF_ERROR(ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(t)));
        if (ctx.replica_id() == 1) {
          MT_RETURN_IF_ERROR(t[0].To(Device::Cpu()).status());
        }
        return ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(t));
      });
  ASSERT_FALSE(graph.ok());
  std::vector<Tensor> want = LogicalReplicaStates();
  ASSERT_TRUE(
      (*strategy)
          ->Run([&](ReplicaContext& ctx) { return LogicalReplicaStep(ctx, x); })
          .ok());
  auto reference = MirroredStrategy::Create({Device::Cuda(0), Device::Cuda(0)},
                                            {"auto", 1 << 20, 60.0});
  ASSERT_TRUE(reference.ok());
  ASSERT_TRUE((*reference)
                  ->Run([&](ReplicaContext& ctx) {
                    return LogicalReplicaStep(ctx, want);
                  })
                  .ok());
  EXPECT_EQ(x[1].To(Device::Cpu())->ToVector<float>(),
            want[1].To(Device::Cpu())->ToVector<float>());
}

}  // namespace
}  // namespace mirrortrain::distribute
