// The layer_normalization and embedding layers against Keras
// (scripts/golden/layers.py -> tests/golden/layers.txt): the ops in float64
// to float64 precision, and the layers (float32 variables) to float32's;
// plus their variables, initialisers and errors; and position_embedding
// (exact small cases: it is an add and a gather).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "models/layer_registry.h"
#include "models/model.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/normalization_ops.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

constexpr double kF64Tol = 1e-10;
constexpr double kF32Tol = 2e-5;

const std::map<std::string, Tensor>& Golden() {
  return testing::CachedGolden("layers.txt");
}
const Tensor& G(const std::string& name) { return Golden().at(name); }
Tensor F32(const Tensor& t) { return *ops::Cast(t, DType::kF32); }
Tensor F64(const Tensor& t) {
  return *ops::Cast(*t.To(Device::Cpu()), DType::kF64);
}

std::unique_ptr<Model> BuildOne(
    const std::string& type, const Shape& input,
    std::vector<std::pair<std::string, ParamValue>> values = {}) {
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(values));
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{input, {*spec}}, 1, Device::Cpu());
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

class LayerNormGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerNormGoldenTest, OpMatchesKerasInFloat64) {
  const std::string p = GetParam();
  ASSERT_FALSE(Golden().empty()) << "cannot load layers.txt";
  const Tensor x = G(p + "/x"), gamma = G(p + "/gamma"), beta = G(p + "/beta");
  GradientTape tape;
  for (const Tensor* t : {&x, &gamma, &beta}) tape.Watch(*t);
  absl::StatusOr<Tensor> y = ops::LayerNormalization(x, gamma, beta, 1e-3);
  ASSERT_TRUE(y.ok()) << y.status();
  GradientOptions options;
  options.output_gradient = G(p + "/upstream");
  auto grads = tape.Gradient(*y, {x, gamma, beta}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(*y, G(p + "/y"), kF64Tol, kF64Tol));
  EXPECT_TRUE(testing::AllClose(*(*grads)[0], G(p + "/dx"), kF64Tol, kF64Tol));
  EXPECT_TRUE(
      testing::AllClose(*(*grads)[1], G(p + "/dgamma"), kF64Tol, kF64Tol));
  EXPECT_TRUE(
      testing::AllClose(*(*grads)[2], G(p + "/dbeta"), kF64Tol, kF64Tol));
}

TEST_P(LayerNormGoldenTest, LayerMatchesKeras) {
  const std::string p = GetParam();
  ASSERT_FALSE(Golden().empty()) << "cannot load layers.txt";
  const Tensor x = F32(G(p + "/x"));
  const Shape example(x.shape().begin() + 1, x.shape().end());
  auto model = BuildOne("layer_normalization", example);
  const std::vector<Variable*>& vars = model->variables();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0]->name(), "layer_normalization/gamma");
  EXPECT_EQ(vars[1]->name(), "layer_normalization/beta");
  ASSERT_TRUE(vars[0]->Assign(F32(G(p + "/gamma"))).ok());
  ASSERT_TRUE(vars[1]->Assign(F32(G(p + "/beta"))).ok());
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = model->Call(x, {.training = true});
  ASSERT_TRUE(y.ok()) << y.status();
  GradientOptions options;
  options.output_gradient = F32(G(p + "/upstream"));
  auto grads =
      tape.Gradient(*y, {x, vars[0]->value(), vars[1]->value()}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(F64(*y), G(p + "/y"), kF32Tol, kF32Tol));
  EXPECT_TRUE(
      testing::AllClose(F64(*(*grads)[0]), G(p + "/dx"), kF32Tol, kF32Tol));
  EXPECT_TRUE(
      testing::AllClose(F64(*(*grads)[1]), G(p + "/dgamma"), kF32Tol, kF32Tol));
  EXPECT_TRUE(
      testing::AllClose(F64(*(*grads)[2]), G(p + "/dbeta"), kF32Tol, kF32Tol));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LayerNormGoldenTest,
                         ::testing::Values("ln3", "ln2"));

TEST(LayerNormalizationTest, WithoutCenterAndScaleHasNoVariables) {
  auto model = BuildOne("layer_normalization", {3, 2},
                        {{"center", false}, {"scale", false}});
  EXPECT_TRUE(model->variables().empty());
  // Pairs: each becomes (-a, a) with a = d / sqrt(d^2 + epsilon).
  auto y = model->Call(*ops::Reshape(F32(G("ln3/x")), {5, 3, 2}), {});
  ASSERT_TRUE(y.ok()) << y.status();
  const float* v = y->data<float>();
  for (int64_t i = 0; i < y->num_elements(); i += 2) {
    EXPECT_NEAR(v[i] + v[i + 1], 0.0, 1e-6);
  }
}

TEST(EmbeddingTest, GatherGradientWithRepeatedIdsMatchesKerasInFloat64) {
  ASSERT_FALSE(Golden().empty()) << "cannot load layers.txt";
  const Tensor table = G("emb/table");
  GradientTape tape;
  tape.Watch(table);
  absl::StatusOr<Tensor> y = ops::EmbeddingLookup(table, G("emb/ids"));
  ASSERT_TRUE(y.ok()) << y.status();
  GradientOptions options;
  options.output_gradient = G("emb/upstream");
  auto grads = tape.Gradient(*y, {table}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(*y, G("emb/y"), 0, 0));
  EXPECT_TRUE(
      testing::AllClose(*(*grads)[0], G("emb/dtable"), kF64Tol, kF64Tol));
}

TEST(EmbeddingTest, LayerOnFloatIdsMatchesKeras) {
  ASSERT_FALSE(Golden().empty()) << "cannot load layers.txt";
  auto model =
      BuildOne("embedding", {5},
               {{"input_dim", int64_t{7}}, {"output_dim", int64_t{3}}});
  const std::vector<Variable*>& vars = model->variables();
  ASSERT_EQ(vars.size(), 1u);
  EXPECT_EQ(vars[0]->name(), "embedding/embeddings");
  EXPECT_EQ(vars[0]->shape(), (Shape{7, 3}));
  ASSERT_TRUE(vars[0]->Assign(F32(G("emb/table"))).ok());
  GradientTape tape;
  const Tensor ids = F32(G("emb/ids"));  // As the text data source gives.
  absl::StatusOr<Tensor> y = model->Call(ids, {.training = true});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 5, 3}));
  GradientOptions options;
  options.output_gradient = F32(G("emb/upstream"));
  auto grads = tape.Gradient(*y, {vars[0]->value()}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(F64(*y), G("emb/y"), kF32Tol, kF32Tol));
  EXPECT_TRUE(
      testing::AllClose(F64(*(*grads)[0]), G("emb/dtable"), kF32Tol, kF32Tol));
}

TEST(EmbeddingTest, InitialisedUniformWithinKerasLimits) {
  auto model =
      BuildOne("embedding", {4},
               {{"input_dim", int64_t{50}}, {"output_dim", int64_t{40}}});
  const Tensor& t = model->variables()[0]->value();
  const float* v = t.data<float>();
  const auto [lo, hi] = std::minmax_element(v, v + t.num_elements());
  EXPECT_GE(*lo, -0.05f);
  EXPECT_LE(*hi, 0.05f);
  // 2000 draws: both ends of the range are reached closely.
  EXPECT_LT(*lo, -0.049f);
  EXPECT_GT(*hi, 0.049f);
}

TEST(EmbeddingTest, IdOutsideTheVocabularyIsAnErrorNamingTheLayer) {
  auto model =
      BuildOne("embedding", {2},
               {{"input_dim", int64_t{4}}, {"output_dim", int64_t{3}}});
  for (float bad : {4.0f, -1.0f}) {
    const Tensor ids = Tensor::FromVector<float>({0, 1, bad, 3}, {2, 2});
    absl::StatusOr<Tensor> y = model->Call(ids, {});
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(y.status().message().find("embedding"), std::string::npos)
        << y.status();
    EXPECT_NE(y.status().message().find("out of range"), std::string::npos)
        << y.status();
  }
}

TEST(EmbeddingTest, FloatIdWithoutIntegerValueIsAnErrorNamingTheLayer) {
  auto model =
      BuildOne("embedding", {2},
               {{"input_dim", int64_t{4}}, {"output_dim", int64_t{3}}});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), 1e30f}) {
    const Tensor ids = Tensor::FromVector<float>({0, 1, bad, 3}, {2, 2});
    absl::StatusOr<Tensor> y = model->Call(ids, {});
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(y.status().message().find("embedding: token ids"),
              std::string::npos)
        << y.status();
    EXPECT_NE(y.status().message().find("Cast: element 2 is"),
              std::string::npos)
        << y.status();
  }
}

// x + table[:T]; the table's gradient is the upstream summed over the
// batch in its first T rows and zero beyond.
TEST(PositionEmbeddingTest, AddsTheFirstRowsAndTheirGradient) {
  auto model =
      BuildOne("position_embedding", {3, 2}, {{"sequence_length", int64_t{5}}});
  const std::vector<Variable*>& vars = model->variables();
  ASSERT_EQ(vars.size(), 1u);
  EXPECT_EQ(vars[0]->name(), "position_embedding/embeddings");
  EXPECT_EQ(vars[0]->shape(), (Shape{5, 2}));
  const Tensor table =
      Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {5, 2});
  ASSERT_TRUE(vars[0]->Assign(table).ok());
  const Tensor x = Tensor::FromVector<float>(
      {0, 0, 1, 1, 2, 2, 10, 20, 30, 40, 50, 60}, {2, 3, 2});
  GradientTape tape;
  absl::StatusOr<Tensor> y = model->Call(x, {.training = true});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(
      *y,
      Tensor::FromVector<float>({1, 2, 4, 5, 7, 8, 11, 22, 33, 44, 55, 66},
                                {2, 3, 2}),
      0, 0));
  GradientOptions options;
  options.output_gradient = Tensor::FromVector<float>(
      {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}, {2, 3, 2});
  auto grads = tape.Gradient(*y, {vars[0]->value()}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(
      *(*grads)[0],
      Tensor::FromVector<float>({11, 22, 33, 44, 55, 66, 0, 0, 0, 0}, {5, 2}),
      0, 0));
}

TEST(PositionEmbeddingTest, SequenceLongerThanTheTableIsAConfigError) {
  absl::StatusOr<LayerSpec> spec =
      MakeLayerSpec("position_embedding", {{"sequence_length", int64_t{4}}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[1]";
  auto model = Model::Build(ModelDef{{6, 8}, {*spec}}, 1, Device::Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.layers[1]"), std::string::npos)
      << model.status();
  EXPECT_NE(model.status().message().find("sequence_length"), std::string::npos)
      << model.status();
}

// Keras' self-attention (scripts/golden/layers.py, mha*): the float32 layer
// with every variable assigned, forward and all gradients.
class AttentionGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionGoldenTest, LayerMatchesKeras) {
  const std::string p = GetParam();
  ASSERT_FALSE(Golden().empty()) << "cannot load layers.txt";
  auto model = BuildOne("multi_head_attention", {4, 5},
                        {{"num_heads", int64_t{2}},
                         {"key_dim", int64_t{3}},
                         {"causal", p == "mha_causal"}});
  const std::vector<Variable*>& vars = model->variables();
  const std::vector<std::string> names = {"query/kernel",
                                          "query/bias",
                                          "key/kernel",
                                          "key/bias",
                                          "value/kernel",
                                          "value/bias",
                                          "attention_output/kernel",
                                          "attention_output/bias"};
  ASSERT_EQ(vars.size(), names.size());
  std::vector<Tensor> watched = {F32(G(p + "/x"))};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(vars[i]->name(), "multi_head_attention/" + names[i]);
    const Tensor value = F32(G(p + "/" + names[i]));
    EXPECT_EQ(vars[i]->shape(), value.shape()) << names[i];
    ASSERT_TRUE(vars[i]->Assign(value).ok()) << names[i];
    watched.push_back(vars[i]->value());
  }
  GradientTape tape;
  for (const Tensor& t : watched) tape.Watch(t);
  absl::StatusOr<Tensor> y = model->Call(watched[0], {.training = true});
  ASSERT_TRUE(y.ok()) << y.status();
  GradientOptions options;
  options.output_gradient = F32(G(p + "/upstream"));
  auto grads = tape.Gradient(*y, watched, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(F64(*y), G(p + "/y"), kF32Tol, kF32Tol));
  EXPECT_TRUE(
      testing::AllClose(F64(*(*grads)[0]), G(p + "/dx"), kF32Tol, kF32Tol));
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string golden = names[i].substr(0, names[i].find('/'));
    EXPECT_TRUE(testing::AllClose(
        F64(*(*grads)[i + 1]),
        G(p + "/d" + golden + names[i].substr(names[i].find('/'))), kF32Tol,
        kF32Tol))
        << names[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, AttentionGoldenTest,
                         ::testing::Values("mha", "mha_causal"));

// Keras 3.15 (EinsumDense) draws each kernel from glorot_uniform with the
// einsum's fans: query/key/value [D, heads, key_dim] with fan_in D and
// fan_out heads * key_dim, attention_output the other way round. Width 256,
// 4 heads of 64: every kernel's limit is sqrt(6 / 512) = 0.108 (the shape's
// receptive-field fans would give 0.0186 and 0.0685), as Keras's own layer
// measures.
TEST(AttentionTest, KernelsInitialisedWithTheEinsumFans) {
  auto model = BuildOne("multi_head_attention", {2, 256},
                        {{"num_heads", int64_t{4}}, {"key_dim", int64_t{64}}});
  const double limit = std::sqrt(6.0 / (256 + 4 * 64));
  int kernels = 0;
  for (Variable* v : model->variables()) {
    if (!absl::EndsWith(v->name(), "/kernel")) continue;
    const Tensor& t = v->value();
    const float* x = t.data<float>();
    const int64_t n = t.num_elements();
    double sum_sq = 0, top = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum_sq += double{x[i]} * x[i];
      top = std::max(top, std::abs(double{x[i]}));
    }
    // 65536 draws each: the range's ends are reached, and the deviation is
    // the uniform's limit / sqrt(3) within 1%.
    EXPECT_LE(top, limit) << v->name();
    EXPECT_GT(top, 0.999 * limit) << v->name();
    EXPECT_NEAR(std::sqrt(sum_sq / n), limit / std::sqrt(3.0),
                0.01 * limit / std::sqrt(3.0))
        << v->name();
    ++kernels;
  }
  EXPECT_EQ(kernels, 4);
}

TEST(AttentionTest, CausalOutputIgnoresLaterPositions) {
  auto model = BuildOne("multi_head_attention", {6, 4},
                        {{"num_heads", int64_t{2}}, {"causal", true}});
  const Tensor x = testing::RandomTensor({2, 6, 4}, 5, DType::kF32);
  Tensor changed = testing::RandomTensor({2, 6, 4}, 5, DType::kF32);
  float* c = changed.data<float>();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 4 * 4; i < 6 * 4; ++i) c[b * 24 + i] += 1.0f;
  }
  auto y = model->Call(x, {});
  auto y_changed = model->Call(changed, {});
  ASSERT_TRUE(y.ok() && y_changed.ok());
  // Positions 0..3 see only positions 0..3, which are unchanged.
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 4 * 4; ++i) {
      EXPECT_EQ(y->data<float>()[b * 24 + i],
                y_changed->data<float>()[b * 24 + i]);
    }
    EXPECT_NE(y->data<float>()[b * 24 + 5 * 4],
              y_changed->data<float>()[b * 24 + 5 * 4]);
  }
}

TEST(AttentionTest, HeadsNotDividingTheWidthIsAConfigError) {
  absl::StatusOr<LayerSpec> spec =
      MakeLayerSpec("multi_head_attention", {{"num_heads", int64_t{3}}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[2]";
  auto model = Model::Build(ModelDef{{6, 8}, {*spec}}, 1, Device::Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.layers[2]"), std::string::npos)
      << model.status();
  EXPECT_NE(model.status().message().find("num_heads: 3 does not divide"),
            std::string::npos)
      << model.status();
}

TEST(DenseTest, AppliesToTheLastAxisOfSequences) {
  auto model = BuildOne("dense", {3, 4}, {{"units", int64_t{2}}});
  const Tensor x = testing::RandomTensor({2, 3, 4}, 9, DType::kF32);
  auto y = model->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 3, 2}));
  // The same seed gives the same kernel to a model on [batch, 4] inputs.
  auto rows = BuildOne("dense", {4}, {{"units", int64_t{2}}});
  auto flat = rows->Call(*ops::Reshape(x, {6, 4}), {});
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_TRUE(testing::AllClose(*ops::Reshape(*y, {6, 2}), *flat, 0, 0));
}

// The recurrent layers start as Keras's: the LSTM's forget-gate bias ones
// (unit_forget_bias), the rest its bias initializer's; the GRU's bias [2,
// 3 units] with reset_after, [3 units] without; recurrent kernels with
// orthonormal rows (orthogonal, [units, gates * units]).
TEST(RecurrentLayersTest, StartAsKerasDoes) {
  constexpr int64_t kUnits = 3;
  auto values = [](Model& m, size_t i) {
    return m.variables()[i]->value().ToVector<float>();
  };
  std::unique_ptr<Model> lstm = BuildOne("lstm", {5, 2}, {{"units", kUnits}});
  ASSERT_EQ(lstm->variables().size(), 3u);
  EXPECT_EQ(lstm->variables()[2]->name(), "lstm/lstm_cell/bias");
  const std::vector<float> bias = values(*lstm, 2);
  ASSERT_EQ(bias.size(), 4u * kUnits);
  for (int64_t i = 0; i < 4 * kUnits; ++i) {
    EXPECT_EQ(bias[i], i >= kUnits && i < 2 * kUnits ? 1.0f : 0.0f) << i;
  }
  const std::vector<float> recurrent = values(*lstm, 1);
  for (int64_t a = 0; a < kUnits; ++a) {
    for (int64_t b = 0; b < kUnits; ++b) {
      double dot = 0;
      for (int64_t k = 0; k < 4 * kUnits; ++k) {
        dot += recurrent[a * 4 * kUnits + k] * recurrent[b * 4 * kUnits + k];
      }
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6);
    }
  }
  // A bias initializer of ones: ones everywhere; without unit_forget_bias,
  // zeros everywhere.
  for (const auto& [init, forget, want] :
       {std::tuple<const char*, bool, float>{"ones", true, 1.0f},
        {"zeros", false, 0.0f}}) {
    std::unique_ptr<Model> m = BuildOne("lstm", {5, 2},
                                        {{"units", kUnits},
                                         {"bias_initializer", init},
                                         {"unit_forget_bias", forget}});
    for (const float v : values(*m, 2)) EXPECT_EQ(v, want) << init;
  }
  std::unique_ptr<Model> gru = BuildOne("gru", {5, 2}, {{"units", kUnits}});
  EXPECT_EQ(gru->variables()[2]->name(), "gru/gru_cell/bias");
  EXPECT_EQ(gru->variables()[2]->shape(), (Shape{2, 3 * kUnits}));
  EXPECT_EQ(gru->variables()[1]->shape(), (Shape{kUnits, 3 * kUnits}));
  std::unique_ptr<Model> before =
      BuildOne("gru", {5, 2}, {{"units", kUnits}, {"reset_after", false}});
  EXPECT_EQ(before->variables()[2]->shape(), (Shape{3 * kUnits}));
  // Orthogonal needs a matrix: not a bias's initializer.
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(
      "lstm", {{"units", kUnits}, {"bias_initializer", "orthogonal"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(
      CheckParams(LayerRegistry::Global().Find("lstm")->params, spec->params)
          .ok());
}

// Bidirectional wraps one lstm or gru, copies named after it as Keras
// names them; anything else is refused, naming the key.
TEST(RecurrentLayersTest, BidirectionalWrapsOneRecurrentLayer) {
  auto spec_of = [](const std::string& type,
                    std::vector<std::pair<std::string, ParamValue>> values) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(values));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  };
  LayerSpec bi = spec_of("bidirectional", {{"merge_mode", "ave"}});
  bi.path = "model.layers[0]";
  bi.layers = {spec_of("gru", {{"units", int64_t{2}}})};
  bi.layers[0].path = "model.layers[0].layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{6, 3}, {bi}}, 1, Device::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->output_shape(), (Shape{2}));  // ave: not widened.
  std::vector<std::string> names;
  for (const Variable* v : (*model)->variables()) names.push_back(v->name());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "bidirectional/forward_gru/gru_cell/kernel",
                       "bidirectional/forward_gru/gru_cell/recurrent_kernel",
                       "bidirectional/forward_gru/gru_cell/bias",
                       "bidirectional/backward_gru/gru_cell/kernel",
                       "bidirectional/backward_gru/gru_cell/recurrent_kernel",
                       "bidirectional/backward_gru/gru_cell/bias"}));
  bi.layers = {spec_of("dense", {{"units", int64_t{2}}})};
  model = Model::Build(ModelDef{{6, 3}, {bi}}, 1, Device::Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(
      absl::StrContains(model.status().message(),
                        "layers: takes one lstm, gru or simple_rnn layer"))
      << model.status();
}

// A recurrent layer's `activation` is its cell's, never the model's output
// activation: a last lstm (or bidirectional gru) with a sigmoid cell
// builds under every loss and computes the same outputs under each (not
// stripped to its logits under binary_crossentropy, not refused as another
// loss's activation under the categorical one).
TEST(RecurrentLayersTest, TheCellActivationIsNotTheOutputActivation) {
  absl::StatusOr<LayerSpec> lstm =
      MakeLayerSpec("lstm", {{"units", int64_t{1}}, {"activation", "sigmoid"}});
  ASSERT_TRUE(lstm.ok()) << lstm.status();
  lstm->path = "model.layers[0]";
  absl::StatusOr<LayerSpec> bi = MakeLayerSpec("bidirectional", {});
  ASSERT_TRUE(bi.ok()) << bi.status();
  bi->path = "model.layers[0]";
  absl::StatusOr<LayerSpec> gru =
      MakeLayerSpec("gru", {{"units", int64_t{1}}, {"activation", "sigmoid"}});
  ASSERT_TRUE(gru.ok()) << gru.status();
  gru->path = "model.layers[0].layers[0]";
  bi->layers = {*gru};
  const Tensor x = testing::RandomTensor({2, 5, 3}, 3, DType::kF32);
  for (const LayerSpec& last : {*lstm, *bi}) {
    SCOPED_TRACE(last.type);
    std::vector<Tensor> outputs;
    for (const char* loss : {"binary_crossentropy", "mean_squared_error",
                             "sparse_categorical_crossentropy"}) {
      ModelDef def{{5, 3}, {last}};
      def.loss = loss;
      absl::StatusOr<std::unique_ptr<Model>> model =
          Model::Build(def, 4, Device::Cpu());
      ASSERT_TRUE(model.ok()) << loss << ": " << model.status();
      absl::StatusOr<Tensor> y = (*model)->Call(x, {});
      ASSERT_TRUE(y.ok()) << y.status();
      outputs.push_back(*y);
    }
    EXPECT_TRUE(testing::SameBits(outputs[0], outputs[1]));
    EXPECT_TRUE(testing::SameBits(outputs[0], outputs[2]));
  }
}

// Bidirectional's merges, from its concat of [forward, backward] (the same
// seed, the same weights): sum, mul and ave of the two halves; a wrapped
// go_backwards or repeat is refused; a wrapped layer's own name names the
// copies (one already starting forward_ or backward_ kept for that copy, as
// Keras keeps it).
TEST(RecurrentLayersTest, BidirectionalMergesAndNames) {
  auto build = [](std::vector<std::pair<std::string, ParamValue>> outer,
                  std::vector<std::pair<std::string, ParamValue>> inner,
                  std::string inner_name = "",
                  int64_t repeat =
                      1) -> absl::StatusOr<std::unique_ptr<Model>> {
    absl::StatusOr<LayerSpec> bi = MakeLayerSpec("bidirectional", outer);
    absl::StatusOr<LayerSpec> lstm = MakeLayerSpec("lstm", inner);
    if (!bi.ok()) return bi.status();
    if (!lstm.ok()) return lstm.status();
    bi->path = "model.layers[0]";
    lstm->path = "model.layers[0].layers[0]";
    lstm->name = inner_name;
    lstm->repeat = repeat;
    bi->layers = {*lstm};
    return Model::Build(ModelDef{{4, 3}, {*bi}}, 9, Device::Cpu());
  };
  const std::vector<std::pair<std::string, ParamValue>> units = {
      {"units", int64_t{2}}, {"return_sequences", true}};
  const Tensor x = testing::RandomTensor({2, 4, 3}, 5, DType::kF32);
  absl::StatusOr<std::unique_ptr<Model>> concat = build({}, units);
  ASSERT_TRUE(concat.ok()) << concat.status();
  const Tensor both = *(*concat)->Call(x, {});
  ASSERT_EQ(both.shape(), (Shape{2, 4, 4}));
  const std::vector<float> v = both.ToVector<float>();
  for (const char* merge : {"sum", "mul", "ave"}) {
    SCOPED_TRACE(merge);
    absl::StatusOr<std::unique_ptr<Model>> m =
        build({{"merge_mode", merge}}, units);
    ASSERT_TRUE(m.ok()) << m.status();
    const std::vector<float> got = (*m)->Call(x, {})->ToVector<float>();
    ASSERT_EQ(got.size(), v.size() / 2);
    for (size_t i = 0; i < got.size(); ++i) {
      const float f = v[i / 2 * 4 + i % 2], b = v[i / 2 * 4 + 2 + i % 2];
      const float want = std::string(merge) == "sum"   ? f + b
                         : std::string(merge) == "mul" ? f * b
                                                       : (f + b) * 0.5f;
      EXPECT_EQ(got[i], want) << i;
    }
  }
  std::vector<std::pair<std::string, ParamValue>> backwards = units;
  backwards.push_back({"go_backwards", true});
  absl::StatusOr<std::unique_ptr<Model>> refused = build({}, backwards);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(),
                        "layers[0].go_backwards: the bidirectional runs"))
      << refused.status();
  refused = build({}, units, "", 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "layers[0].repeat"))
      << refused.status();
  for (const auto& [name, forward, backward] :
       {std::tuple<std::string, std::string, std::string>{
            "enc", "bidirectional/forward_enc", "bidirectional/backward_enc"},
        {"forward_enc", "bidirectional/forward_enc",
         "bidirectional/backward_forward_enc"},
        {"backward_enc", "bidirectional/forward_backward_enc",
         "bidirectional/backward_enc"}}) {
    absl::StatusOr<std::unique_ptr<Model>> m = build({}, units, name);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->variables()[0]->name(), forward + "/lstm_cell/kernel");
    EXPECT_EQ((*m)->variables()[3]->name(), backward + "/lstm_cell/kernel");
  }
}

// time_distributed wraps one layer, over inputs with a steps axis; its
// layer's name is Keras's `<name>/<layer>`.
TEST(TimeDistributedTest, WrapsOneLayerOverSteps) {
  auto build = [](std::vector<std::string> types,
                  Shape input) -> absl::StatusOr<std::unique_ptr<Model>> {
    absl::StatusOr<LayerSpec> td = MakeLayerSpec("time_distributed", {});
    if (!td.ok()) return td.status();
    td->path = "model.layers[0]";
    for (const std::string& type : types) {
      absl::StatusOr<LayerSpec> inner =
          type == "dense" ? MakeLayerSpec(type, {{"units", int64_t{2}}})
                          : MakeLayerSpec(type, {});
      if (!inner.ok()) return inner.status();
      inner->path = "model.layers[0].layers[0]";
      td->layers.push_back(*inner);
    }
    return Model::Build(ModelDef{std::move(input), {*td}}, 1, Device::Cpu());
  };
  absl::StatusOr<std::unique_ptr<Model>> m = build({"dense"}, {4, 3});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->variables()[0]->name(), "time_distributed/dense/kernel");
  const Tensor x = testing::RandomTensor({2, 4, 3}, 1, DType::kF32);
  absl::StatusOr<Tensor> y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 4, 2}));
  EXPECT_THAT(
      std::string(build({"dense", "flatten"}, {4, 3}).status().message()),
      ::testing::HasSubstr("layers: takes one layer"));
  EXPECT_THAT(std::string(build({"dense"}, {3}).status().message()),
              ::testing::HasSubstr("expects [batch, steps, ...] input"));
  // A dropout inside draws another mask per step, and a replica's shard
  // (rows 2..3 of 4) the whole batch's; so does a micro-batch of an
  // accumulated update (rows 4..7 of 8 as a batch of 4 of its own).
  absl::StatusOr<LayerSpec> td = MakeLayerSpec("time_distributed", {});
  absl::StatusOr<LayerSpec> drop = MakeLayerSpec("dropout", {{"rate", 0.5}});
  ASSERT_TRUE(td.ok() && drop.ok());
  td->path = "model.layers[0]";
  drop->path = "model.layers[0].layers[0]";
  td->layers = {*drop};
  m = Model::Build(ModelDef{{3, 16}, {*td}}, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  const Tensor ones = Tensor::HostFull(DType::kF32, {4, 3, 16}, 1.0);
  absl::StatusOr<Tensor> whole = (*m)->Call(ones, {true, 77, 0, 4});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<float> v = whole->ToVector<float>();
  EXPECT_NE(std::vector<float>(v.begin(), v.begin() + 16),
            std::vector<float>(v.begin() + 16, v.begin() + 32));
  absl::StatusOr<Tensor> shard =
      (*m)->Call(*ones.SliceRows(2, 2), {true, 77, 2, 4});
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_TRUE(testing::SameBits(*shard, *whole->SliceRows(2, 2)));
  const Tensor eight = Tensor::HostFull(DType::kF32, {8, 3, 16}, 1.0);
  absl::StatusOr<Tensor> all = (*m)->Call(eight, {true, 77, 0, 8});
  absl::StatusOr<Tensor> micro =
      (*m)->Call(*eight.SliceRows(4, 4), {true, 77, 4, 4});
  ASSERT_TRUE(all.ok() && micro.ok());
  EXPECT_TRUE(testing::SameBits(*micro, *all->SliceRows(4, 4)));
}

}  // namespace
}  // namespace mirrortrain::models
