// The thread-backed ProcessGroup the multi-process trainer tests run on:
// its collectives give what MPI's would, and members that meet in
// different collectives fail alike instead of reading each other's
// operands.
#include "tests/distribute/thread_process_group.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mirrortrain::testing {
namespace {

// fn(rank, group) on one thread per member of a world of `size`.
template <typename Fn>
void OnMembers(int size, Fn fn) {
  ThreadWorld world(size, std::chrono::seconds(30));
  std::vector<std::unique_ptr<distribute::ProcessGroup>> members;
  for (int r = 0; r < size; ++r) members.push_back(world.Member(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { fn(r, *members[r]); });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ThreadWorldTest, CollectivesGiveEveryMemberTheSameResult) {
  std::vector<std::vector<float>> sums(3);
  std::vector<std::string> broadcast(3);
  OnMembers(3, [&](int rank, distribute::ProcessGroup& group) {
    const float x = static_cast<float>(rank + 1);
    Tensor t = Tensor::FromVector<float>({x, 10 * x}, {2});
    ASSERT_TRUE(group.AllReduceSum(t, "sum").ok());
    sums[rank] = t.ToVector<float>();
    std::string s = rank == 2 ? "from two" : "";
    ASSERT_TRUE(group.BroadcastString(s, 2, "string").ok());
    broadcast[rank] = s;
    ASSERT_TRUE(group.Barrier("barrier").ok());
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[r], (std::vector<float>{6, 60})) << r;
    EXPECT_EQ(broadcast[r], "from two") << r;
  }
}

TEST(ThreadWorldTest, MembersInDifferentCollectivesAllFail) {
  std::vector<absl::Status> status(2), after(2);
  OnMembers(2, [&](int rank, distribute::ProcessGroup& group) {
    Tensor t = Tensor::FromVector<float>({1, 2}, {2});
    int64_t word = 7;
    status[rank] = rank == 0 ? group.AllReduceSum(t, "step")
                             : group.Broadcast(&word, sizeof(word), 0, "step");
    // Both go on to the same next collectives (an agreement: a sum, then
    // a broadcast), which work: neither left the failed one while the
    // other still read it.
    after[rank] = group.AgreedStatus(status[rank]);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInternal) << status[r];
    EXPECT_NE(status[r].message().find(
                  "member 0 is in AllReduceSum of 8 bytes (root 0), member 1 "
                  "in Broadcast of 8 bytes (root 0)"),
              std::string::npos)
        << status[r];
    EXPECT_EQ(after[r].code(), absl::StatusCode::kInternal) << after[r];
    EXPECT_TRUE(distribute::IsAgreed(after[r])) << after[r];
  }
}

}  // namespace
}  // namespace mirrortrain::testing
