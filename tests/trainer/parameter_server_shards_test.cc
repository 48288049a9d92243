// ParameterServerShards on its own: two workers' pushes, as the async
// driver makes them, on variables cut over two ps devices.
#include "trainer/parameter_server_shards.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/trainer/optim/build_optimizer.h"

namespace mirrortrain::trainer {
namespace {

// lr = step + 1: which update number an update was applied at shows in w.
class StepSchedule final : public LearningRateSchedule {
 public:
  double operator()(int64_t step) const override { return step + 1.0; }
};

absl::StatusOr<std::unique_ptr<Optimizer>> Sgd() {
  const OptimizerType* type = OptimizerRegistry::Global().Find("sgd");
  return MakeOptimizer("sgd", testing::WithDefaults({&type->params}, {}),
                       std::make_unique<StepSchedule>());
}

// A worker's model: w (trainable, 2 rows) and moving (not trainable, as
// batch norm's moving statistics), both 0.
struct WorkerModel {
  WorkerModel()
      : w(*Variable::Create("w", Tensor::FromVector<float>({0, 0}, {2}),
                            /*trainable=*/true)),
        moving(*Variable::Create(
            "moving", Tensor::FromVector<float>({0, 0}, {2}), false)) {}
  std::vector<Variable*> vars() { return {&w, &moving}; }
  Variable w, moving;
};

// Each variable's rows cut over two ps devices: row 0 on the first, row 1
// on the second. `frozen`: `moving` is a frozen layer's variable, not the
// forward pass's state.
std::unique_ptr<ParameterServerShards> TwoDeviceShards(WorkerModel& model,
                                                       bool frozen = false) {
  const std::vector<std::vector<distribute::VariablePartition>> plan = {
      {{0, 1, 0}, {1, 2, 1}}, {{0, 1, 0}, {1, 2, 1}}};
  std::vector<Variable*> forward_state;
  if (!frozen) forward_state.push_back(&model.moving);
  auto shards = ParameterServerShards::Create(model.vars(), forward_state, plan,
                                              {Device::Cpu(), Device::Cpu(1)},
                                              Sgd, std::nullopt);
  EXPECT_TRUE(shards.ok()) << shards.status();
  return shards.ok() ? *std::move(shards) : nullptr;
}

std::vector<float> Gathered(const ParameterServerShards& shards,
                            WorkerModel& out, int which) {
  auto optimizer = Sgd();
  EXPECT_TRUE(optimizer.ok());
  EXPECT_TRUE((*optimizer)->CreateSlots({&out.w}).ok());
  EXPECT_TRUE(shards.CopyTo(out.vars(), **optimizer, nullptr).ok());
  return out.vars()[which]->value().ToVector<float>();
}

// Two workers read the same moving statistics and each changes them: both
// changes land (TensorFlow's assign_sub), not only the last push's value.
TEST(ParameterServerShardsTest, ConcurrentWorkersForwardStateChangesAddUp) {
  WorkerModel a, b, all;
  std::unique_ptr<ParameterServerShards> shards = TwoDeviceShards(all);
  ASSERT_NE(shards, nullptr);
  for (WorkerModel* m : {&a, &b}) ASSERT_TRUE(shards->Read(m->vars()).ok());
  auto read_a = shards->ForwardState(a.vars());
  auto read_b = shards->ForwardState(b.vars());
  ASSERT_TRUE(read_a.ok() && read_b.ok());
  ASSERT_EQ(read_a->size(), 1u);
  // Their forward passes move the statistics.
  ASSERT_TRUE(a.moving.Assign(Tensor::FromVector<float>({1, 10}, {2})).ok());
  ASSERT_TRUE(b.moving.Assign(Tensor::FromVector<float>({2, 20}, {2})).ok());
  const Tensor no_grad = Tensor::FromVector<float>({0, 0}, {2});
  ASSERT_TRUE(shards->Push(a.vars(), *read_a, {no_grad}, 1).ok());
  ASSERT_TRUE(shards->Push(b.vars(), *read_b, {no_grad}, 2).ok());
  EXPECT_EQ(Gathered(*shards, all, 1), (std::vector<float>{3, 30}));
}

// A frozen variable (non-trainable, not forward state) is neither read as
// state nor pushed: a worker's copy that differs changes nothing.
TEST(ParameterServerShardsTest, AFrozenVariableIsNeverPushed) {
  WorkerModel worker, all;
  std::unique_ptr<ParameterServerShards> shards =
      TwoDeviceShards(all, /*frozen=*/true);
  ASSERT_NE(shards, nullptr);
  auto read = shards->ForwardState(worker.vars());
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->empty());
  ASSERT_TRUE(
      worker.moving.Assign(Tensor::FromVector<float>({1, 10}, {2})).ok());
  ASSERT_TRUE(shards
                  ->Push(worker.vars(), *read,
                         {Tensor::FromVector<float>({1, 1}, {2})}, 1)
                  .ok());
  EXPECT_EQ(Gathered(*shards, all, 1), (std::vector<float>{0, 0}));
  EXPECT_EQ(Gathered(*shards, all, 0), (std::vector<float>{-1, -1}));
}

// Update 2 reaches both devices before update 1 (two pushes racing): each
// device applies each update at its own number, lr 2 for update 2 and 1
// for update 1, and counts the highest.
TEST(ParameterServerShardsTest, EveryDeviceAppliesAnUpdateAtItsNumber) {
  WorkerModel worker, all;
  std::unique_ptr<ParameterServerShards> shards = TwoDeviceShards(all);
  ASSERT_NE(shards, nullptr);
  auto read = shards->ForwardState(worker.vars());
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(shards
                  ->Push(worker.vars(), *read,
                         {Tensor::FromVector<float>({10, 100}, {2})}, 2)
                  .ok());
  ASSERT_TRUE(shards
                  ->Push(worker.vars(), *read,
                         {Tensor::FromVector<float>({1, 1}, {2})}, 1)
                  .ok());
  // w = -(2 * g2) - (1 * g1) on each row.
  EXPECT_EQ(Gathered(*shards, all, 0), (std::vector<float>{-21, -201}));
  EXPECT_EQ(shards->UpdatesPerShard(), (std::vector<int64_t>{2, 2}));
}

// The version a gathered copy is keyed by: every Push and CopyFrom moves it
// (a failed push too: it may have changed some devices), reads and
// gathers do not.
TEST(ParameterServerShardsTest, VersionMovesWithEveryChangeOnly) {
  WorkerModel worker, all;
  std::unique_ptr<ParameterServerShards> shards = TwoDeviceShards(all);
  ASSERT_NE(shards, nullptr);
  const int64_t start = shards->version();
  ASSERT_TRUE(shards->Read(worker.vars()).ok());
  Gathered(*shards, all, 0);
  EXPECT_EQ(shards->version(), start);
  auto read = shards->ForwardState(worker.vars());
  ASSERT_TRUE(read.ok());
  const Tensor grad = Tensor::FromVector<float>({1, 1}, {2});
  ASSERT_TRUE(shards->Push(worker.vars(), *read, {grad}, 1).ok());
  const int64_t pushed = shards->version();
  EXPECT_NE(pushed, start);
  // No gradient for the trainable variable: fails after changing nothing
  // it can tell, and still moves the version.
  EXPECT_FALSE(shards->Push(worker.vars(), *read, {}, 2).ok());
  const int64_t failed = shards->version();
  EXPECT_NE(failed, pushed);
  auto optimizer = Sgd();
  ASSERT_TRUE(optimizer.ok());
  ASSERT_TRUE((*optimizer)->CreateSlots({&all.w}).ok());
  ASSERT_TRUE(shards->CopyFrom(all.vars(), **optimizer, nullptr, 5).ok());
  EXPECT_NE(shards->version(), failed);
}

}  // namespace
}  // namespace mirrortrain::trainer
