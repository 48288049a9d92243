#include "distribute/mirrored_strategy.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "distribute/gradient_buckets.h"
#include "distribute/one_device_strategy.h"
#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

std::vector<Device> Cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::Cpu(i));
  return d;
}

TEST(MirroredStrategyTest, RunsEveryReplicaOnItsOwnThread) {
  auto s = MirroredStrategy::Create(Cpus(3), {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->cross_device_ops().name(), "local");
  std::vector<int> ids(3, -1);
  std::vector<std::thread::id> threads(3);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*s)->Run([&](ReplicaContext& ctx) {
                      ids[ctx.replica_id()] = ctx.replica_id();
                      threads[ctx.replica_id()] = std::this_thread::get_id();
                      EXPECT_EQ(ctx.num_replicas(), 3);
                      EXPECT_EQ(ctx.device(), Device::Cpu(ctx.replica_id()));
                      return absl::OkStatus();
                    })
                    .ok());
  }
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(threads[0], threads[1]);
  EXPECT_NE(threads[1], threads[2]);
}

TEST(MirroredStrategyTest, AllReduceInsideRun) {
  auto s = MirroredStrategy::Create(Cpus(4), {});
  ASSERT_TRUE(s.ok());
  std::vector<Tensor> out(4);
  ASSERT_TRUE((*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
                    Tensor t =
                        Tensor::HostFull(DType::kF32, {3}, ctx.replica_id());
                    std::vector<Tensor> ts = {t};
                    absl::Status st =
                        ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(ts));
                    out[ctx.replica_id()] = ts[0];
                    return st;
                  })
                  .ok());
  for (const Tensor& t : out) {
    EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{6, 6, 6}));
  }
}

// A span of one dtype goes as one list collective; mixed dtypes, or tensors
// sharing memory, one by one.
TEST(MirroredStrategyTest, AllReduceOfSeveralTensorsAndDtypes) {
  auto s = MirroredStrategy::Create(Cpus(3), {});
  ASSERT_TRUE(s.ok());
  std::vector<std::vector<Tensor>> out(3);
  ASSERT_TRUE((*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
                    const int r = ctx.replica_id();
                    std::vector<Tensor> same = {
                        Tensor::HostFull(DType::kF32, {2}, r),
                        Tensor::HostFull(DType::kF32, {3}, 10 * r)};
                    MT_RETURN_IF_ERROR(
                        ctx.AllReduce(ReduceOp::kMean, absl::MakeSpan(same)));
                    std::vector<Tensor> mixed = {
                        Tensor::HostFull(DType::kI64, {1}, r),
                        Tensor::HostFull(DType::kF64, {2}, r)};
                    MT_RETURN_IF_ERROR(
                        ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(mixed)));
                    // One tensor twice: reduced in turn, as before lists.
                    Tensor t = Tensor::HostFull(DType::kF32, {2}, r);
                    std::vector<Tensor> twice = {t, t};
                    MT_RETURN_IF_ERROR(
                        ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(twice)));
                    out[r] = {same[0], same[1], mixed[0], mixed[1], t};
                    return absl::OkStatus();
                  })
                  .ok());
  for (const std::vector<Tensor>& t : out) {
    EXPECT_EQ(t[0].ToVector<float>(), (std::vector<float>{1, 1}));
    EXPECT_EQ(t[1].ToVector<float>(), (std::vector<float>{10, 10, 10}));
    EXPECT_EQ(t[2].ToVector<int64_t>(), (std::vector<int64_t>{3}));
    EXPECT_EQ(t[3].ToVector<double>(), (std::vector<double>{3, 3}));
    EXPECT_EQ(t[4].ToVector<float>(), (std::vector<float>{9, 9}));
  }
}

TEST(MirroredStrategyTest, CommunicationPriorityNamesParse) {
  for (const std::string& name : StreamPriorityNames()) {
    EXPECT_TRUE(ParseStreamPriority(name).ok()) << name;
  }
  EXPECT_EQ(*ParseStreamPriority("high"), cuda::StreamPriority::kHigh);
  EXPECT_EQ(*ParseStreamPriority("normal"), cuda::StreamPriority::kNormal);
  EXPECT_EQ(MirroredOptions().communication_priority,
            cuda::StreamPriority::kHigh);
  absl::StatusOr<cuda::StreamPriority> bad = ParseStreamPriority("low");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'low'"), std::string::npos);
}

TEST(MirroredStrategyTest, ReplicaErrorAbortsTheOthersAndNamesTheRootCause) {
  MirroredOptions options;
  options.watchdog_seconds = 60;  // The abort, not the watchdog, must end it.
  auto s = MirroredStrategy::Create(Cpus(2), options);
  ASSERT_TRUE(s.ok());
  auto start = std::chrono::steady_clock::now();
  absl::Status st = (*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
    if (ctx.replica_id() == 1) return absl::InvalidArgumentError("bad shard");
    std::vector<Tensor> ts = {Tensor::HostZeros(DType::kF32, {2})};
    return ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(ts));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("replica 1: bad shard"), std::string::npos) << st;
  EXPECT_FALSE(
      (*s)->Run([](ReplicaContext&) { return absl::OkStatus(); }).ok());
}

TEST(MirroredStrategyTest, AReplicaThatThrowsIsAnErrorNotACrash) {
  // A library exception in a replica's work (not a Status) ends the run
  // with an error naming it; the other replica's collective is aborted.
  MirroredOptions options;
  options.watchdog_seconds = 60;
  auto s = MirroredStrategy::Create(Cpus(2), options);
  ASSERT_TRUE(s.ok());
  absl::Status st = (*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
    if (ctx.replica_id() == 1) throw std::runtime_error("bad node");
    std::vector<Tensor> ts = {Tensor::HostZeros(DType::kF32, {2})};
    return ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(ts));
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("replica 1: unexpected exception: bad node"),
            std::string::npos)
      << st;
}

TEST(MirroredStrategyTest, WatchdogNamesTheStalledReplica) {
  MirroredOptions options;
  options.watchdog_seconds = 0.2;
  auto s = MirroredStrategy::Create(Cpus(2), options);
  ASSERT_TRUE(s.ok());
  absl::Status st = (*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
    if (ctx.replica_id() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
    }
    std::vector<Tensor> ts = {Tensor::HostZeros(DType::kF32, {2})};
    return ctx.AllReduce(ReduceOp::kSum, absl::MakeSpan(ts));
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("replica(s) 1 did not reach"), std::string::npos)
      << st;
}

TEST(MirroredStrategyTest, CpuStepsAreNotRecordedAndTheStrategyStaysUsable) {
  auto s = MirroredStrategy::Create(Cpus(2), {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->CanCaptureRuns().message(), "the replicas are not on GPUs");
  bool ran = false;
  absl::StatusOr<cuda::CudaGraph> graph =
      (*s)->CaptureRun([&](ReplicaContext&) {
        ran = true;
        return absl::OkStatus();
      });
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ran);
  EXPECT_FALSE((*s)->Replay(cuda::CudaGraph()).ok());
  EXPECT_TRUE((*s)->Run([](ReplicaContext&) { return absl::OkStatus(); }).ok());
  OneDeviceStrategy one(Device::Cpu());
  EXPECT_EQ(one.CanCaptureRuns().message(), "the replicas are not on GPUs");
  EXPECT_EQ(one.CaptureRun([](ReplicaContext&) { return absl::OkStatus(); })
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShardTest, ContiguousEvenShards) {
  // 8 rows over 3 replicas: 3, 3, 2.
  EXPECT_EQ(ShardOf(8, 0, 3).begin, 0);
  EXPECT_EQ(ShardOf(8, 0, 3).end, 3);
  EXPECT_EQ(ShardOf(8, 1, 3).end, 6);
  EXPECT_EQ(ShardOf(8, 2, 3).begin, 6);
  EXPECT_EQ(ShardOf(8, 2, 3).end, 8);
  // 2 rows over 4 replicas: two get none.
  EXPECT_EQ(ShardOf(2, 3, 4).begin, ShardOf(2, 3, 4).end);
  for (int64_t batch : {0, 1, 5, 128, 129}) {
    for (int n : {1, 2, 3, 4, 7}) {
      int64_t covered = 0;
      for (int r = 0; r < n; ++r) {
        ShardRange s = ShardOf(batch, r, n);
        EXPECT_EQ(s.begin, covered);
        EXPECT_LE(s.end - s.begin, batch / n + 1);
        covered = s.end;
      }
      EXPECT_EQ(covered, batch);
    }
  }
}

TEST(GradientBucketsTest, PlanIsReverseOrderWithASmallFirstBucket) {
  // Bytes of 6 gradients; first bucket limit 100, then 1000.
  BucketPlan plan = PlanBuckets({400, 40, 600, 500, 30, 60}, 1000, 100);
  ASSERT_EQ(plan.buckets.size(), 4u);
  EXPECT_EQ(plan.buckets[0], (std::vector<size_t>{5, 4}));
  EXPECT_EQ(plan.buckets[1], (std::vector<size_t>{3}));
  EXPECT_EQ(plan.buckets[2], (std::vector<size_t>{2, 1}));
  EXPECT_EQ(plan.buckets[3], (std::vector<size_t>{0}));
  // A gradient larger than the limit gets a bucket of its own... and the
  // remaining one fits after.
  BucketPlan big = PlanBuckets({4000, 10}, 1000, 100);
  ASSERT_EQ(big.buckets.size(), 2u);
  EXPECT_EQ(big.buckets[1], (std::vector<size_t>{0}));
}

TEST(GradientBucketsTest, ReducesSeveralBucketsStartedDuringBackward) {
  auto s = MirroredStrategy::Create(Cpus(3), {});
  ASSERT_TRUE(s.ok());
  const std::vector<Shape> shapes = {{3, 2}, {5}, {1}, {4, 4}};
  BucketPlan plan = PlanBuckets({24, 20, 4, 64}, 32, 16);
  ASSERT_GE(plan.buckets.size(), 3u);
  std::vector<std::vector<Tensor>> results(3);
  std::vector<std::vector<int>> started(3);
  ASSERT_TRUE(
      (*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
            GradientBuckets buckets(&plan, &ctx, shapes, DType::kF32);
            // Report in backward order, noting how many buckets were
            // already started after each one.
            for (size_t k = shapes.size(); k-- > 0;) {
              Tensor g = Tensor::HostFull(DType::kF32, shapes[k],
                                          (ctx.replica_id() + 1) * (k + 1));
              if (auto st = buckets.Ready(k, g); !st.ok()) return st;
              started[ctx.replica_id()].push_back(buckets.buckets_started());
            }
            auto out = buckets.Finish();
            if (!out.ok()) return out.status();
            results[ctx.replica_id()] = *out;
            return absl::OkStatus();
          })
          .ok());
  // The first bucket was started before the last gradient arrived.
  EXPECT_GE(started[0][0], 1);
  for (int r = 0; r < 3; ++r) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      ASSERT_EQ(results[r][k].shape(), shapes[k]);
      for (float v : results[r][k].ToVector<float>()) {
        EXPECT_EQ(v, 6.0f * (k + 1));  // (1 + 2 + 3) * (k + 1).
      }
    }
  }
}

TEST(GradientBucketsTest,
     ReducesALoneGradientInPlaceOnlyWhenNothingElseHoldsIt) {
  auto s = MirroredStrategy::Create(Cpus(3), {});
  ASSERT_TRUE(s.ok());
  // Two buckets of one gradient each: the first reported while the test
  // keeps a handle to it, the second handed over.
  const std::vector<Shape> shapes = {{8}, {2}};
  BucketPlan plan = PlanBuckets({32, 8}, 16, 16);
  ASSERT_EQ(plan.buckets.size(), 2u);
  std::vector<std::vector<Tensor>> results(3);
  std::vector<Tensor> kept(3);
  std::vector<const void*> handed(3);
  ASSERT_TRUE(
      (*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
            const int r = ctx.replica_id();
            GradientBuckets buckets(&plan, &ctx, shapes, DType::kF32);
            // On the replica's device (cpu:r), as the trainer's gradients.
            auto full = [&](const Shape& shape) -> absl::StatusOr<Tensor> {
              MT_ASSIGN_OR_RETURN(
                  Tensor t, Tensor::Empty(DType::kF32, shape, ctx.device()));
              std::fill_n(t.data<float>(), t.num_elements(), r + 1.0f);
              return t;
            };
            MT_ASSIGN_OR_RETURN(kept[r], full(shapes[1]));
            if (auto st = buckets.Ready(1, kept[r]); !st.ok()) return st;
            MT_ASSIGN_OR_RETURN(Tensor alone, full(shapes[0]));
            handed[r] = alone.raw_data();
            if (auto st = buckets.Ready(0, std::move(alone)); !st.ok()) {
              return st;
            }
            auto out = buckets.Finish();
            if (!out.ok()) return out.status();
            results[r] = *out;
            return absl::OkStatus();
          })
          .ok());
  for (int r = 0; r < 3; ++r) {
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(results[r][k].shape(), shapes[k]);
      EXPECT_EQ(results[r][k].ToVector<float>(),
                std::vector<float>(NumElements(shapes[k]), 6.0f));
    }
    // The handed-over gradient was reduced where it was; the kept one was
    // copied first and is still this replica's own.
    EXPECT_EQ(results[r][0].raw_data(), handed[r]);
    EXPECT_FALSE(results[r][1].SharesBufferWith(kept[r]));
    EXPECT_EQ(kept[r].ToVector<float>(), std::vector<float>(2, r + 1.0f));
  }
}

// One bucket of three gradients. Replica 0 keeps a handle to one of its
// gradients, so it packs its bucket; the others hand theirs over, and their
// local collective reduces them where they are, as one list, paired with
// replica 0's packed buffer.
TEST(GradientBucketsTest, ReducesABucketOfSeveralGradientsInPlaceAsOneList) {
  auto s = MirroredStrategy::Create(Cpus(3), {});
  ASSERT_TRUE(s.ok());
  const std::vector<Shape> shapes = {{5}, {2, 3}, {1}};
  BucketPlan plan = PlanBuckets({20, 24, 4}, 1024, 1024);
  ASSERT_EQ(plan.buckets.size(), 1u);
  std::vector<std::vector<Tensor>> results(3);
  std::vector<std::vector<const void*>> handed(3);
  std::vector<Tensor> kept(3);
  ASSERT_TRUE((*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
                    const int r = ctx.replica_id();
                    if (!ctx.reduces_lists()) {
                      return absl::InternalError(
                          "local ops should reduce lists");
                    }
                    GradientBuckets buckets(&plan, &ctx, shapes, DType::kF32);
                    for (size_t k = shapes.size(); k-- > 0;) {
                      MT_ASSIGN_OR_RETURN(
                          Tensor g,
                          Tensor::Empty(DType::kF32, shapes[k], ctx.device()));
                      for (int64_t i = 0; i < g.num_elements(); ++i) {
                        g.data<float>()[i] = (r + 1.0f) * (10 * k + i);
                      }
                      handed[r].push_back(g.raw_data());
                      if (r == 0 && k == 1) kept[r] = g;
                      MT_RETURN_IF_ERROR(buckets.Ready(k, std::move(g)));
                    }
                    MT_ASSIGN_OR_RETURN(results[r], buckets.Finish());
                    return absl::OkStatus();
                  })
                  .ok());
  for (int r = 0; r < 3; ++r) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      ASSERT_EQ(results[r][k].shape(), shapes[k]);
      const std::vector<float> got = results[r][k].ToVector<float>();
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], 6.0f * (10 * k + i)) << r << " " << k << " " << i;
      }
      // handed[r] is in report order: k = 2, 1, 0.
      const void* own = handed[r][shapes.size() - 1 - k];
      EXPECT_EQ(results[r][k].raw_data() == own, r != 0)
          << "replica " << r << " gradient " << k;
    }
  }
  // The kept handle still holds replica 0's own values.
  EXPECT_EQ(kept[0].ToVector<float>(),
            (std::vector<float>{10, 11, 12, 13, 14, 15}));
}

TEST(GradientBucketsTest, AGradientStillInUseByBackwardIsNotReducedInPlace) {
  // y = sum((w * x + b) * c) per replica with its own x and c, every
  // gradient in a bucket of its own. b's gradient is reported while the
  // walk still needs it for w's (Add hands one tensor to both inputs):
  // reduced in place, w's gradient would be computed from the sum.
  MirroredOptions options;
  options.bucket_bytes = 4;
  auto s = MirroredStrategy::Create(Cpus(2), options);
  ASSERT_TRUE(s.ok());
  std::vector<std::vector<Tensor>> grads(2);
  ASSERT_TRUE((*s)->Run([&](ReplicaContext& ctx) -> absl::Status {
                    const float r = ctx.replica_id();
                    Tensor w = Tensor::FromVector<float>({1, 2}, {2});
                    Tensor b = Tensor::FromVector<float>({3, 4}, {2});
                    Tensor x = Tensor::FromVector<float>({5 + r, 6 + r}, {2});
                    Tensor c = Tensor::FromVector<float>({7 + r, 8 - r}, {2});
                    GradientTape tape;
                    tape.Watch(w);
                    tape.Watch(b);
                    Tensor y = *ops::ReduceSum(
                        *ops::Mul(*ops::Add(*ops::Mul(w, x), b), c));
                    auto out = ctx.AllReduceGradients(tape, y, {w, b});
                    if (!out.ok()) return out.status();
                    grads[ctx.replica_id()] = *out;
                    return absl::OkStatus();
                  })
                  .ok());
  for (int r = 0; r < 2; ++r) {
    // dw = c * x summed: (7*5 + 8*6, 8*6 + 7*7); db = c summed: (15, 15).
    EXPECT_EQ(grads[r][0].ToVector<float>(), (std::vector<float>{83, 97}));
    EXPECT_EQ(grads[r][1].ToVector<float>(), (std::vector<float>{15, 15}));
  }
}

}  // namespace
}  // namespace mirrortrain::distribute
