// The recurrent layers' dropout and recurrent_dropout (Keras's, while
// training): one mask per sequence, the same every step (variational
// dropout), 0 or 1 / (1 - rate); none at inference; a replica's shard
// draws the whole batch's masks. Keras's own random draws cannot be
// matched: its cells are handed this project's masks instead
// (scripts/golden/recurrent_dropout.py), and the outputs and gradients
// compared, which checks where each mask goes (per gate under
// recurrent_dropout).
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/layer_registry.h"
#include "models/model.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tests/models/one_layer_model.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

using Values = std::vector<std::pair<std::string, ParamValue>>;

std::unique_ptr<Model> Build(const std::string& type, const Shape& input,
                             Values values) {
  return testing::OneLayerModel(type, std::move(values), input);
}

void Set(Variable* v, const Tensor& value) {
  ASSERT_TRUE(v->Assign(*ops::Cast(value, DType::kF32)).ok()) << v->name();
}

Tensor Identity(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * n + i)] = 1;
  return Tensor::FromVector<double>(v, {n, n});
}

const ForwardContext kTraining{.training = true, .step_seed = 17};

struct KerasCase {
  std::string name, type;
  Values values;
};

// The golden's cases: 4 units, every step, dropout 0.3 and, where named
// both, recurrent_dropout 0.4.
std::vector<KerasCase> KerasCases() {
  const Values input = {
      {"units", int64_t{4}}, {"return_sequences", true}, {"dropout", 0.3}};
  Values both = input;
  both.push_back({"recurrent_dropout", 0.4});
  Values backwards = both;
  backwards.push_back({"go_backwards", true});
  Values before = both;
  before.push_back({"reset_after", false});
  return {{"lstm_input", "lstm", input},         {"lstm_both", "lstm", both},
          {"lstm_backwards", "lstm", backwards}, {"gru_both", "gru", both},
          {"gru_before", "gru", before},         {"gru_input", "gru", input},
          {"srnn_both", "simple_rnn", both}};
}

// The case on `device` against Keras's values and gradients, with the
// step seed given on the host or as a device tensor (a replayed CUDA
// graph's).
void ExpectKerasValues(const KerasCase& c, Device device, bool seed_tensor) {
  const auto& golden = testing::CachedGolden("recurrent_dropout.txt");
  ASSERT_FALSE(golden.empty()) << "cannot load recurrent_dropout.txt";
  auto g = [&](const std::string& name) -> Tensor {
    return *golden.at(c.name + "/" + name).To(device);
  };
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(c.type, c.values);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{6, 3}, {*spec}}, 3, device);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<Tensor> sources = {g("x")};
  for (Variable* v : (*model)->variables()) {
    ASSERT_TRUE(v->Assign(g(v->name())).ok()) << v->name();
    sources.push_back(v->value());
  }
  ForwardContext ctx = kTraining;
  ctx.global_batch = 5;
  if (seed_tensor) {
    ctx.step_seed_tensor = *Tensor::FromVector<int64_t>({17}, {1}).To(device);
    ctx.step_seed = 0;  // Not read beside the tensor.
  }
  GradientTape tape;
  tape.Watch(sources[0]);
  absl::StatusOr<Tensor> y = (*model)->Call(sources[0], ctx);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y->To(Device::Cpu()), golden.at(c.name + "/y"),
                                1e-5, 1e-6));
  GradientOptions options;
  options.output_gradient = g("up");
  auto grads = tape.Gradient(*y, sources, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(*(*grads)[0]->To(Device::Cpu()),
                                golden.at(c.name + "/grad_x"), 1e-5, 1e-6));
  for (size_t i = 1; i < sources.size(); ++i) {
    const std::string name = (*model)->variables()[i - 1]->name();
    EXPECT_TRUE(testing::AllClose(*(*grads)[i]->To(Device::Cpu()),
                                  golden.at(c.name + "/grad/" + name), 1e-5,
                                  1e-6))
        << name;
  }
}

void PrintTo(const KerasCase& c, std::ostream* os) { *os << c.name; }

class KerasMasksTest : public ::testing::TestWithParam<KerasCase> {};

TEST_P(KerasMasksTest, KerasGivenTheseMasksComputesTheSame) {
  ExpectKerasValues(GetParam(), Device::Cpu(), false);
}

INSTANTIATE_TEST_SUITE_P(Cases, KerasMasksTest,
                         ::testing::ValuesIn(KerasCases()),
                         [](const ::testing::TestParamInfo<KerasCase>& info) {
                           return info.param.name;
                         });

class RecurrentDropoutGpuTest : public testing::CudaTest {};

// On gpu:0 the same masks (from the host's step seed and from the seed as a
// device tensor) and values, within float32's tolerance.
TEST_F(RecurrentDropoutGpuTest, KerasGivenTheseMasksComputesTheSame) {
  for (const KerasCase& c : KerasCases()) {
    SCOPED_TRACE(c.name);
    ExpectKerasValues(c, Device::Cuda(0), false);
    ExpectKerasValues(c, Device::Cuda(0), true);
  }
}

TEST(RecurrentDropoutTest, InferenceIgnoresIt) {
  const Tensor x = testing::RandomTensor({4, 5, 3}, 1, DType::kF32);
  for (const char* type : {"lstm", "gru", "simple_rnn"}) {
    SCOPED_TRACE(type);
    std::unique_ptr<Model> plain = Build(type, {5, 3}, {{"units", int64_t{4}}});
    std::unique_ptr<Model> dropping = Build(
        type, {5, 3},
        {{"units", int64_t{4}}, {"dropout", 0.5}, {"recurrent_dropout", 0.5}});
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(dropping, nullptr);
    absl::StatusOr<Tensor> want = plain->Call(x, {});
    absl::StatusOr<Tensor> got = dropping->Call(x, {});
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_TRUE(testing::AllClose(*got, *want, 0, 0));
    // Training changes it.
    absl::StatusOr<Tensor> trained = dropping->Call(x, kTraining);
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_FALSE(testing::AllClose(*trained, *want, 1e-3, 1e-3));
  }
}

// A linear SimpleRNN reading x through an identity kernel, without
// recurrence: every step's output is x times the input mask, the same mask
// at every step, of 0 and 1 / (1 - 0.5).
TEST(RecurrentDropoutTest, TheInputMaskIsTheSameEveryStep) {
  std::unique_ptr<Model> model = Build("simple_rnn", {6, 4},
                                       {{"units", int64_t{4}},
                                        {"activation", std::string("linear")},
                                        {"return_sequences", true},
                                        {"dropout", 0.5}});
  ASSERT_NE(model, nullptr);
  Set(model->variables()[0], Identity(4));
  Set(model->variables()[1], *Tensor::Zeros(DType::kF64, {4, 4}));
  const Tensor ones = Tensor::HostFull(DType::kF32, {64, 6, 4}, 1.0);
  absl::StatusOr<Tensor> y = model->Call(ones, kTraining);
  ASSERT_TRUE(y.ok()) << y.status();
  int zeros = 0;
  for (int64_t b = 0; b < 64; ++b) {
    for (int64_t f = 0; f < 4; ++f) {
      const double first = y->ScalarAt(b * 24 + f);
      EXPECT_TRUE(first == 0 || first == 2) << first;
      zeros += first == 0;
      for (int64_t t = 1; t < 6; ++t) {
        EXPECT_EQ(y->ScalarAt(b * 24 + t * 4 + f), first) << b << " " << t;
      }
    }
  }
  EXPECT_GT(zeros, 256 * 3 / 10);
  EXPECT_LT(zeros, 256 * 7 / 10);
}

// A linear SimpleRNN of input 1 (its bias) and an identity recurrent
// kernel: h1 = 1, h_t = 1 + r h_{t-1} with r h's recurrent mask, 0 or 2,
// the same at every step.
TEST(RecurrentDropoutTest, TheRecurrentMaskIsTheSameEveryStep) {
  std::unique_ptr<Model> model = Build("simple_rnn", {4, 2},
                                       {{"units", int64_t{3}},
                                        {"activation", std::string("linear")},
                                        {"return_sequences", true},
                                        {"recurrent_dropout", 0.5}});
  ASSERT_NE(model, nullptr);
  Set(model->variables()[0], *Tensor::Zeros(DType::kF64, {2, 3}));
  Set(model->variables()[1], Identity(3));
  Set(model->variables()[2], Tensor::HostFull(DType::kF64, {3}, 1.0));
  const Tensor x = testing::RandomTensor({32, 4, 2}, 2, DType::kF32);
  absl::StatusOr<Tensor> y = model->Call(x, kTraining);
  ASSERT_TRUE(y.ok()) << y.status();
  int dropped = 0;
  for (int64_t b = 0; b < 32; ++b) {
    for (int64_t u = 0; u < 3; ++u) {
      auto h = [&](int64_t t) { return y->ScalarAt(b * 12 + t * 3 + u); };
      EXPECT_EQ(h(0), 1.0);
      const double r = h(1) - 1;
      EXPECT_TRUE(r == 0 || r == 2) << r;
      dropped += r == 0;
      EXPECT_EQ(h(2), 1 + r * h(1));
      EXPECT_EQ(h(3), 1 + r * h(2));
    }
  }
  EXPECT_GT(dropped, 96 * 3 / 10);
  EXPECT_LT(dropped, 96 * 7 / 10);
}

// Two shards of a batch, each told its first row, draw the whole batch's
// masks (per gate too, under recurrent dropout; GRU's reset-before path
// takes the h gate's mask apart).
TEST(RecurrentDropoutTest, ShardsDrawTheWholeBatchsMasks) {
  const Tensor x = testing::RandomTensor({6, 5, 3}, 4, DType::kF32);
  for (const auto& [type, extra] : std::vector<std::pair<std::string, Values>>{
           {"lstm", {}},
           {"gru", {}},
           {"gru", {{"reset_after", false}}},
           {"simple_rnn", {}}}) {
    SCOPED_TRACE(type);
    for (double recurrent : {0.0, 0.4}) {
      Values values = {{"units", int64_t{4}},
                       {"return_sequences", true},
                       {"dropout", 0.3},
                       {"recurrent_dropout", recurrent}};
      values.insert(values.end(), extra.begin(), extra.end());
      std::unique_ptr<Model> model = Build(type, {5, 3}, values);
      ASSERT_NE(model, nullptr);
      ForwardContext whole = kTraining;
      whole.global_batch = 6;
      absl::StatusOr<Tensor> want = model->Call(x, whole);
      ASSERT_TRUE(want.ok()) << want.status();
      for (int64_t first : {0, 2}) {
        ForwardContext shard = whole;
        shard.row_offset = first;
        const int64_t rows = first == 0 ? 2 : 4;
        absl::StatusOr<Tensor> part =
            model->Call(*x.SliceRows(first, rows), shard);
        ASSERT_TRUE(part.ok()) << part.status();
        EXPECT_TRUE(
            testing::AllClose(*part, *want->SliceRows(first, rows), 1e-6, 1e-7))
            << "rows from " << first << ", recurrent " << recurrent;
      }
    }
  }
}

}  // namespace
}  // namespace mirrortrain::models
