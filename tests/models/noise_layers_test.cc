// Keras's noise layers (models/noise_layers.cc): gaussian_noise,
// gaussian_dropout, alpha_dropout. Their draws are this project's (counter-
// based, not Keras's stream), so what is checked is Keras's formula around
// them, the draws' distribution, inference as the identity, and a shard
// drawing the whole batch's noise; and on a GPU the CPU's draws.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/layer_registry.h"
#include "models/model.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tests/models/one_layer_model.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

std::unique_ptr<Model> Build(const std::string& type, const char* key,
                             double value, const Shape& input) {
  return testing::OneLayerModel(type, {{key, value}}, input);
}

// Each noise layer and its key.
const std::vector<std::pair<std::string, const char*>> kNoiseLayers = {
    {"gaussian_noise", "stddev"},
    {"gaussian_dropout", "rate"},
    {"alpha_dropout", "rate"}};

const ForwardContext kTraining{.training = true, .step_seed = 11};

struct Moments {
  double mean = 0, stddev = 0, within_one = 0;  // Fraction in [-1, 1] sd.
};
Moments Of(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(t.ScalarAt(i));
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size()));
  for (double x : v) {
    m.within_one += std::abs(x - m.mean) <= m.stddev ? 1.0 : 0.0;
  }
  m.within_one /= static_cast<double>(v.size());
  return m;
}

TEST(NoiseLayersTest, InferenceIsTheIdentity) {
  const Tensor x = testing::RandomTensor({4, 5}, 1, DType::kF32);
  for (const auto& [type, key] : kNoiseLayers) {
    SCOPED_TRACE(type);
    std::unique_ptr<Model> m = Build(type, key, 0.3, {5});
    ASSERT_NE(m, nullptr);
    absl::StatusOr<Tensor> y = m->Call(x, {});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(testing::SameBits(*y, x));
    absl::StatusOr<Tensor> trained = m->Call(x, kTraining);
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_FALSE(testing::AllClose(*trained, x, 1e-3, 1e-3));
  }
}

// The draws are standard normal: over 2^17 of them, mean 0, standard
// deviation 1, 68.3% within one of it.
TEST(NoiseLayersTest, DrawsAreStandardNormal) {
  const Tensor like = Tensor::HostFull(DType::kF64, {1 << 17}, 0.0);
  absl::StatusOr<Tensor> n = ops::StandardNormal(like, 42);
  ASSERT_TRUE(n.ok()) << n.status();
  const Moments m = Of(*n);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.stddev, 1.0, 0.01);
  EXPECT_NEAR(m.within_one, 0.6827, 0.005);
  // Another seed, other draws; an offset, the same ones shifted.
  absl::StatusOr<Tensor> other = ops::StandardNormal(like, 43);
  EXPECT_NE(other->ScalarAt(0), n->ScalarAt(0));
  const Tensor tail = Tensor::HostFull(DType::kF64, {8}, 0.0);
  absl::StatusOr<Tensor> shifted = ops::StandardNormal(tail, 42, 100);
  ASSERT_TRUE(shifted.ok());
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(shifted->ScalarAt(i), n->ScalarAt(100 + i));
  }
}

// Keras's formulas around the noise: x + stddev n (the noise independent
// of x), x (1 + sqrt(rate / (1 - rate)) n), and alpha dropout's two values
// per element, its rate, and unit mean and variance kept for such inputs.
TEST(NoiseLayersTest, KerasFormulasAroundTheDraws) {
  const Tensor x = testing::RandomTensor({256, 256}, 2, DType::kF32, 0.5, 2.0);
  const Tensor zeros = Tensor::HostFull(DType::kF32, {256, 256}, 0.0);
  const Tensor ones = Tensor::HostFull(DType::kF32, {256, 256}, 1.0);
  std::unique_ptr<Model> noise = Build("gaussian_noise", "stddev", 0.5, {256});
  const Tensor with_x = *noise->Call(x, kTraining);
  const Tensor alone = *noise->Call(zeros, kTraining);
  EXPECT_TRUE(testing::AllClose(*ops::Sub(with_x, alone), x, 1e-6, 1e-6));
  EXPECT_NEAR(Of(alone).stddev, 0.5, 0.005);
  std::unique_ptr<Model> gd = Build("gaussian_dropout", "rate", 0.2, {256});
  const Tensor factor = *gd->Call(ones, kTraining);
  EXPECT_TRUE(testing::AllClose(*gd->Call(x, kTraining), *ops::Mul(x, factor),
                                1e-6, 1e-6));
  const Moments f = Of(factor);
  EXPECT_NEAR(f.mean, 1.0, 0.005);
  EXPECT_NEAR(f.stddev, std::sqrt(0.2 / 0.8), 0.005);
  // alpha_dropout of unit-normal inputs: a x + b where kept, a alpha' + b
  // where dropped (a rate of them), mean 0 and variance 1 kept.
  const Tensor normal = *ops::Cast(
      *ops::StandardNormal(Tensor::HostFull(DType::kF64, {256, 256}, 0.0), 9),
      DType::kF32);
  const double rate = 0.1, alpha_p = -1.7580993408473766;
  const double a = std::pow((1 - rate) * (1 + rate * alpha_p * alpha_p), -0.5);
  const double b = -a * alpha_p * rate;
  std::unique_ptr<Model> ad = Build("alpha_dropout", "rate", rate, {256});
  const Tensor y = *ad->Call(normal, kTraining);
  int dropped = 0;
  const float dropped_value =
      static_cast<float>(static_cast<float>(a) * static_cast<float>(alpha_p) +
                         static_cast<float>(b));
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const double kept = a * normal.ScalarAt(i) + b;
    if (y.ScalarAt(i) == dropped_value &&
        std::abs(kept - dropped_value) > 1e-4) {
      ++dropped;
    } else {
      EXPECT_NEAR(y.ScalarAt(i), kept, 1e-5) << i;
    }
  }
  EXPECT_NEAR(dropped / 65536.0, rate, 0.005);
  const Moments out = Of(y);
  EXPECT_NEAR(out.mean, 0.0, 0.02);
  EXPECT_NEAR(out.stddev, 1.0, 0.02);
}

// A shard told its first row draws the whole batch's noise.
TEST(NoiseLayersTest, ShardsDrawTheWholeBatchsNoise) {
  const Tensor x = testing::RandomTensor({6, 4, 3}, 3, DType::kF32);
  for (const auto& [type, key] : kNoiseLayers) {
    SCOPED_TRACE(type);
    std::unique_ptr<Model> m = Build(type, key, 0.3, {4, 3});
    const Tensor whole = *m->Call(x, kTraining);
    ForwardContext shard = kTraining;
    shard.row_offset = 2;
    absl::StatusOr<Tensor> part = m->Call(*x.SliceRows(2, 4), shard);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_TRUE(testing::SameBits(*part, *whole.SliceRows(2, 4)));
  }
}

LayerSpec Spec(const std::string& type,
               std::vector<std::pair<std::string, ParamValue>> values = {}) {
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(values));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Two layers, two steps and two time_distributed steps draw apart; the step
// seed as a (CPU) tensor draws the host seed's bits; a mask passes.
TEST(NoiseLayersTest, LayersStepsAndSeedsDrawApart) {
  const LayerSpec noise = Spec("gaussian_noise", {{"stddev", 0.5}});
  const Tensor zeros = Tensor::HostFull(DType::kF32, {3, 4, 2}, 0.0);
  auto build = [](std::vector<LayerSpec> layers) {
    for (size_t i = 0; i < layers.size(); ++i) {
      layers[i].path = "model.layers[" + std::to_string(i) + "]";
    }
    return *Model::Build(ModelDef{{4, 2}, std::move(layers)}, 3, Device::Cpu());
  };
  const Tensor first = *build({noise})->Call(zeros, kTraining);
  const Tensor both = *build({noise, noise})->Call(zeros, kTraining);
  // both = 0.5 (n0 + n1): n1 is not n0.
  EXPECT_FALSE(testing::AllClose(*ops::Sub(both, first), first, 1e-3, 1e-3));
  ForwardContext next = kTraining;
  next.step_seed = 12;
  EXPECT_FALSE(
      testing::AllClose(*build({noise})->Call(zeros, next), first, 1e-3, 1e-3));
  ForwardContext tensor_seed = kTraining;
  tensor_seed.step_seed_tensor = Tensor::FromVector<int64_t>({11}, {1});
  tensor_seed.step_seed = 0;  // Not read beside the tensor.
  EXPECT_TRUE(
      testing::SameBits(*build({noise})->Call(zeros, tensor_seed), first));
  LayerSpec per_step = Spec("time_distributed");
  per_step.layers = {noise};
  const Tensor steps = *build({per_step})->Call(zeros, kTraining);
  EXPECT_FALSE(testing::AllClose(*ops::Slice(steps, 1, 0, 1),
                                 *ops::Slice(steps, 1, 1, 1), 1e-3, 1e-3));
  LayerSpec embedding = Spec("embedding", {{"input_dim", int64_t{5}},
                                           {"output_dim", int64_t{2}},
                                           {"mask_zero", true}});
  embedding.path = "model.layers[0]";
  LayerSpec masked_noise = noise;
  masked_noise.path = "model.layers[1]";
  absl::StatusOr<std::unique_ptr<Model>> masked =
      Model::Build(ModelDef{{4}, {embedding, masked_noise}}, 3, Device::Cpu());
  ASSERT_TRUE(masked.ok()) << masked.status();
  EXPECT_TRUE((*masked)->output_masked());
  EXPECT_TRUE((*masked)->mask_warnings().empty());
}

class NoiseGpuTest : public testing::CudaTest {};

// On gpu:0 the CPU's draws, from a host seed and from the step seed as a
// device tensor (a replayed CUDA graph's), within the last bits of
// double's log and cos (the device's are other implementations), f32 and
// f64.
TEST_F(NoiseGpuTest, DrawsAreTheCpus) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const double tol = dtype == DType::kF32 ? 1e-6 : 1e-13;
    const Tensor like = Tensor::HostFull(dtype, {4096}, 0.0);
    const Tensor want = *ops::StandardNormal(like, 5, 7);
    const Tensor on_gpu = *like.To(Device::Cuda(0));
    absl::StatusOr<Tensor> got = ops::StandardNormal(on_gpu, 5, 7);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(testing::AllClose(*got->To(Device::Cpu()), want, tol, tol));
    const Tensor seed = Tensor::FromVector<int64_t>({77}, {1});
    const Tensor want_step = *ops::StandardNormal(like, seed, 3, 9, 7);
    absl::StatusOr<Tensor> got_step =
        ops::StandardNormal(on_gpu, *seed.To(Device::Cuda(0)), 3, 9, 7);
    ASSERT_TRUE(got_step.ok()) << got_step.status();
    EXPECT_TRUE(
        testing::AllClose(*got_step->To(Device::Cpu()), want_step, tol, tol));
  }
}

}  // namespace
}  // namespace mirrortrain::models
