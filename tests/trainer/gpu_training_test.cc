// Training on gpu:0 follows the cpu:0 trajectory: the mlp and the cnn,
// built with the same seed on both devices, take 20 GradientTape steps
// (forward, sparse softmax cross-entropy, backward, momentum update) on the
// same batches and end with the same weights. Every op of both models runs
// its CUDA kernel here (MatMul, BiasAddRelu, Dropout, Conv2D, MaxPool2D,
// the loss, ReduceSum, the momentum update). Labelled `gpu`; skips with the
// reason when no GPU is visible.
#include <cmath>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/losses.h"
#include "models/model.h"
#include "models/presets.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"
#include "tests/trainer/optim/build_optimizer.h"
#include "trainer/gpu_warm_up.h"
#include "trainer/optim/optimizers.h"

namespace mirrortrain {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kBatch = 16;

class GpuTrainingTest : public testing::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    SetMatMulPrecision(MatMulPrecision::kFp32);
  }
};

struct Batch {
  Tensor images;  // [kBatch, 28, 28, 1] f32, on the CPU.
  Tensor labels;  // [kBatch], i32 or i64, on the CPU.
};

std::vector<Batch> MakeBatches(DType label_dtype) {
  std::vector<Batch> batches;
  std::mt19937_64 rng(7);
  for (int step = 0; step < kSteps; ++step) {
    Batch b;
    b.images = testing::RandomTensor({kBatch, 28, 28, 1}, 1000 + step,
                                     DType::kF32, 0.0, 1.0);
    b.labels = Tensor::HostEmpty(label_dtype, {kBatch});
    for (int64_t i = 0; i < kBatch; ++i) {
      const int64_t label = static_cast<int64_t>(rng() % 10);
      if (label_dtype == DType::kI32) {
        b.labels.data<int32_t>()[i] = static_cast<int32_t>(label);
      } else {
        b.labels.data<int64_t>()[i] = label;
      }
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

struct Trained {
  std::vector<std::string> names;
  std::vector<Tensor> values;  // On the CPU.
  std::vector<double> losses;  // Per step.
  double correct = 0;          // CountCorrect on the first batch at the end.
};

Trained Train(const absl::StatusOr<models::ModelDef>& def, double learning_rate,
              const std::vector<Batch>& batches, Device device,
              double label_smoothing = 0) {
  Trained out;
  EXPECT_TRUE(def.ok()) << def.status();
  if (!def.ok()) return out;
  auto model = models::Model::Build(*def, /*seed=*/42, device);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  auto optimizer =
      testing::BuildOptimizer("momentum", learning_rate, {{"momentum", 0.9}});
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  if (!optimizer.ok()) return out;
  std::vector<Variable*> vars = (*model)->trainable_variables();
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<Tensor> images = batches[step].images.To(device);
    absl::StatusOr<Tensor> labels = batches[step].labels.To(device);
    EXPECT_TRUE(images.ok() && labels.ok());
    if (!images.ok() || !labels.ok()) return out;
    GradientTape tape;
    // Dropout draws its mask from (step_seed, element index): the same on
    // both devices.
    const models::ForwardContext ctx{true, /*step_seed=*/9000u + step, 0};
    absl::StatusOr<Tensor> logits = (*model)->Call(*images, ctx);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    EXPECT_EQ(logits->device(), device);
    absl::StatusOr<Tensor> loss = models::SparseCategoricalCrossentropy(
        *logits, *labels, kBatch, label_smoothing);
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return out;
    absl::Status s = (*optimizer)->Minimize(tape, *loss, vars);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return out;
    out.losses.push_back(loss->To(Device::Cpu())->ScalarAt(0));
  }
  absl::StatusOr<Tensor> images = batches[0].images.To(device);
  absl::StatusOr<Tensor> labels = batches[0].labels.To(device);
  absl::StatusOr<Tensor> logits = (*model)->Call(*images, {});
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (logits.ok()) {
    absl::StatusOr<double> correct = models::CountCorrect(*logits, *labels);
    EXPECT_TRUE(correct.ok()) << correct.status();
    out.correct = correct.ok() ? *correct : -1;
  }
  for (Variable* v : vars) {
    EXPECT_EQ(v->value().device(), device) << v->name();
    out.names.push_back(v->name());
    out.values.push_back(*v->value().To(Device::Cpu()));
  }
  return out;
}

// The two runs differ only in float summation order (cuBLAS vs OpenBLAS
// GEMMs, reductions accumulated in double on the GPU, softmax sums): about
// 1e-7 relative per op and step. At these stable learning rates such
// differences are not amplified much over 20 steps (the mirrored-training
// test sees 1e-5 after 50 steps for reordered sums), so 1e-4 per variable
// (||gpu - cpu|| / ||cpu||) leaves margin, while a wrong kernel (a missing
// term, a wrong index, a different dropout mask) is off by O(1) after one
// step.
constexpr double kRelTol = 1e-4;

void ExpectSameTrajectory(const Trained& gpu, const Trained& cpu) {
  ASSERT_EQ(gpu.names, cpu.names);
  ASSERT_FALSE(cpu.names.empty());
  ASSERT_EQ(gpu.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(gpu.losses[step], cpu.losses[step],
                kRelTol * std::abs(cpu.losses[step]))
        << "step " << step;
  }
  for (size_t i = 0; i < cpu.values.size(); ++i) {
    const testing::DiffAndNorm d =
        testing::L2DiffAndNorm(gpu.values[i], cpu.values[i]);
    EXPECT_LE(d.diff, kRelTol * d.norm + 1e-12) << cpu.names[i];
  }
  EXPECT_EQ(gpu.correct, cpu.correct);
}

TEST_F(GpuTrainingTest, MlpFollowsCpuTrajectory) {
  const auto spec = models::ExpandPreset(
      "mlp", {{"hidden_units", std::vector<int64_t>{64, 32}}, {"dropout", 0.2}},
      {28, 28, 1}, 10);
  const std::vector<Batch> batches = MakeBatches(DType::kI64);
  const Trained cpu = Train(spec, 0.01, batches, Device::Cpu());
  const Trained gpu = Train(spec, 0.01, batches, Device::Cuda(0));
  ExpectSameTrajectory(gpu, cpu);
}

// The smoothed loss's extra log-softmax and sum on the GPU.
TEST_F(GpuTrainingTest, LabelSmoothingFollowsCpuTrajectory) {
  const auto spec = models::ExpandPreset(
      "mlp", {{"hidden_units", std::vector<int64_t>{64}}}, {28, 28, 1}, 10);
  const std::vector<Batch> batches = MakeBatches(DType::kI64);
  const Trained cpu = Train(spec, 0.01, batches, Device::Cpu(), 0.1);
  const Trained gpu = Train(spec, 0.01, batches, Device::Cuda(0), 0.1);
  ExpectSameTrajectory(gpu, cpu);
  EXPECT_NE(cpu.losses, Train(spec, 0.01, batches, Device::Cpu()).losses);
}

TEST_F(GpuTrainingTest, CnnFollowsCpuTrajectory) {
  // lr 0.001: at 0.01 with momentum 0.9 this small CNN is chaotic on random
  // data and rounding differences grow ~2x per step (see
  // mirrored_training_test.cc).
  const auto spec =
      models::ExpandPreset("cnn",
                           {{"conv_filters", std::vector<int64_t>{4, 8}},
                            {"dense_units", 32},
                            {"dropout", 0.4}},
                           {28, 28, 1}, 10);
  const std::vector<Batch> batches = MakeBatches(DType::kI32);
  const Trained cpu = Train(spec, 0.001, batches, Device::Cpu());
  const Trained gpu = Train(spec, 0.001, batches, Device::Cuda(0));
  ExpectSameTrajectory(gpu, cpu);
}

// The start-up's warm-up of the GPUs and the product libraries
// (trainer/gpu_warm_up.h) runs on a thread of its own in every precision,
// logical replicas included, and is a no-op on CPUs.
TEST_F(GpuTrainingTest, GpusWarmUpOnAnotherThreadInEveryPrecision) {
  for (MatMulPrecision precision :
       {MatMulPrecision::kFp32, MatMulPrecision::kTf32,
        MatMulPrecision::kBf16}) {
    SetMatMulPrecision(precision);
    const absl::Status s =
        std::async(std::launch::async, [] {
          return trainer::WarmUpGpus({Device::Cuda(0), Device::Cuda(0)});
        }).get();
    EXPECT_TRUE(s.ok()) << s;
  }
  SetMatMulPrecision(MatMulPrecision::kFp32);
}

TEST_F(GpuTrainingTest, GpuWarmUpReportsAMissingGpu) {
  const absl::Status s =
      trainer::WarmUpGpus({Device::Cuda(0), Device::Cuda(cuda::DeviceCount())});
  EXPECT_FALSE(s.ok());
}

TEST(GpuWarmUpTest, NothingToDoOnCpus) {
  EXPECT_TRUE(trainer::WarmUpGpus({Device::Cpu(), Device::Cpu(1)}).ok());
}

}  // namespace
}  // namespace mirrortrain
