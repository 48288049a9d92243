#include "distribute/mirrored_variable.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mirrortrain::distribute {
namespace {

TEST(MirroredVariableTest, CopiesMustStartIdenticalAndStayIdentical) {
  std::vector<Variable> vars;
  for (int r = 0; r < 3; ++r) {
    vars.push_back(*Variable::Create(
        "dense/kernel", Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2})));
  }
  auto m = MirroredVariable::Create({&vars[0], &vars[1], &vars[2]});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name(), "dense/kernel");
  EXPECT_EQ(m->num_replicas(), 3);
  EXPECT_TRUE(m->CheckIdentical().ok());

  // One replica drifts by one ulp: the check names it.
  Tensor bumped =
      Tensor::FromVector<float>({1, 2, 3, std::nextafter(4.0f, 5.0f)}, {2, 2});
  ASSERT_TRUE(vars[2].Assign(bumped).ok());
  absl::Status s = m->CheckIdentical();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("'dense/kernel' on replica 2 differs"),
            std::string::npos)
      << s;
  ASSERT_TRUE(
      m->AssignAll(Tensor::FromVector<float>({5, 6, 7, 8}, {2, 2})).ok());
  EXPECT_TRUE(m->CheckIdentical().ok());
  EXPECT_EQ(vars[1].value().ToVector<float>(),
            (std::vector<float>{5, 6, 7, 8}));
}

TEST(MirroredVariableTest, MismatchedCopiesAreRejected) {
  Variable a = *Variable::Create("w", Tensor::FromVector<float>({1, 2}, {2}));
  Variable b = *Variable::Create("w", Tensor::FromVector<float>({1, 3}, {2}));
  Variable c = *Variable::Create("v", Tensor::FromVector<float>({1, 2}, {2}));
  EXPECT_FALSE(MirroredVariable::Create({&a, &b}).ok());  // Values differ.
  EXPECT_FALSE(MirroredVariable::Create({&a, &c}).ok());  // Names differ.
  EXPECT_FALSE(MirroredVariable::Create({}).ok());
}

}  // namespace
}  // namespace mirrortrain::distribute
