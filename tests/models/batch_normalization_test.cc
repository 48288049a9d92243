// The batch_normalization layer against Keras (scripts/golden/
// normalization.py -> tests/golden/normalization.txt): training and
// inference, output, input/gamma/beta gradients and moving statistics; and
// synchronized over 2 and 3 replicas (uneven shards of 7 rows) against
// Keras on the whole batch. The layer computes in float32; the goldens are
// float64, so the tolerances are float32's.
#include <optional>

#include "distribute/mirrored_strategy.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

constexpr double kTol = 2e-5;

const std::map<std::string, Tensor>& Golden() {
  return testing::CachedGolden("normalization.txt");
}

Tensor F32(const std::string& name) {
  return *ops::Cast(Golden().at(name), DType::kF32);
}

Tensor F64(const Tensor& t) {
  return *ops::Cast(*t.To(Device::Cpu()), DType::kF64);
}

// A model of one batch_normalization layer (momentum 0.9, as the script)
// with gamma, beta and the moving statistics set from the golden file.
std::unique_ptr<Model> BuildLayer(bool synchronized, Device device) {
  absl::StatusOr<LayerSpec> spec =
      MakeLayerSpec("batch_normalization",
                    {{"momentum", 0.9}, {"synchronized", synchronized}});
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  ModelDef def{{3, 2, 4}, {*spec}};
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Build(def, 1, device);
  EXPECT_TRUE(model.ok()) << model.status();
  const std::map<std::string, std::string> from = {
      {"batch_normalization/gamma", "gamma"},
      {"batch_normalization/beta", "beta"},
      {"batch_normalization/moving_mean", "moving_mean0"},
      {"batch_normalization/moving_variance", "moving_variance0"}};
  EXPECT_EQ((*model)->variables().size(), 4u);
  for (Variable* v : (*model)->variables()) {
    EXPECT_TRUE(v->Assign(F32(from.at(v->name()))).ok()) << v->name();
  }
  return *std::move(model);
}

struct Result {
  Tensor y, dx, dgamma, dbeta, moving_mean, moving_variance;
};

// Forward and the gradients of sum(y * upstream) on one device.
Result ForwardBackward(Model& model, const Tensor& x, const Tensor& upstream,
                       const ForwardContext& ctx) {
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = model.Call(x, ctx);
  EXPECT_TRUE(y.ok()) << y.status();
  const std::vector<Variable*>& vars = model.variables();
  GradientOptions options;
  options.output_gradient = upstream;
  auto grads =
      tape.Gradient(*y, {x, vars[0]->value(), vars[1]->value()}, options);
  EXPECT_TRUE(grads.ok()) << grads.status();
  return {*y,           *(*grads)[0],     *(*grads)[1],
          *(*grads)[2], vars[2]->value(), vars[3]->value()};
}

void ExpectMatches(const Result& r, const std::string& prefix) {
  SCOPED_TRACE(prefix);
  const auto& g = Golden();
  EXPECT_TRUE(testing::AllClose(F64(r.y), g.at(prefix + "/y"), kTol, kTol));
  EXPECT_TRUE(testing::AllClose(F64(r.dx), g.at(prefix + "/dx"), kTol, kTol));
  EXPECT_TRUE(
      testing::AllClose(F64(r.dgamma), g.at(prefix + "/dgamma"), kTol, kTol));
  EXPECT_TRUE(
      testing::AllClose(F64(r.dbeta), g.at(prefix + "/dbeta"), kTol, kTol));
  EXPECT_TRUE(testing::AllClose(F64(r.moving_mean),
                                g.at(prefix + "/moving_mean"), kTol, kTol));
  EXPECT_TRUE(testing::AllClose(F64(r.moving_variance),
                                g.at(prefix + "/moving_variance"), kTol, kTol));
}

TEST(BatchNormalizationTest, TrainingMatchesKeras) {
  ASSERT_FALSE(Golden().empty()) << "cannot load normalization.txt";
  auto model = BuildLayer(false, Device::Cpu());
  ExpectMatches(
      ForwardBackward(*model, F32("x"), F32("upstream"), {.training = true}),
      "bn_train");
}

// center: false, scale: false: no gamma or beta (Keras creates neither),
// y = (x - mean) / sqrt(var + eps).
TEST(BatchNormalizationTest, WithoutCenterAndScaleMatchesKeras) {
  ASSERT_FALSE(Golden().empty()) << "cannot load normalization.txt";
  absl::StatusOr<LayerSpec> spec =
      MakeLayerSpec("batch_normalization",
                    {{"momentum", 0.9}, {"center", false}, {"scale", false}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{3, 2, 4}, {*spec}}, 1, Device::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<Variable*>& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0]->name(), "batch_normalization/moving_mean");
  EXPECT_EQ(vars[1]->name(), "batch_normalization/moving_variance");
  ASSERT_TRUE(vars[0]->Assign(F32("moving_mean0")).ok());
  ASSERT_TRUE(vars[1]->Assign(F32("moving_variance0")).ok());
  const Tensor x = F32("x");
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = (*model)->Call(x, {.training = true});
  ASSERT_TRUE(y.ok()) << y.status();
  GradientOptions options;
  options.output_gradient = F32("upstream");
  auto grads = tape.Gradient(*y, {x}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  const auto& g = Golden();
  EXPECT_TRUE(testing::AllClose(F64(*y), g.at("bn_plain/y"), kTol, kTol));
  EXPECT_TRUE(
      testing::AllClose(F64(*(*grads)[0]), g.at("bn_plain/dx"), kTol, kTol));
  EXPECT_TRUE(testing::AllClose(F64(vars[0]->value()),
                                g.at("bn_plain/moving_mean"), kTol, kTol));
  EXPECT_TRUE(testing::AllClose(F64(vars[1]->value()),
                                g.at("bn_plain/moving_variance"), kTol, kTol));
}

TEST(BatchNormalizationTest, InferenceUsesTheMovingStatistics) {
  ASSERT_FALSE(Golden().empty()) << "cannot load normalization.txt";
  auto model = BuildLayer(false, Device::Cpu());
  ExpectMatches(
      ForwardBackward(*model, F32("x"), F32("upstream"), {.training = false}),
      "bn_infer");
}

TEST(BatchNormalizationTest, SynchronizedOnOneReplicaMatchesKeras) {
  ASSERT_FALSE(Golden().empty()) << "cannot load normalization.txt";
  auto model = BuildLayer(true, Device::Cpu());
  ExpectMatches(ForwardBackward(*model, F32("x"), F32("upstream"),
                                {.training = true, .global_batch = 7}),
                "bn_sync");
}

// Each replica normalises its shard with the global batch's statistics:
// the shards' outputs and input gradients put together, the replicas'
// gamma/beta gradients summed, and every replica's moving statistics equal
// Keras on the whole batch.
class SynchronizedReplicasTest : public ::testing::TestWithParam<int> {};

TEST_P(SynchronizedReplicasTest, EqualOneReplicaOnTheWholeBatch) {
  ASSERT_FALSE(Golden().empty()) << "cannot load normalization.txt";
  const int replicas = GetParam();
  std::vector<Device> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(Device::Cpu(i));
  auto strategy = distribute::MirroredStrategy::Create(devices, {});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  std::vector<std::unique_ptr<Model>> models;
  for (const Device& d : devices) models.push_back(BuildLayer(true, d));
  const Tensor x = F32("x"), up = F32("upstream");
  std::vector<Result> results(replicas);
  ASSERT_TRUE((*strategy)
                  ->Run([&](distribute::ReplicaContext& ctx) -> absl::Status {
                    const int id = ctx.replica_id();
                    const distribute::ShardRange s =
                        distribute::ShardOf(7, id, replicas);
                    const Tensor xs = *x.SliceRows(s.begin, s.end - s.begin);
                    const Tensor us = *up.SliceRows(s.begin, s.end - s.begin);
                    const ops::AllReduceSumFn sum =
                        [&ctx](absl::Span<Tensor> ts) {
                          return ctx.AllReduce(distribute::ReduceOp::kSum, ts);
                        };
                    results[id] = ForwardBackward(*models[id], xs, us,
                                                  {.training = true,
                                                   .row_offset = s.begin,
                                                   .global_batch = 7,
                                                   .all_reduce_sum = &sum});
                    return absl::OkStatus();
                  })
                  .ok());
  std::vector<Tensor> ys, dxs;
  Result total = results[0];
  for (int r = 0; r < replicas; ++r) {
    ys.push_back(results[r].y);
    dxs.push_back(results[r].dx);
    if (r > 0) {
      total.dgamma = *ops::Add(total.dgamma, results[r].dgamma);
      total.dbeta = *ops::Add(total.dbeta, results[r].dbeta);
    }
    // The moving statistics are bitwise the same on every replica.
    EXPECT_TRUE(testing::AllClose(results[r].moving_mean,
                                  results[0].moving_mean, 0, 0));
    EXPECT_TRUE(testing::AllClose(results[r].moving_variance,
                                  results[0].moving_variance, 0, 0));
  }
  total.y = *ops::Concat(ys, 0);
  total.dx = *ops::Concat(dxs, 0);
  ExpectMatches(total, "bn_sync");
}

INSTANTIATE_TEST_SUITE_P(Replicas, SynchronizedReplicasTest,
                         ::testing::Values(2, 3));

// Unsynchronized replicas normalise with their own shard, so they differ
// from the whole batch; their moving statistics stay identical (the mean
// over replicas of the shard statistics).
TEST(BatchNormalizationTest, UnsynchronizedReplicasKeepIdenticalMovingStats) {
  ASSERT_FALSE(Golden().empty()) << "cannot load normalization.txt";
  std::vector<Device> devices = {Device::Cpu(0), Device::Cpu(1)};
  auto strategy = distribute::MirroredStrategy::Create(devices, {});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  std::vector<std::unique_ptr<Model>> models;
  for (const Device& d : devices) models.push_back(BuildLayer(false, d));
  const Tensor x = F32("x"), up = F32("upstream");
  std::vector<Result> results(2);
  ASSERT_TRUE(
      (*strategy)
          ->Run([&](distribute::ReplicaContext& ctx) -> absl::Status {
            const int id = ctx.replica_id();
            const distribute::ShardRange s = distribute::ShardOf(7, id, 2);
            const ops::AllReduceSumFn sum = [&ctx](absl::Span<Tensor> ts) {
              return ctx.AllReduce(distribute::ReduceOp::kSum, ts);
            };
            results[id] = ForwardBackward(
                *models[id], *x.SliceRows(s.begin, s.end - s.begin),
                *up.SliceRows(s.begin, s.end - s.begin),
                {.training = true, .global_batch = 7, .all_reduce_sum = &sum});
            return absl::OkStatus();
          })
          .ok());
  EXPECT_TRUE(
      testing::AllClose(results[1].moving_mean, results[0].moving_mean, 0, 0));
  EXPECT_TRUE(testing::AllClose(results[1].moving_variance,
                                results[0].moving_variance, 0, 0));
  // Not the whole batch's statistics: shard 0's output differs from Keras.
  const Tensor y0 = F64(results[0].y);
  const Tensor whole = *Golden().at("bn_train/y").SliceRows(0, 4);
  EXPECT_FALSE(testing::AllClose(y0, whole, 1e-3, 1e-3));
}

// Synchronized statistics divide by the global batch's count, which the
// caller gives: a context that all-reduces but gives none is refused, not
// normalised with a count of 0 (mean and variance 0).
TEST(BatchNormalizationTest, SynchronizedStatisticsNeedTheGlobalBatch) {
  std::unique_ptr<Model> model = BuildLayer(true, Device::Cpu());
  const ops::AllReduceSumFn identity = [](absl::Span<Tensor>) {
    return absl::OkStatus();
  };
  const Tensor x = testing::RandomTensor({4, 3, 2, 4}, 5, DType::kF32);
  absl::StatusOr<Tensor> y =
      model->Call(x, {.training = true, .all_reduce_sum = &identity});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kFailedPrecondition)
      << y.status();
  y = model->Call(
      x, {.training = true, .global_batch = 4, .all_reduce_sum = &identity});
  EXPECT_TRUE(y.ok()) << y.status();
}

// Inputs whose mean is large against their spread (mean 300, spread 0.5:
// unnormalised features) keep their variance: the statistics are formed
// from float64 sums. In float32, E[x^2] - E[x]^2 lost 6 of float32's 7
// digits here (the variance 2.8% off for 20 rows; Keras's two-pass moments
// keep it). Checked against float64 arithmetic on the same float32 inputs,
// on one replica and synchronized (the statistics all-reduced) on two.
TEST(BatchNormalizationTest, StatisticsOfInputsFarFromZeroAreAccurate) {
  constexpr int64_t kRows = 64, kChannels = 3;
  std::vector<float> xs(kRows * kChannels), dys(kRows * kChannels);
  for (int64_t i = 0; i < kRows * kChannels; ++i) {
    // Deterministic, irregular values around 300 (and an upstream gradient).
    xs[i] = static_cast<float>(300.0 + 0.5 * std::sin(1.7 * i + 0.3));
    dys[i] = static_cast<float>(std::cos(0.9 * i));
  }
  // Float64 truth: y = (x - mean) / sqrt(var + eps) and its input gradient.
  constexpr double kEps = 0.001;
  std::vector<double> mean(kChannels), var(kChannels), y(xs.size()),
      dx(xs.size());
  for (int64_t c = 0; c < kChannels; ++c) {
    double s = 0, ss = 0, dy_sum = 0, dy_xhat = 0;
    for (int64_t r = 0; r < kRows; ++r) s += xs[r * kChannels + c];
    mean[c] = s / kRows;
    for (int64_t r = 0; r < kRows; ++r) {
      const double d = xs[r * kChannels + c] - mean[c];
      ss += d * d;
    }
    var[c] = ss / kRows;
    const double inv = 1 / std::sqrt(var[c] + kEps);
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = r * kChannels + c;
      y[i] = (xs[i] - mean[c]) * inv;
      dy_sum += dys[i];
      dy_xhat += dys[i] * y[i];
    }
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = r * kChannels + c;
      dx[i] = inv * (dys[i] - dy_sum / kRows - y[i] * dy_xhat / kRows);
    }
  }
  const auto check = [&](int replicas) {
    SCOPED_TRACE(absl::StrCat(replicas, " replicas"));
    absl::StatusOr<LayerSpec> spec =
        MakeLayerSpec("batch_normalization",
                      {{"momentum", 0.0}, {"synchronized", replicas > 1}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    std::vector<Device> devices;
    for (int i = 0; i < replicas; ++i) devices.push_back(Device::Cpu(i));
    auto strategy = distribute::MirroredStrategy::Create(devices, {});
    ASSERT_TRUE(strategy.ok()) << strategy.status();
    std::vector<std::unique_ptr<Model>> models;
    for (const Device& d : devices) {
      absl::StatusOr<std::unique_ptr<Model>> m =
          Model::Build(ModelDef{{kChannels}, {*spec}}, 1, d);
      ASSERT_TRUE(m.ok()) << m.status();
      models.push_back(*std::move(m));
    }
    std::vector<Tensor> shard_y(replicas), shard_dx(replicas);
    ASSERT_TRUE(
        (*strategy)
            ->Run([&](distribute::ReplicaContext& ctx) -> absl::Status {
              const int r = ctx.replica_id();
              const int64_t rows = kRows / replicas;
              const auto part = [&](const std::vector<float>& v) {
                return Tensor::FromVector<float>(
                    {v.begin() + r * rows * kChannels,
                     v.begin() + (r + 1) * rows * kChannels},
                    {rows, kChannels});
              };
              const ops::AllReduceSumFn sum = [&ctx](absl::Span<Tensor> ts) {
                return ctx.AllReduce(distribute::ReduceOp::kSum, ts);
              };
              const Result got = ForwardBackward(
                  *models[r], part(xs), part(dys),
                  {.training = true,
                   .row_offset = r * rows,
                   .global_batch = kRows,
                   .all_reduce_sum = replicas > 1 ? &sum : nullptr});
              shard_y[r] = got.y;
              shard_dx[r] = got.dx;
              return absl::OkStatus();
            })
            .ok());
    const Tensor got_y = *ops::Concat(shard_y, 0);
    const Tensor got_dx = *ops::Concat(shard_dx, 0);
    // gamma 1 and beta 0 as initialised.
    const Tensor got_var = models[0]->variables()[3]->value();
    ASSERT_EQ(models[0]->variables()[3]->name(),
              "batch_normalization/moving_variance");
    for (int64_t c = 0; c < kChannels; ++c) {
      EXPECT_NEAR(got_var.ScalarAt(c), var[c], 1e-6 * var[c]) << c;
    }
    // y = x * k + (-mean * k) in float32 (tf.nn.batch_normalization's
    // form) rounds at 300 * k, about 4e-5 here.
    EXPECT_TRUE(testing::AllClose(
        F64(got_y), Tensor::FromVector<double>(y, {kRows, kChannels}), 0,
        2e-4));
    EXPECT_TRUE(testing::AllClose(
        F64(got_dx), Tensor::FromVector<double>(dx, {kRows, kChannels}), 2e-5,
        2e-5));
  };
  check(1);
  check(2);
}

}  // namespace
}  // namespace mirrortrain::models
