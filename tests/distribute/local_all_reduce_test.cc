#include "distribute/local_all_reduce.h"

#include <latch>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace mirrortrain::distribute {
namespace {

using std::chrono::milliseconds;

// Runs `fn(replica)` on N threads and returns their statuses.
std::vector<absl::Status> OnReplicas(
    int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { status[r] = fn(r); });
  for (auto& t : threads) t.join();
  return status;
}

class LocalAllReduceTest : public ::testing::TestWithParam<int> {};

// Replica r fills element i with (r + 1) * (i + 1): the sum over N replicas
// is N(N+1)/2 * (i + 1).
TEST_P(LocalAllReduceTest, SumsRankFilledBuffersForAnySize) {
  const int n = GetParam();
  for (int64_t size : {0, 1, 7, 1001, 65537}) {
    LocalAllReduce ops(n, milliseconds(10000));
    std::vector<Tensor> buffers(n);
    auto status = OnReplicas(n, [&](int r) {
      buffers[r] = Tensor::HostEmpty(DType::kF32, {size});
      for (int64_t i = 0; i < size; ++i) {
        buffers[r].data<float>()[i] = static_cast<float>((r + 1) * (i + 1));
      }
      return ops.AllReduce(r, ReduceOp::kSum, buffers[r]);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      for (int64_t i = 0; i < size; ++i) {
        ASSERT_EQ(buffers[r].data<float>()[i],
                  static_cast<float>(n * (n + 1) / 2 * (i + 1)))
            << "size " << size << " replica " << r << " element " << i;
      }
    }
  }
}

TEST_P(LocalAllReduceTest, MeanAndRepeatedCollectivesAndIntegers) {
  const int n = GetParam();
  LocalAllReduce ops(n, milliseconds(10000));
  std::vector<Tensor> f(n), g(n);
  auto status = OnReplicas(n, [&](int r) -> absl::Status {
    for (int round = 0; round < 20; ++round) {
      f[r] = Tensor::HostFull(DType::kF64, {5}, r);
      g[r] = Tensor::HostFull(DType::kI64, {3}, r + round);
      if (auto s = ops.AllReduce(r, ReduceOp::kMean, f[r]); !s.ok()) return s;
      if (auto s = ops.AllReduce(r, ReduceOp::kSum, g[r]); !s.ok()) return s;
      if (f[r].ToVector<double>()[4] != (n - 1) / 2.0) {
        return absl::InternalError("bad mean");
      }
      if (g[r].ToVector<int64_t>()[0] != n * (n - 1) / 2 + n * round) {
        return absl::InternalError("bad integer sum");
      }
    }
    return absl::OkStatus();
  });
  for (const auto& s : status) EXPECT_TRUE(s.ok()) << s;
}

// The same 2000 elements per replica, cut into tensors differently by each
// (as when one replica packed a gradient bucket and another did not), empty
// tensors included, one first, and tensors that end exactly where a
// replica's slice starts (448, 640 and 960 for 4, 3 and 2 replicas):
// reduced in place as one buffer. Replica r fills global element g with
// (r + 1) * (g + 1).
TEST_P(LocalAllReduceTest, ListsCutDifferentlyAreSummedAsOneBuffer) {
  const int n = GetParam();
  const std::vector<std::vector<int64_t>> cuts = {
      {2000}, {0, 448, 192, 320, 0, 1040}, {3, 0, 997, 1000}, {1, 1, 1998, 0}};
  LocalAllReduce ops(n, milliseconds(10000));
  std::vector<std::vector<Tensor>> lists(n);
  auto status = OnReplicas(n, [&](int r) {
    int64_t g = 0;
    for (int64_t size : cuts[r]) {
      Tensor t = Tensor::HostEmpty(DType::kF32, {size});
      for (int64_t i = 0; i < size; ++i, ++g) {
        t.data<float>()[i] = static_cast<float>((r + 1) * (g + 1));
      }
      lists[r].push_back(t);
    }
    return ops.AllReduceList(r, ReduceOp::kSum, absl::MakeSpan(lists[r]),
                             ListCuts::kAny);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    int64_t g = 0;
    for (const Tensor& t : lists[r]) {
      for (float v : t.ToVector<float>()) {
        ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2 * (g + 1)))
            << "replica " << r << " element " << g;
        ++g;
      }
    }
    EXPECT_EQ(g, 2000);
  }
}

// Every replica must see the mismatch, so none sums and none waits.
TEST_P(LocalAllReduceTest, ListsOfDifferentTotalsAreAnErrorEverywhere) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "one replica has nothing to disagree with";
  LocalAllReduce ops(n, milliseconds(10000));
  std::vector<std::vector<Tensor>> lists(n);
  auto status = OnReplicas(n, [&](int r) {
    lists[r] = {Tensor::HostFull(DType::kF32, {4}, 1),
                Tensor::HostFull(DType::kF32, {r == n - 1 ? 7 : 6}, 1)};
    return ops.AllReduceList(r, ReduceOp::kSum, absl::MakeSpan(lists[r]),
                             ListCuts::kAny);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInternal) << status[r];
    EXPECT_NE(status[r].message().find("2 tensors of 11 elements"),
              std::string::npos)
        << status[r];
    // Nothing was summed.
    EXPECT_EQ(lists[r][0].ToVector<float>(), std::vector<float>(4, 1));
  }
}

// ListCuts::kSame (ReplicaContext::AllReduce's contract): the same totals
// cut into other sizes are an error on every replica where any replica
// asked for the same cuts, and fine where none did.
TEST_P(LocalAllReduceTest, SameCutsAreRequiredWhereAsked) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "one replica has nothing to disagree with";
  for (ListCuts cuts : {ListCuts::kSame, ListCuts::kAny}) {
    LocalAllReduce ops(n, milliseconds(10000));
    std::vector<std::vector<Tensor>> lists(n);
    auto status = OnReplicas(n, [&](int r) {
      const bool last = r == n - 1;
      lists[r] = {Tensor::HostFull(DType::kF32, {last ? 3 : 2}, 1),
                  Tensor::HostFull(DType::kF32, {last ? 2 : 3}, 1)};
      // Only replica 0 says which: the others' kAny must not loosen it.
      return ops.AllReduceList(r, ReduceOp::kSum, absl::MakeSpan(lists[r]),
                               r == 0 ? cuts : ListCuts::kAny);
    });
    for (int r = 0; r < n; ++r) {
      if (cuts == ListCuts::kAny) {
        EXPECT_TRUE(status[r].ok()) << status[r];
        EXPECT_EQ(lists[r][0].ToVector<float>()[0], n);
        continue;
      }
      EXPECT_EQ(status[r].code(), absl::StatusCode::kInternal) << status[r];
      EXPECT_NE(status[r].message().find("2 tensors of 5 elements ([3], [2])"),
                std::string::npos)
          << status[r];
      EXPECT_EQ(lists[r][0].ToVector<float>()[0], 1);
    }
  }
}

// Share hands every replica all replicas' tensors in replica order (the
// same buffers, not copies), between reductions that still pair up; each
// replica's are left as they were.
TEST_P(LocalAllReduceTest, ShareHandsEveryReplicaEveryList) {
  const int n = GetParam();
  LocalAllReduce ops(n, milliseconds(10000));
  std::vector<std::vector<Tensor>> mine(n);
  std::vector<std::vector<std::vector<Tensor>>> got(n);
  std::vector<Tensor> counts(n);
  auto status = OnReplicas(n, [&](int r) -> absl::Status {
    for (int round = 0; round < 3; ++round) {
      mine[r] = {Tensor::HostFull(DType::kF32, {3}, 10 * r + round),
                 Tensor::HostFull(DType::kF32, {2, 2}, -r)};
      counts[r] = Tensor::HostFull(DType::kF32, {1}, 1);
      if (auto s = ops.AllReduce(r, ReduceOp::kSum, counts[r]); !s.ok()) {
        return s;
      }
      absl::StatusOr<std::vector<std::vector<Tensor>>> lists =
          ops.Share(r, absl::MakeSpan(mine[r]));
      if (!lists.ok()) return lists.status();
      got[r] = *std::move(lists);
      if (auto s = ops.EndShare(r); !s.ok()) return s;
      if (counts[r].data<float>()[0] != n) {
        return absl::InternalError("the reduction around the share");
      }
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    ASSERT_EQ(got[r].size(), static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      ASSERT_EQ(got[r][q].size(), 2u);
      for (int i = 0; i < 2; ++i) {
        EXPECT_TRUE(got[r][q][i].SharesBufferWith(mine[q][i]))
            << "replica " << r << " list " << q << " tensor " << i;
      }
      EXPECT_EQ(got[r][q][0].data<float>()[0], 10 * q + 2);
    }
  }
}

// Lists that are not alike one by one fail on every replica, which all
// then read nothing.
TEST(LocalAllReduceTest, SharingUnlikeListsIsAnErrorOnEveryReplica) {
  LocalAllReduce ops(2, milliseconds(5000));
  std::vector<std::vector<Tensor>> lists = {
      {Tensor::HostZeros(DType::kF32, {4}),
       Tensor::HostZeros(DType::kF32, {2})},
      {Tensor::HostZeros(DType::kF32, {4}),
       Tensor::HostZeros(DType::kF64, {2})}};
  auto status = OnReplicas(2, [&](int r) {
    return ops.Share(r, absl::MakeSpan(lists[r])).status();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInternal) << status[r];
    EXPECT_NE(status[r].message().find("share: replica"), std::string::npos)
        << status[r];
  }
  lists[1] = {Tensor::HostZeros(DType::kF32, {4})};
  LocalAllReduce fresh(2, milliseconds(5000));
  status = OnReplicas(2, [&](int r) {
    return fresh.Share(r, absl::MakeSpan(lists[r])).status();
  });
  EXPECT_FALSE(status[0].ok());
  EXPECT_FALSE(status[1].ok());
}

// A replica that fails between Share and EndShare aborts the ops (as
// MirroredStrategy does on a replica's error): its peers' EndShare returns
// the reason instead of waiting for it.
TEST(LocalAllReduceTest, APeerFailingWhileSharingAbortsTheEnd) {
  LocalAllReduce ops(2, milliseconds(60000));
  std::vector<std::vector<Tensor>> lists = {
      {Tensor::HostZeros(DType::kF32, {4})},
      {Tensor::HostZeros(DType::kF32, {4})}};
  auto status = OnReplicas(2, [&](int r) -> absl::Status {
    absl::Status shared = ops.Share(r, absl::MakeSpan(lists[r])).status();
    if (!shared.ok()) return shared;
    if (r == 0) {
      const absl::Status failed = absl::InternalError("replica 0's update");
      ops.Abort(failed);
      return failed;
    }
    return ops.EndShare(r);
  });
  EXPECT_EQ(status[1].code(), absl::StatusCode::kInternal) << status[1];
  EXPECT_NE(status[1].message().find("replica 0's update"), std::string::npos)
      << status[1];
}

INSTANTIATE_TEST_SUITE_P(Replicas, LocalAllReduceTest,
                         ::testing::Values(1, 2, 3, 4));

TEST(LocalAllReduceWatchdogTest, StalledReplicaIsNamed) {
  LocalAllReduce ops(3, milliseconds(200));
  std::vector<Tensor> buffers(3, Tensor::HostZeros(DType::kF32, {4}));
  for (auto& b : buffers) b = Tensor::HostZeros(DType::kF32, {4});
  auto status = OnReplicas(3, [&](int r) -> absl::Status {
    if (r == 2) {
      // The injected stall: replica 2 never reaches the collective in time.
      std::this_thread::sleep_for(milliseconds(800));
      return absl::OkStatus();
    }
    return ops.AllReduce(r, ReduceOp::kSum, buffers[r]);
  });
  for (int r : {0, 1}) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kDeadlineExceeded)
        << status[r];
    EXPECT_NE(
        status[r].message().find("replica(s) 2 did not reach all-reduce #0"),
        std::string::npos)
        << status[r];
  }
  // Later collectives fail at once instead of waiting.
  EXPECT_FALSE(ops.AllReduce(0, ReduceOp::kSum, buffers[0]).ok());
}

// The watchdog's abort path, many times: a watchdog of a few milliseconds,
// more replica threads than cores, and in every other round one replica
// late. Replicas that passed the posting barrier used to time out while a
// peer still summed its slice, return, and let their buffer die (as a
// gradient bucket's does) under the peer: SIGSEGV. Every replica must see
// the same outcome: all OK with the right sum, or all an error.
TEST(LocalAllReduceWatchdogTest, AbortPathRunManyTimesNeverCrashes) {
  constexpr int kReplicas = 4;
  constexpr int kRounds = 120;
  constexpr int64_t kSize = 1 << 20;
  int passed = 0, timed_out = 0;
  for (int round = 0; round < kRounds; ++round) {
    const milliseconds watchdog(1 + round % 3);
    const int late = round % 2 == 1 ? round / 2 % kReplicas : -1;
    LocalAllReduce ops(kReplicas, watchdog);
    std::latch start(kReplicas);
    std::vector<absl::Status> status(kReplicas);
    std::vector<std::thread> threads;
    for (int r = 0; r < kReplicas; ++r) {
      threads.emplace_back([&, r] {
        auto buffer = std::make_unique<Tensor>(
            Tensor::HostFull(DType::kF32, {kSize}, r + 1));
        start.arrive_and_wait();
        if (r == late) std::this_thread::sleep_for(4 * watchdog);
        status[r] = ops.AllReduce(r, ReduceOp::kSum, *buffer);
        const float want = kReplicas * (kReplicas + 1) / 2;
        if (status[r].ok() && (buffer->data<float>()[0] != want ||
                               buffer->data<float>()[kSize - 1] != want)) {
          status[r] = absl::InternalError("wrong sum");
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 1; r < kReplicas; ++r) {
      ASSERT_EQ(status[r].ok(), status[0].ok())
          << "round " << round << ": replica 0: " << status[0] << ", replica "
          << r << ": " << status[r];
    }
    for (const absl::Status& s : status) {
      ASSERT_TRUE(s.ok() || absl::IsDeadlineExceeded(s)) << s;
    }
    (status[0].ok() ? passed : timed_out) += 1;
  }
  // A late replica usually trips the watchdog; on a loaded machine the
  // others may be descheduled long enough for it to arrive in time, so no
  // single round is required to time out, but the abort path must have run.
  EXPECT_GT(timed_out, 0);
  RecordProperty("passed", passed);
  RecordProperty("timed_out", timed_out);
}

TEST(LocalAllReduceTest, RecoverMakesAbortedCollectivesWorkAgain) {
  LocalAllReduce ops(3, milliseconds(10000));
  ops.Abort(absl::AbortedError("replica 1 failed"));
  std::vector<Tensor> buffers(3);
  auto run = [&] {
    return OnReplicas(3, [&](int r) {
      buffers[r] = Tensor::HostFull(DType::kF32, {70}, r + 1);
      return ops.AllReduce(r, ReduceOp::kSum, buffers[r]);
    });
  };
  for (const absl::Status& s : run()) EXPECT_TRUE(absl::IsAborted(s)) << s;
  ASSERT_TRUE(ops.Recover().ok());
  for (int round = 0; round < 3; ++round) {
    for (const absl::Status& s : run()) ASSERT_TRUE(s.ok()) << s;
    for (const Tensor& b : buffers) {
      EXPECT_EQ(b.ToVector<float>(), std::vector<float>(70, 6));
    }
  }
}

TEST(LocalAllReduceTest, MismatchedBuffersAreAnErrorOnEveryReplica) {
  LocalAllReduce ops(2, milliseconds(5000));
  std::vector<Tensor> buffers = {Tensor::HostZeros(DType::kF32, {4}),
                                 Tensor::HostZeros(DType::kF32, {5})};
  auto status = OnReplicas(
      2, [&](int r) { return ops.AllReduce(r, ReduceOp::kSum, buffers[r]); });
  EXPECT_FALSE(status[0].ok());
  EXPECT_FALSE(status[1].ok());
}

}  // namespace
}  // namespace mirrortrain::distribute
