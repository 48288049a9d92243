#include "tensor/variable.h"

#include "gtest/gtest.h"

namespace mirrortrain {
namespace {

TEST(VariableTest, AssignFamilyUpdatesInPlace) {
  Variable v =
      *Variable::Create("dense/kernel", Tensor::FromVector<float>({1, 2}, {2}));
  EXPECT_EQ(v.name(), "dense/kernel");
  EXPECT_TRUE(v.trainable());
  const void* data = v.value().raw_data();
  ASSERT_TRUE(v.AssignAdd(Tensor::FromVector<float>({10, 10}, {2})).ok());
  EXPECT_EQ(v.value().ToVector<float>(), (std::vector<float>{11, 12}));
  ASSERT_TRUE(v.AssignSub(Tensor::FromVector<float>({1, 2}, {2})).ok());
  EXPECT_EQ(v.value().ToVector<float>(), (std::vector<float>{10, 10}));
  ASSERT_TRUE(v.Assign(Tensor::FromVector<float>({5, 6}, {2})).ok());
  EXPECT_EQ(v.value().ToVector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(v.value().raw_data(), data);
  ASSERT_TRUE(v.Reinitialize().ok());
  EXPECT_EQ(v.value().ToVector<float>(), (std::vector<float>{1, 2}));
}

TEST(VariableTest, MismatchedAssignNamesTheVariable) {
  Variable v = *Variable::Create("w", Tensor::FromVector<float>({1, 2}, {2}));
  absl::Status s = v.Assign(Tensor::FromVector<float>({1, 2, 3}, {3}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s;
  EXPECT_FALSE(v.AssignAdd(Tensor::FromVector<double>({1, 2}, {2})).ok());
  EXPECT_FALSE(Variable::Create("x", Tensor()).ok());
}

TEST(VariableTest, InitializedFromAnothersInitialValue) {
  Variable a = *Variable::Create("a", Tensor::FromVector<float>({3}, {1}));
  ASSERT_TRUE(a.Assign(Tensor::FromVector<float>({100}, {1})).ok());
  Variable b = *Variable::FromInitialValueOf("b", a);
  EXPECT_EQ(b.value().ToVector<float>(), (std::vector<float>{3}));
  // Independent storage.
  ASSERT_TRUE(b.AssignAdd(Tensor::FromVector<float>({1}, {1})).ok());
  EXPECT_EQ(a.value().ToVector<float>(), (std::vector<float>{100}));
}

}  // namespace
}  // namespace mirrortrain
