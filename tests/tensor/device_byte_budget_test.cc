#include "tensor/device_byte_budget.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mirrortrain {
namespace {

TEST(DeviceByteBudgetTest, GrantsWhileTheDeviceTotalFitsAndTakesBytesBack) {
  DeviceByteBudget budget(100);
  DeviceByteBudget::Reservation a = budget.TryReserve(0, 60);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(budget.TryReserve(0, 41), nullptr);  // 101 > 100: refused,
  EXPECT_EQ(budget.reserved(0), 60);             // and nothing reserved.
  DeviceByteBudget::Reservation b = budget.TryReserve(0, 40);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(budget.reserved(0), 100);
  // Another device has a budget of its own.
  DeviceByteBudget::Reservation other = budget.TryReserve(1, 100);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(budget.reserved(1), 100);
  // Copies share the bytes: they return with the last copy.
  DeviceByteBudget::Reservation a_copy = a;
  a.reset();
  EXPECT_EQ(budget.reserved(0), 100);
  a_copy.reset();
  EXPECT_EQ(budget.reserved(0), 40);
  EXPECT_NE(budget.TryReserve(0, 60), nullptr);  // Released at once again.
  EXPECT_EQ(budget.reserved(0), 40);
  EXPECT_EQ(budget.TryReserve(0, -1), nullptr);
  EXPECT_NE(budget.TryReserve(0, 0), nullptr);
}

TEST(DeviceByteBudgetTest, ALowerLimitRefusesNewBytesAndKeepsTheHeldOnes) {
  DeviceByteBudget budget(100);
  DeviceByteBudget::Reservation held = budget.TryReserve(0, 80);
  ASSERT_NE(held, nullptr);
  budget.set_limit(50);
  EXPECT_EQ(budget.limit(), 50);
  EXPECT_EQ(budget.TryReserve(0, 1), nullptr);
  EXPECT_EQ(budget.reserved(0), 80);
  held.reset();
  EXPECT_NE(budget.TryReserve(0, 50), nullptr);
}

// Threads racing for one device never get more than the limit granted.
TEST(DeviceByteBudgetTest, ThreadsNeverShareMoreThanTheLimit) {
  constexpr int kThreads = 4;
  constexpr int kTries = 2000;
  DeviceByteBudget budget(10);
  std::vector<std::thread> threads;
  std::vector<int> over(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTries; ++i) {
        DeviceByteBudget::Reservation r = budget.TryReserve(0, 3);
        if (budget.reserved(0) > 10) ++over[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(over[t], 0) << "thread " << t;
  EXPECT_EQ(budget.reserved(0), 0);
}

}  // namespace
}  // namespace mirrortrain
