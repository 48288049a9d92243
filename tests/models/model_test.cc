// Models built from layer specs: Keras names, containers, repeat, presets
// against their hand-written expansion, shape errors naming the path.
#include "models/model.h"

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/containers.h"
#include "models/presets.h"
#include "tensor/bfloat16.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"
#include "tests/tensor/cuda_test_util.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

using ::testing::HasSubstr;
using Values = std::vector<std::pair<std::string, ParamValue>>;

LayerSpec Spec(const std::string& type, Values values = {},
               std::vector<LayerSpec> layers = {}) {
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(values));
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->layers = std::move(layers);
  spec->path = "model.layers[?]";
  return *spec;
}

std::vector<std::string> Names(const Model& m) {
  std::vector<std::string> out;
  for (Variable* v : m.variables()) out.push_back(v->name());
  return out;
}

// Variables are saved under their layers' names: two layers of one name
// (given twice, or given and then made by the Keras auto-naming) are a
// config error naming both paths, before anything trains.
TEST(ModelTest, LayerNamesAreUnique) {
  auto build = [](LayerSpec a, LayerSpec b) {
    a.path = "model.layers[0]";
    b.path = "model.layers[1]";
    LayerBuilder builder(1, Device::Cpu());
    return builder.BuildSequence({a, b}, {2, 3}).status();
  };
  auto named = [](const std::string& name) {
    LayerSpec s = Spec("dense", {{"units", int64_t{3}}});
    s.name = name;
    return s;
  };
  EXPECT_EQ(build(named("x"), named("x")).message(),
            "model.layers[1].name: the layer name 'x' is taken by "
            "model.layers[0]");
  EXPECT_EQ(build(named("dense"), named("")).message(),
            "model.layers[1]: the layer name 'dense' is taken by "
            "model.layers[0] (give this one a name)");
  EXPECT_TRUE(build(named("x"), named("")).ok());
  // A repeated entry cannot be named, nor a layer in a repeated
  // container: the other one is to be renamed.
  LayerSpec repeated = named("");
  repeated.repeat = 2;
  EXPECT_EQ(build(named("dense_1"), repeated).message(),
            "model.layers[1]: the layer name 'dense_1' is taken by "
            "model.layers[0] (rename model.layers[0])");
  LayerSpec inside = named("");
  inside.path = "model.layers[1].layers[0]";
  LayerSpec repeated_block = Spec("sequential", {}, {inside});
  repeated_block.repeat = 2;
  EXPECT_EQ(build(named("dense_1"), repeated_block).message(),
            "model.layers[1].layers[0]: the layer name 'dense_1' is taken by "
            "model.layers[0] (rename model.layers[0])");
  // A named layer takes no auto-name number (Keras 3): the next unnamed
  // dense is `dense`, not `dense_1`.
  EXPECT_TRUE(build(named("dense_1"), named("")).ok());
  // Inside a container the path is the inner spec's, as it is.
  LayerSpec inner = named("x");
  inner.path = "model.layers[1].layers[0]";
  LayerSpec block = Spec("sequential", {}, {inner});
  block.path = "model.layers[1]";
  LayerBuilder builder(1, Device::Cpu());
  LayerSpec first = named("x");
  first.path = "model.layers[0]";
  EXPECT_EQ(builder.BuildSequence({first, block}, {2, 3}).status().message(),
            "model.layers[1].layers[0].name: the layer name 'x' is taken by "
            "model.layers[0]");
  // Distinct layer names whose variables' names meet: attention 'm' has
  // m/query/kernel, and so would a dense named 'm/query'. Found when the
  // model is built, not when the first checkpoint is saved.
  LayerSpec attention = Spec("multi_head_attention", {{"num_heads", int64_t{1}},
                                                      {"key_dim", int64_t{2}}});
  attention.name = "m";
  attention.path = "model.layers[0]";
  LayerSpec query = named("m/query");
  query.path = "model.layers[1]";
  LayerBuilder tokens(1, Device::Cpu());
  EXPECT_EQ(
      tokens.BuildSequence({attention, query}, {1, 4, 3}).status().message(),
      "model.layers[1].name: its variable 'm/query/kernel' has the name "
      "of a variable of model.layers[0] (layer names that extend one "
      "another collide: rename one)");
  // A container lists its children's variables again: no collision.
  LayerSpec child = named("y");
  child.path = "model.layers[1].layers[0]";
  LayerSpec holder = Spec("sequential", {}, {child});
  EXPECT_TRUE(build(named("x"), holder).ok());
}

// Keras 3 numbers only the layers it names: [foo, dense, dense_1] for a
// named dense and two unnamed ones.
// A softmax on the output layer (Keras's activation='softmax' with
// from_logits=False), also as its own activation layer inside a container:
// the model's variables, and its Call (the logits the loss takes), are the
// linear model's bit for bit; Probabilities is the softmax of them over the
// last axis (per position of [batch, 4, 5], as Keras's Dense applies it),
// rows summing to 1.
TEST(ModelTest, ASoftmaxOutputLayerLeavesTheLogitsToTheLoss) {
  auto build = [](std::vector<LayerSpec> layers) {
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Build(ModelDef{{4, 3}, std::move(layers)}, 7, Device::Cpu());
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  };
  auto dense = [](const std::string& activation) {
    return Spec("dense", {{"units", int64_t{5}}, {"activation", activation}});
  };
  const Tensor x = testing::RandomTensor({2, 4, 3}, 3, DType::kF32);
  std::unique_ptr<Model> linear = build({dense("linear")});
  ASSERT_EQ(linear->output_activation(), "");
  for (std::vector<LayerSpec> layers :
       {std::vector<LayerSpec>{dense("softmax")},
        std::vector<LayerSpec>{Spec(
            "sequential", {},
            {dense("linear"),
             Spec("activation", {{"activation", std::string("softmax")}})})}}) {
    std::unique_ptr<Model> m = build(std::move(layers));
    EXPECT_EQ(m->output_activation(), "softmax");
    ASSERT_EQ(Names(*m), Names(*linear));
    for (size_t i = 0; i < m->variables().size(); ++i) {
      EXPECT_TRUE(testing::SameBits(m->variables()[i]->value(),
                                    linear->variables()[i]->value()));
    }
    absl::StatusOr<Tensor> logits = m->Call(x, {});
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(testing::SameBits(*logits, *linear->Call(x, {})));
    absl::StatusOr<Tensor> p = m->Probabilities(*logits);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(testing::SameBits(*p, *ops::Softmax(*logits)));
    for (int64_t row = 0; row < 8; ++row) {
      double sum = 0;
      for (int64_t j = 0; j < 5; ++j) sum += p->data<float>()[row * 5 + j];
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
  // A layer behind the softmax would see probabilities where the body
  // makes logits: refused here too, not only by the config reader.
  absl::StatusOr<std::unique_ptr<Model>> behind = Model::Build(
      ModelDef{{4, 3}, {dense("softmax"), Spec("flatten")}}, 7, Device::Cpu());
  ASSERT_FALSE(behind.ok());
  EXPECT_THAT(std::string(behind.status().message()),
              HasSubstr("softmax on the output layer, then a flatten"));
  // Without one, Probabilities is the outputs themselves.
  const Tensor y = *linear->Call(x, {});
  EXPECT_TRUE(testing::SameBits(*linear->Probabilities(y), y));
}

// binary_crossentropy's counterpart: a sigmoid on the output layer leaves
// the logits to the loss, and Probabilities applies the sigmoid; under the
// categorical loss a sigmoid output (the other loss's probabilities) is
// refused, as a softmax output is under the binary one.
TEST(ModelTest, ASigmoidOutputLayerLeavesTheLogitsToTheBinaryLoss) {
  auto def = [](const std::string& activation, const std::string& loss) {
    ModelDef d{
        {3},
        {Spec("dense",
              {{"units", int64_t{4}}, {"activation", std::string("relu")}}),
         Spec("dense", {{"units", int64_t{2}}, {"activation", activation}})}};
    d.loss = loss;
    return d;
  };
  const std::string binary = "binary_crossentropy";
  absl::StatusOr<std::unique_ptr<Model>> linear =
      Model::Build(def("linear", binary), 7, Device::Cpu());
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Build(def("sigmoid", binary), 7, Device::Cpu());
  ASSERT_TRUE(linear.ok()) << linear.status();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_activation(), "sigmoid");
  const Tensor x = testing::RandomTensor({5, 3}, 4, DType::kF32);
  absl::StatusOr<Tensor> logits = (*m)->Call(x, {});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_TRUE(testing::SameBits(*logits, *(*linear)->Call(x, {})));
  absl::StatusOr<Tensor> p = (*m)->Probabilities(*logits);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(testing::SameBits(*p, *ops::Sigmoid(*logits)));

  for (const auto& [activation, loss] :
       {std::pair<std::string, std::string>{"sigmoid", kDefaultLoss},
        {"softmax", binary}}) {
    absl::StatusOr<std::unique_ptr<Model>> other =
        Model::Build(def(activation, loss), 7, Device::Cpu());
    ASSERT_FALSE(other.ok()) << activation;
    EXPECT_THAT(std::string(other.status().message()),
                HasSubstr(absl::StrCat("a ", activation,
                                       " on the output layer gives")));
    EXPECT_THAT(std::string(other.status().message()),
                HasSubstr(absl::StrCat("the loss is ", loss)));
  }
}

TEST(ModelTest, NamedLayersTakeNoAutoNameNumber) {
  LayerSpec foo = Spec("dense", {{"units", int64_t{3}}});
  foo.name = "foo";
  ModelDef def{{2},
               {foo, Spec("dense", {{"units", int64_t{3}}}),
                Spec("dense", {{"units", int64_t{2}}})}};
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Names(**model),
            (std::vector<std::string>{"foo/kernel", "foo/bias", "dense/kernel",
                                      "dense/bias", "dense_1/kernel",
                                      "dense_1/bias"}));
}

TEST(ModelTest, ResidualBlocksRepeatWithKerasNames) {
  ModelDef def;
  def.input_shape = {8, 8, 3};
  LayerSpec block = Spec("residual", {},
                         {Spec("conv2d", {{"filters", 4},
                                          {"kernel_size", 3},
                                          {"padding", std::string("same")},
                                          {"activation", std::string("relu")}}),
                          Spec("conv2d", {{"filters", 4},
                                          {"kernel_size", 3},
                                          {"padding", std::string("same")}})});
  block.repeat = 2;
  def.layers = {Spec("conv2d", {{"filters", 4}, {"kernel_size", 1}}), block,
                Spec("global_average_pooling2d"),
                Spec("dense", {{"units", 10}})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Names(**m),
            (std::vector<std::string>{
                "conv2d/kernel", "conv2d/bias", "conv2d_1/kernel",
                "conv2d_1/bias", "conv2d_2/kernel", "conv2d_2/bias",
                "conv2d_3/kernel", "conv2d_3/bias", "conv2d_4/kernel",
                "conv2d_4/bias", "dense/kernel", "dense/bias"}));
  EXPECT_EQ((*m)->output_shape(), (Shape{10}));
  const std::string summary = (*m)->Summary();
  EXPECT_THAT(summary, HasSubstr("residual_1 (residual)"));
  EXPECT_THAT(summary, HasSubstr("  conv2d_4 (conv2d)"));
  EXPECT_THAT(summary, HasSubstr("(None, 4)"));
  // 4 convs of 3*3*4*4+4, one 1x1 of 3*4+4, dense 4*10+10.
  EXPECT_THAT(summary, HasSubstr("Total params: 658"));

  // y = main(x) + x: the forward pass runs and the gradient reaches every
  // variable.
  Tensor x = testing::RandomTensor({2, 8, 8, 3}, 5, DType::kF32);
  GradientTape tape;
  auto y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 10}));
  std::vector<Tensor> vars;
  for (Variable* v : (*m)->variables()) vars.push_back(v->value());
  auto grads = tape.Gradient(*ops::ReduceSum(*y), vars);
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (const auto& g : *grads) EXPECT_TRUE(g.has_value());
}

bool OnBFloat16Grid(const Tensor& t) {
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const float v = t.data<float>()[i];
    if (RoundToBFloat16(v) != v) return false;
  }
  return true;
}

// mixed_bfloat16: the input and each layer's output are rounded to bf16,
// the products take bf16 operands, the variables stay f32; the caller's
// batch is left as it was and gradients reach every variable.
TEST(ModelTest, MixedBFloat16RoundsInputsAndLayerOutputs) {
  ModelDef def;
  def.input_shape = {20};
  def.layers = {
      Spec("dense", {{"units", 16}, {"activation", std::string("relu")}}),
      Spec("dense", {{"units", 3}})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  const Tensor x = testing::RandomTensor({8, 20}, 7, DType::kF32);
  const Tensor x0 = *x.Clone();
  const Tensor fp32 = *(*m)->Call(x, {});
  std::vector<Tensor> vars;
  for (Variable* v : (*m)->variables()) vars.push_back(v->value());

  // By hand, in f32 from the rounded values.
  auto r = [](const Tensor& t) { return *ops::RoundedToBFloat16(t); };
  const Tensor h =
      r(*ops::Relu(*ops::Add(*ops::MatMul(r(x), r(vars[0])), vars[1])));
  const Tensor expected = r(*ops::Add(*ops::MatMul(h, r(vars[2])), vars[3]));

  SetMatMulPrecision(MatMulPrecision::kBf16);
  (*m)->SetMixedBFloat16(true);
  GradientTape tape;
  absl::StatusOr<Tensor> y = (*m)->Call(x, {});
  SetMatMulPrecision(MatMulPrecision::kFp32);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(x, x0, 0, 0));
  EXPECT_TRUE(OnBFloat16Grid(*y));
  // Summation order (bias first or last) can move a value across a bf16
  // rounding boundary: one bf16 ulp (2^-7 relative) at most.
  EXPECT_TRUE(testing::AllClose(*y, expected, 0x1p-7, 1e-6));
  EXPECT_FALSE(testing::AllClose(*y, fp32, 0, 1e-4));
  for (int kernel : {0, 2}) {  // (The biases start at zero.)
    EXPECT_FALSE(OnBFloat16Grid(vars[kernel])) << "a variable was rounded";
  }
  auto grads = tape.Gradient(*ops::ReduceSum(*y), vars);
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (const auto& g : *grads) EXPECT_TRUE(g.has_value());
}

// Token ids are not rounded to bfloat16 (which holds integers exactly only
// up to 256): ids 257 and 259 pick their own rows, as Keras's Embedding,
// which does not cast its input, picks them; the rows come out rounded.
// Also with the embedding first inside a container. Before, the model's
// input was rounded: 257 read row 256, 259 row 260, and 999 row 1000, out
// of range.
// Builds `def` (three token ids in) under mixed bfloat16 and calls it on
// ids 257, 259, 999 (which bf16 would round), into *model and *y ([1, 3,
// width]); the caller's ids stay as they were.
void CallOnIds(const ModelDef& def, int64_t width,
               std::unique_ptr<Model>* model, Tensor* y) {
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetMixedBFloat16(true);
  const Tensor ids =
      Tensor::FromVector(std::vector<float>{257, 259, 999}, {1, 3});
  absl::StatusOr<Tensor> out = (*m)->Call(ids, {});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->shape(), (Shape{1, 3, width}));
  EXPECT_EQ(ids.ToVector<float>(), (std::vector<float>{257, 259, 999}));
  *model = *std::move(m);
  *y = *std::move(out);
}

TEST(ModelTest, MixedBFloat16LeavesTokenIdsUnrounded) {
  const LayerSpec embedding = Spec(
      "embedding", {{"input_dim", int64_t{1000}}, {"output_dim", int64_t{4}}});
  const std::vector<std::vector<LayerSpec>> models = {
      {embedding}, {Spec("sequential", {}, {embedding})}};
  for (const std::vector<LayerSpec>& layers : models) {
    SCOPED_TRACE(layers[0].type == "sequential" ? "inside a sequential"
                                                : "first layer");
    ModelDef def;
    def.input_shape = {3};
    def.layers = layers;
    EXPECT_EQ(TokenIdLayer(def.layers)->type, "embedding");
    auto m = Model::Build(def, 1, Device::Cpu());
    ASSERT_TRUE(m.ok()) << m.status();
    (*m)->SetMixedBFloat16(true);
    const std::vector<float> ids = {257, 259, 999};
    absl::StatusOr<Tensor> y = (*m)->Call(Tensor::FromVector(ids, {1, 3}), {});
    ASSERT_TRUE(y.ok()) << y.status();
    const float* table = (*m)->variables()[0]->value().data<float>();
    const float* out = y->data<float>();
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int j = 0; j < 4; ++j) {
        const float row = table[static_cast<int64_t>(ids[i]) * 4 + j];
        EXPECT_EQ(out[i * 4 + j], RoundToBFloat16(row)) << ids[i] << "," << j;
      }
    }
  }
  // Nor in either branch of a two-branch container: the branch beside the
  // embedding's (a reshape keeping the ids as a column beside the rows,
  // which rounds a view of its input in place) gets a rounded copy of its
  // own, so neither the embedding nor the caller's batch sees it rounded.
  const LayerSpec column =
      Spec("reshape", {{"target_shape", std::vector<int64_t>{3, 1}}});
  for (const bool embedding_in_shortcut : {true, false}) {
    SCOPED_TRACE(embedding_in_shortcut ? "embedding in the shortcut"
                                       : "embedding in the main branch");
    LayerSpec both =
        Spec("concatenate", {}, {embedding_in_shortcut ? column : embedding});
    both.shortcut =
        std::vector<LayerSpec>{embedding_in_shortcut ? embedding : column};
    ModelDef branches;
    branches.input_shape = {3};
    branches.layers = {both};
    ASSERT_NE(TokenIdLayer(branches.layers), nullptr);
    EXPECT_EQ(TokenIdLayer(branches.layers)->type, "embedding");
    std::unique_ptr<Model> m;
    Tensor y;
    ASSERT_NO_FATAL_FAILURE(CallOnIds(branches, 5, &m, &y));
    const float* table = m->variables()[0]->value().data<float>();
    // Row 1 (id 259): the embedding's four values, and the id column
    // rounded (260) as Keras's autocast gives the other branch.
    const int64_t rows = embedding_in_shortcut ? 1 : 0;
    const int64_t id = embedding_in_shortcut ? 0 : 4;
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(y.data<float>()[5 + rows + j],
                RoundToBFloat16(table[259 * 4 + j]));
    }
    EXPECT_EQ(y.data<float>()[5 + id], 260.0f);
  }
  // Nor in a parallel's third branch: the others get rounded copies.
  {
    LayerSpec three = Spec("parallel", {}, {column, column, embedding});
    ModelDef branches;
    branches.input_shape = {3};
    branches.layers = {three};
    ASSERT_NE(TokenIdLayer(branches.layers), nullptr);
    // The entry itself, which the caller reads later (not a copy's).
    EXPECT_EQ(TokenIdLayer(branches.layers), &branches.layers[0].layers[2]);
    std::unique_ptr<Model> m;
    Tensor y;
    ASSERT_NO_FATAL_FAILURE(CallOnIds(branches, 6, &m, &y));
    const float* table = m->variables()[0]->value().data<float>();
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(y.data<float>()[6 + 2 + j],
                RoundToBFloat16(table[259 * 4 + j]));
    }
    EXPECT_EQ(y.data<float>()[6], 260.0f);
    EXPECT_EQ(y.data<float>()[7], 260.0f);
  }
  // Not for a model whose input layer reads values.
  ModelDef dense;
  dense.input_shape = {3};
  dense.layers = {Spec("dense", {{"units", int64_t{2}}})};
  EXPECT_EQ(TokenIdLayer(dense.layers), nullptr);
}

// Token ids carry no gradient: trainable layers before an embedding would
// silently never train (TensorFlow warns; DESIGN: never a silent zero), so
// the model is refused, also across containers; layers without variables
// before it (reshape) are fine.
TEST(ModelTest, NoTrainableLayerMayFeedAnEmbedding) {
  const LayerSpec embedding = Spec(
      "embedding", {{"input_dim", int64_t{10}}, {"output_dim", int64_t{2}}});
  auto build = [](std::vector<LayerSpec> layers) {
    for (size_t i = 0; i < layers.size(); ++i) {
      layers[i].path = absl::StrCat("model.layers[", i, "]");
    }
    LayerBuilder builder(1, Device::Cpu());
    return builder.BuildSequence(layers, {2, 4}).status();
  };
  const LayerSpec dense = Spec("dense", {{"units", int64_t{4}}});
  EXPECT_EQ(build({dense, embedding}).message(),
            "model.layers[1] (embedding): reads its input as token ids, which "
            "carry no gradient, so the trainable layers before it would never "
            "train (make it the first layer)");
  EXPECT_THAT(std::string(build({Spec("sequential", {}, {dense}),
                                 Spec("sequential", {}, {embedding})})
                              .message()),
              HasSubstr("reads its input as token ids"));
  EXPECT_TRUE(
      build({Spec("reshape", {{"target_shape", std::vector<int64_t>{4}}}),
             embedding})
          .ok());
}

std::vector<std::string> NamesOf(const std::vector<Variable*>& vars) {
  std::vector<std::string> out;
  for (const Variable* v : vars) out.push_back(v->name());
  return out;
}

// trainable: false (Keras's trainable=False) freezes an entry and every
// layer inside it: their variables are neither trainable nor forward
// state, a frozen batch normalization leaves its moving statistics as they
// are in a training call (an unfrozen one moves its own), and the gradient
// still flows through the frozen block to the trainable layer before it.
TEST(ModelTest, AFrozenEntryFreezesEveryLayerInside) {
  ModelDef def;
  def.input_shape = {4};
  LayerSpec block = Spec(
      "sequential", {},
      {Spec("dense", {{"units", int64_t{4}}}), Spec("batch_normalization")});
  block.trainable = false;
  def.layers = {Spec("dense", {{"units", int64_t{4}}}), block,
                Spec("batch_normalization"),
                Spec("dense", {{"units", int64_t{3}}})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(
      NamesOf((*m)->trainable_variables()),
      (std::vector<std::string>{
          "dense/kernel", "dense/bias", "batch_normalization_1/gamma",
          "batch_normalization_1/beta", "dense_2/kernel", "dense_2/bias"}));
  EXPECT_EQ(
      NamesOf((*m)->forward_state()),
      (std::vector<std::string>{"batch_normalization_1/moving_mean",
                                "batch_normalization_1/moving_variance"}));
  std::vector<Tensor> before;
  for (Variable* v : (*m)->variables())
    before.push_back(v->value().Clone().value());
  Tensor x = testing::RandomTensor({8, 4}, 3, DType::kF32);
  std::vector<Tensor> trainable;
  for (Variable* v : (*m)->trainable_variables())
    trainable.push_back(v->value());
  GradientTape tape;
  ForwardContext training;
  training.training = true;
  auto y = (*m)->Call(x, training);
  ASSERT_TRUE(y.ok()) << y.status();
  auto grads = tape.Gradient(*ops::ReduceSum(*ops::Square(*y)), trainable);
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (const auto& g : *grads) {
    ASSERT_TRUE(g.has_value());
    // Nonzero: it reached the layer in front of the frozen block too.
    const std::vector<float> values = g->ToVector<float>();
    EXPECT_TRUE(absl::c_any_of(values, [](float e) { return e != 0; }));
  }
  for (size_t i = 0; i < before.size(); ++i) {
    const Variable& v = *(*m)->variables()[i];
    SCOPED_TRACE(v.name());
    const bool moved = v.name().starts_with("batch_normalization_1/moving");
    EXPECT_EQ(!testing::SameBits(v.value(), before[i]), moved);
  }
}

// A frozen batch normalization normalises with its moving statistics in a
// training call: the same output as inference, bit for bit.
TEST(ModelTest, AFrozenBatchNormalizationUsesItsMovingStatistics) {
  ModelDef def;
  def.input_shape = {3};
  LayerSpec bn = Spec("batch_normalization");
  bn.trainable = false;
  def.layers = {bn};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  // Moving statistics far from the batch's.
  ASSERT_TRUE((*m)->variables()[2]
                  ->Assign(Tensor::FromVector<float>({1, -2, 3}, {3}))
                  .ok());
  ASSERT_TRUE((*m)->variables()[3]
                  ->Assign(Tensor::FromVector<float>({4, 0.5, 2}, {3}))
                  .ok());
  Tensor x = testing::RandomTensor({5, 3}, 9, DType::kF32);
  ForwardContext training;
  training.training = true;
  auto trained = (*m)->Call(x, training);
  auto inferred = (*m)->Call(x, {});
  ASSERT_TRUE(trained.ok() && inferred.ok());
  EXPECT_TRUE(testing::SameBits(*trained, *inferred));
}

// A residual whose branches disagree says how to mend the shortcut for
// what flows through it.
TEST(ModelTest, ResidualShapeErrorsSuggestAShortcutThatFits) {
  LayerSpec vectors =
      Spec("residual", {}, {Spec("dense", {{"units", int64_t{5}}})});
  vectors.path = "model.layers[0]";
  LayerBuilder builder(1, Device::Cpu());
  EXPECT_THAT(
      std::string(builder.BuildSequence({vectors}, {1, 3}).status().message()),
      HasSubstr("; add a shortcut with a dense layer of 5 units)"));
  LayerSpec images = Spec(
      "residual", {},
      {Spec("conv2d", {{"filters", int64_t{4}}, {"kernel_size", int64_t{1}}})});
  images.path = "model.layers[0]";
  LayerBuilder image_builder(1, Device::Cpu());
  EXPECT_THAT(std::string(image_builder.BuildSequence({images}, {1, 6, 6, 2})
                              .status()
                              .message()),
              HasSubstr("; add a shortcut with a strided 1x1 conv2d)"));
}

// The elementwise merges broadcast axes of 1 as Keras's do (a gate of
// pooled channels over every pixel), in either branch, and refuse axes
// that differ otherwise, naming both shapes.
TEST(ModelTest, ElementwiseMergesBroadcastAxesOfOne) {
  const LayerSpec pool = Spec("global_average_pooling2d", {{"keepdims", true}});
  for (const std::string type :
       {"multiply", "subtract", "average", "maximum", "minimum", "residual"}) {
    SCOPED_TRACE(type);
    LayerSpec gate = Spec(type, {}, {pool});
    gate.path = "model.layers[0]";
    LayerBuilder builder(1, Device::Cpu());
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        builder.BuildSequence({gate}, {2, 5, 4, 3});
    ASSERT_TRUE(layer.ok()) << layer.status();
    EXPECT_EQ(*(*layer)->OutputShape({2, 5, 4, 3}), (Shape{2, 5, 4, 3}));
    const Tensor x = testing::RandomTensor({2, 5, 4, 3}, 1, DType::kF32);
    absl::StatusOr<Tensor> y = (*layer)->Call(x, {});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape(), x.shape());
    LayerSpec wide = Spec(type, {},
                          {Spec("conv2d", {{"filters", int64_t{2}},
                                           {"kernel_size", int64_t{1}}})});
    wide.shortcut = std::vector<LayerSpec>{pool};
    wide.path = "model.layers[0]";
    LayerBuilder wide_builder(1, Device::Cpu());
    EXPECT_THAT(
        std::string(wide_builder.BuildSequence({wide}, {2, 5, 4, 3})
                        .status()
                        .message()),
        HasSubstr("the main branch gives [2,5,4,2] but the shortcut gives "
                  "[2,1,1,3] (each axis must agree or be 1 on one side"));
  }
  // Either side broadcasts, both at once, and a lower rank gains axes of 1
  // after the batch first (Keras's expand_dims): a shortcut [1, 1, c]
  // over the main branch's image, rows [1, w, c] times columns [h, 1, c],
  // a gate [c] without keepdims.
  struct Broadcast {
    std::vector<LayerSpec> main, shortcut;
    Shape want;
  };
  const LayerSpec conv =
      Spec("conv2d", {{"filters", int64_t{3}}, {"kernel_size", int64_t{1}}});
  const LayerSpec rows =
      Spec("average_pooling2d", {{"pool_size", std::vector<int64_t>{5, 1}}});
  const LayerSpec cols =
      Spec("average_pooling2d", {{"pool_size", std::vector<int64_t>{1, 4}}});
  for (const Broadcast& c : std::vector<Broadcast>{
           {{conv}, {pool}, {2, 5, 4, 3}},
           {{rows}, {cols}, {2, 5, 4, 3}},
           {{Spec("global_average_pooling2d")}, {conv}, {2, 5, 4, 3}}}) {
    LayerSpec spec = Spec("multiply", {}, c.main);
    spec.shortcut = c.shortcut;
    spec.path = "model.layers[0]";
    LayerBuilder b(1, Device::Cpu());
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        b.BuildSequence({spec}, {2, 5, 4, 3});
    ASSERT_TRUE(layer.ok()) << layer.status();
    EXPECT_EQ(*(*layer)->OutputShape({2, 5, 4, 3}), c.want);
    absl::StatusOr<Tensor> y =
        (*layer)->Call(testing::RandomTensor({2, 5, 4, 3}, 2, DType::kF32), {});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape(), c.want);
  }
  // The gate's values: x * mean over the pixels, per channel.
  LayerSpec gate = Spec("multiply", {}, {pool});
  gate.path = "model.layers[0]";
  LayerBuilder builder(1, Device::Cpu());
  absl::StatusOr<std::unique_ptr<Layer>> layer =
      builder.BuildSequence({gate}, {1, 2, 1, 2});
  ASSERT_TRUE(layer.ok()) << layer.status();
  absl::StatusOr<Tensor> y =
      (*layer)->Call(Tensor::FromVector<float>({1, 2, 3, 6}, {1, 2, 1, 2}), {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToVector<float>(), (std::vector<float>{2, 8, 6, 24}));
}

// concatenate: every axis but the last must agree (a strided branch beside
// the identity is named); the widths add up.
TEST(ModelTest, ConcatenatedBranchesAgreeButOnTheLastAxis) {
  LayerSpec strided = Spec("concatenate", {},
                           {Spec("conv2d", {{"filters", int64_t{3}},
                                            {"kernel_size", int64_t{1}},
                                            {"strides", int64_t{2}}})});
  strided.path = "model.layers[0]";
  LayerBuilder builder(1, Device::Cpu());
  EXPECT_THAT(
      std::string(
          builder.BuildSequence({strided}, {1, 6, 6, 2}).status().message()),
      HasSubstr("the main branch gives [1,3,3,3] but the identity shortcut "
                "gives [1,6,6,2]: concatenated along the last axis, the "
                "others must agree"));
  LayerSpec widths =
      Spec("concatenate", {}, {Spec("dense", {{"units", int64_t{5}}})});
  widths.shortcut =
      std::vector<LayerSpec>{Spec("dense", {{"units", int64_t{2}}})};
  widths.path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Build(ModelDef{{4, 3}, {widths}}, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_shape(), (Shape{4, 7}));
  const Tensor x = testing::RandomTensor({2, 4, 3}, 5, DType::kF32);
  absl::StatusOr<Tensor> y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 4, 7}));
}

// parallel: each entry a branch over the input, merged in order (Keras's
// merge layers over N inputs); two or more, each one branch; shape errors
// name the entries.
TEST(ModelTest, ParallelBranchesMergeInOrder) {
  const LayerSpec dense = Spec("dense", {{"units", int64_t{2}}});
  const Tensor x = testing::RandomTensor({2, 4, 3}, 5, DType::kF32);
  absl::StatusOr<std::unique_ptr<Model>> concat = Model::Build(
      ModelDef{{4, 3}, {Spec("parallel", {}, {dense, Spec("identity")})}}, 1,
      Device::Cpu());
  ASSERT_TRUE(concat.ok()) << concat.status();
  EXPECT_EQ((*concat)->output_shape(), (Shape{4, 5}));
  EXPECT_EQ(Names(**concat),
            (std::vector<std::string>{"dense/kernel", "dense/bias"}));
  absl::StatusOr<Tensor> y = (*concat)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  // The identity's branch second: the input's features last.
  EXPECT_TRUE(testing::AllClose(*ops::Slice(*y, 2, 2, 3),
                                *ops::Cast(x, DType::kF32), 0, 0));
  // Three identities: ((x + x) + x) summed, (x + x + x) / 3 averaged, as
  // Keras's Add and Average.
  for (const char* merge : {"add", "average", "maximum"}) {
    SCOPED_TRACE(merge);
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Build(
        ModelDef{
            {4, 3},
            {Spec("parallel", {{"merge", std::string(merge)}},
                  {Spec("identity"), Spec("identity"), Spec("identity")})}},
        1, Device::Cpu());
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<Tensor> out = (*m)->Call(x, {});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> want;
    for (float v : x.ToVector<float>()) {
      const float sum = (v + v) + v;
      want.push_back(std::string(merge) == "add"       ? sum
                     : std::string(merge) == "average" ? sum / 3.0f
                                                       : v);
    }
    EXPECT_EQ(out->ToVector<float>(), want);
  }
  const LayerSpec wide = Spec("dense", {{"units", int64_t{5}}});
  LayerSpec mismatched =
      Spec("parallel", {{"merge", std::string("add")}}, {dense, dense, wide});
  LayerBuilder builder(1, Device::Cpu());
  EXPECT_THAT(
      std::string(
          builder.BuildSequence({mismatched}, {1, 4, 3}).status().message()),
      HasSubstr("the layers[0] gives [1,4,2] but the layers[2] gives "
                "[1,4,5] (each axis must agree or be 1 on one side)"));
  LayerBuilder one_builder(1, Device::Cpu());
  EXPECT_THAT(
      std::string(
          one_builder.BuildSequence({Spec("parallel", {}, {dense})}, {1, 4, 3})
              .status()
              .message()),
      HasSubstr("layers: takes two or more branches"));
  // Maximum and minimum over three branches of ranks 3, 2 (axes of 1
  // inserted after the batch) and 3, in order.
  const LayerSpec pooled = Spec("global_average_pooling1d");
  const LayerSpec three = Spec("dense", {{"units", int64_t{3}}});
  for (const char* merge : {"maximum", "minimum"}) {
    SCOPED_TRACE(merge);
    auto m =
        Model::Build(ModelDef{{4, 3},
                              {Spec("parallel", {{"merge", std::string(merge)}},
                                    {three, pooled, Spec("identity")})}},
                     1, Device::Cpu());
    auto d = Model::Build(ModelDef{{4, 3}, {three}}, 1, Device::Cpu());
    ASSERT_TRUE(m.ok() && d.ok());
    absl::StatusOr<Tensor> out = (*m)->Call(x, {});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<float> dense_out = (*d)->Call(x, {})->ToVector<float>();
    const std::vector<float> in = x.ToVector<float>();
    std::vector<float> want;
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < 4; ++t) {
        for (int64_t c = 0; c < 3; ++c) {
          float mean = 0;
          for (int64_t s = 0; s < 4; ++s) mean += in[b * 12 + s * 3 + c];
          mean /= 4;
          const int64_t i = b * 12 + t * 3 + c;
          const bool max = std::string(merge) == "maximum";
          float v =
              max ? std::max(dense_out[i], mean) : std::min(dense_out[i], mean);
          v = max ? std::max(v, in[i]) : std::min(v, in[i]);
          want.push_back(v);
        }
      }
    }
    EXPECT_TRUE(testing::AllClose(*out, Tensor::FromVector(want, {2, 4, 3}),
                                  1e-6, 1e-6));
  }
  // Three concatenated branches must agree but on the last axis.
  LayerBuilder concat_builder(1, Device::Cpu());
  EXPECT_THAT(std::string(concat_builder
                              .BuildSequence({Spec("parallel", {},
                                                   {dense, dense, pooled})},
                                             {1, 4, 3})
                              .status()
                              .message()),
              HasSubstr("the layers[0] gives [1,4,2] but the layers[2] gives "
                        "[1,3]: concatenated along the last axis"));
  // A merge of softmax branches last: Keras would merge probabilities,
  // the loss would read them as logits.
  const LayerSpec softmax = Spec(
      "dense", {{"units", int64_t{2}}, {"activation", std::string("softmax")}});
  LayerSpec ensemble =
      Spec("parallel", {{"merge", std::string("average")}}, {softmax, softmax});
  ensemble.path = "model.layers[0]";
  ensemble.layers[0].path = "model.layers[0].layers[0]";
  ensemble.layers[1].path = "model.layers[0].layers[1]";
  absl::StatusOr<std::unique_ptr<Model>> refused =
      Model::Build(ModelDef{{4, 3}, {ensemble}}, 1, Device::Cpu());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("model.layers[0]: the model's output merges a branch "
                        "whose last layer (model.layers[0].layers[0]"));
  // An identity after the softmax leaves it the output's (Keras's logits
  // pass through Identity).
  EXPECT_TRUE(Model::Build(ModelDef{{4, 3}, {softmax, Spec("identity")}}, 1,
                           Device::Cpu())
                  .ok());
  LayerSpec repeated = dense;
  repeated.repeat = 2;
  LayerBuilder repeat_builder(1, Device::Cpu());
  EXPECT_THAT(
      std::string(repeat_builder
                      .BuildSequence({Spec("parallel", {}, {dense, repeated})},
                                     {1, 4, 3})
                      .status()
                      .message()),
      HasSubstr("layers[1].repeat: an entry is one branch"));
}

// A container's factory may read the builder's name after building its
// children (the builder gives it back): the residual block is `residual`,
// not the name of its branch's last layer, and a sequential block has its
// own name.
TEST(ModelTest, ContainersKeepTheirNamesAfterBuildingChildren) {
  LayerBuilder builder(1, Device::Cpu());
  absl::StatusOr<std::unique_ptr<Layer>> body = builder.BuildSequence(
      {Spec("residual", {}, {Spec("dense", {{"units", int64_t{3}}})}),
       Spec("sequential", {}, {Spec("dense", {{"units", int64_t{3}}})})},
      {2, 3});
  ASSERT_TRUE(body.ok()) << body.status();
  const auto& layers = static_cast<SequentialLayer&>(**body).layers();
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0]->name(), "residual");
  EXPECT_EQ(layers[1]->name(), "sequential");
}

// Under mixed bfloat16 an absorbed max pool takes its winners among the
// rounded outputs, as Keras pools the layer's bf16 output: a conv with the
// pool absorbed gives the same output and the same gradients, bit for bit,
// as the chain the pool is kept apart from (an identity activation between
// them stops the absorption). Random data makes ties in bf16 that f32 does
// not have (a few in a thousand windows), and each moved the kernel's
// gradient when the pool picked among the f32 values.
TEST(ModelTest, MixedBFloat16PoolsAbsorbedOrNotAlike) {
  auto model = [](bool apart) {
    ModelDef def;
    def.input_shape = {12, 12, 3};
    def.layers = {Spec("conv2d", {{"filters", int64_t{8}},
                                  {"kernel_size", int64_t{3}},
                                  {"padding", std::string("same")},
                                  {"activation", std::string("relu")}})};
    if (apart) {
      def.layers.push_back(
          Spec("activation", {{"activation", std::string("linear")}}));
    }
    def.layers.push_back(Spec("max_pooling2d", {{"pool_size", int64_t{2}}}));
    def.layers.push_back(Spec("flatten"));
    def.layers.push_back(Spec("dense", {{"units", int64_t{4}}}));
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Build(def, 3, Device::Cpu());
    EXPECT_TRUE(m.ok()) << m.status();
    (*m)->SetMixedBFloat16(true);
    return *std::move(m);
  };
  std::unique_ptr<Model> absorbed = model(false), apart = model(true);
  ASSERT_EQ(Names(*absorbed), Names(*apart));
  const Tensor x = testing::RandomTensor({32, 12, 12, 3}, 9, DType::kF32);
  auto run = [&](Model& m) {
    SetMatMulPrecision(MatMulPrecision::kBf16);
    GradientTape tape;
    absl::StatusOr<Tensor> y = m.Call(x, {});
    EXPECT_TRUE(y.ok()) << y.status();
    std::vector<Tensor> vars;
    for (Variable* v : m.variables()) vars.push_back(v->value());
    GradientOptions options;
    options.output_gradient =
        testing::RandomTensor(y->shape(), 10, DType::kF32);
    auto grads = tape.Gradient(*y, vars, options);
    SetMatMulPrecision(MatMulPrecision::kFp32);
    EXPECT_TRUE(grads.ok()) << grads.status();
    std::vector<Tensor> out = {*y};
    for (const auto& g : *grads) out.push_back(*g);
    return out;
  };
  const std::vector<Tensor> a = run(*absorbed), b = run(*apart);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(testing::SameBits(a[i], b[i])) << "output " << i;
  }
}

// What reached a probe layer: its input recorded as rounded to bfloat16,
// and with the 2-byte copy products read (GPUs only); how its caller said
// it would store the probe's output.
struct Seen {
  bool rounded = false;
  bool halves = false;
  ops::OutputRounding asked = ops::OutputRounding::kNone;
  // The f32 values rounded too (not halves alone).
  bool values = true;
  bool operator==(const Seen&) const = default;
};

// Passes x * 1.5 on (a new tensor, not on the bfloat16 grid) and logs what
// it was given; says whether its input feeds a product (only products) and
// whether its output needs only halves, as told.
class ProbeLayer final : public Layer {
 public:
  ProbeLayer(bool feeds_product, std::vector<Seen>* log,
             bool only_products = false, bool output_halves_only = false)
      : Layer("probe"),
        feeds_product_(feeds_product),
        only_products_(only_products),
        output_halves_only_(output_halves_only),
        log_(log) {}
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override {
    const Bf16Rendering* r = x.bf16_rendering();
    log_->push_back({r != nullptr, r != nullptr && r->halves != nullptr,
                     ctx.output_rounding, r == nullptr || r->values_rounded});
    return ops::Scale(x, 1.5);
  }
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }
  bool InputFeedsProduct() const override { return feeds_product_; }
  bool InputOnlyFeedsProducts() const override { return only_products_; }
  bool OutputNeedsOnlyHalves() const override { return output_halves_only_; }

 private:
  bool feeds_product_, only_products_, output_halves_only_;
  std::vector<Seen>* log_;
};

// probes [no, yes, no, residual(main [no], shortcut yes), no]: which
// inputs feed a product.
std::unique_ptr<SequentialLayer> ProbeSequence(std::vector<Seen>* log) {
  auto seq = std::make_unique<SequentialLayer>("seq");
  seq->Append(std::make_unique<ProbeLayer>(false, log));
  seq->Append(std::make_unique<ProbeLayer>(true, log));
  seq->Append(std::make_unique<ProbeLayer>(false, log));
  auto main = std::make_unique<SequentialLayer>("main");
  main->Append(std::make_unique<ProbeLayer>(false, log));
  seq->Append(BranchesLayer::TwoBranches(
      "residual", std::move(main), std::make_unique<ProbeLayer>(true, log)));
  seq->Append(std::make_unique<ProbeLayer>(false, log));
  return seq;
}

// Under mixed bfloat16 every layer gets a recorded rounded input (a product
// then reads it as it is); on GPUs the rounding pass in front of a layer
// whose input feeds a product (directly, first in a sequence, or in either
// branch of a residual) also writes the halves, and no other does. Each
// layer is told how its output will be stored (with halves where the next
// layer's input feeds a product; a residual's branches are told nothing,
// as their outputs are summed, and a sequence's last layer is told what
// its caller told the sequence).
void CheckProbes(Device device) {
  std::vector<Seen> log;
  const std::unique_ptr<SequentialLayer> seq = ProbeSequence(&log);
  EXPECT_FALSE(seq->InputFeedsProduct());
  const Tensor x = *testing::RandomTensor({3, 4}, 12, DType::kF32).To(device);
  ASSERT_TRUE(seq->Call(*ops::RoundedToBFloat16(x), {}).ok());
  // Without mixed bfloat16 only the first probe gets a rounded tensor.
  std::vector<Seen> first_only(6, Seen{});
  first_only[0].rounded = true;
  EXPECT_EQ(log, first_only);
  log.clear();
  ForwardContext bf16;
  bf16.bf16_activations = true;
  ASSERT_TRUE(seq->Call(*ops::RoundedToBFloat16(x), bf16).ok());
  const bool gpu = device.is_cuda();
  using R = ops::OutputRounding;
  std::vector<Seen> want = {{true, false, R::kBf16WithHalves},
                            {true, gpu, R::kBf16},
                            {true, false, R::kBf16WithHalves},
                            {true, gpu, R::kBf16},
                            {true, gpu, R::kNone},
                            {true, false, R::kBf16}};
  EXPECT_EQ(log, want);
  log.clear();
  bf16.output_rounding = R::kBf16WithHalves;
  ASSERT_TRUE(seq->Call(*ops::RoundedToBFloat16(x), bf16).ok());
  want.back().asked = R::kBf16WithHalves;
  EXPECT_EQ(log, want);
  log.clear();
  ASSERT_TRUE(seq->Call(x, {}).ok());
  EXPECT_EQ(log, std::vector<Seen>(6, Seen{}));
}

TEST(MixedBFloat16Test, LayerInputsAreRecordedRounded) {
  CheckProbes(Device::Cpu());
}

// An output that only products read, and whose own gradient reads at most
// its halves, is stored as halves alone (GPUs; rounded f32 values on CPUs):
// probes A-F, E in a nested sequence. A (its output needs only halves)
// feeds B (only products): halves alone. B's output does not need only
// halves: rounded with halves. C feeds D (only products): halves alone. D
// feeds the nested sequence, whose first layer E reads only products, but
// D's output needs more than halves. The nested sequence's output (E's)
// feeds F (only products) and E needs only halves: E is told so by its
// sequence. F is told what the caller asks.
void CheckHalvesOnlyProbes(Device device) {
  std::vector<Seen> log;
  auto seq = std::make_unique<SequentialLayer>("seq");
  seq->Append(std::make_unique<ProbeLayer>(false, &log, false, true));  // A
  seq->Append(std::make_unique<ProbeLayer>(true, &log, true, false));   // B
  seq->Append(std::make_unique<ProbeLayer>(true, &log, false, true));   // C
  seq->Append(std::make_unique<ProbeLayer>(true, &log, true, false));   // D
  auto nested = std::make_unique<SequentialLayer>("nested");
  nested->Append(std::make_unique<ProbeLayer>(true, &log, true, true));  // E
  seq->Append(std::move(nested));
  seq->Append(std::make_unique<ProbeLayer>(true, &log, true, true));  // F
  EXPECT_FALSE(seq->InputOnlyFeedsProducts());
  EXPECT_TRUE(seq->OutputNeedsOnlyHalves());
  const Tensor x = *testing::RandomTensor({3, 4}, 13, DType::kF32).To(device);
  ForwardContext bf16;
  bf16.bf16_activations = true;
  const int64_t requests = ops::internal::HalvesOnlyOutputRequests();
  ASSERT_TRUE(seq->Call(*ops::RoundedToBFloat16(x), bf16).ok());
  // A, C, E (in its sequence) and the nested sequence's output (again, by
  // the outer sequence: nothing left to do then).
  EXPECT_EQ(ops::internal::HalvesOnlyOutputRequests() - requests, 4);
  const bool gpu = device.is_cuda();
  using R = ops::OutputRounding;
  const std::vector<Seen> want = {
      {true, false, R::kBf16HalvesOnly, true},  // A
      {true, gpu, R::kBf16WithHalves, !gpu},    // B: A's halves alone
      {true, gpu, R::kBf16HalvesOnly, true},    // C
      {true, gpu, R::kBf16WithHalves, !gpu},    // D
      {true, gpu, R::kBf16HalvesOnly, true},    // E
      {true, gpu, R::kBf16, !gpu}};             // F
  EXPECT_EQ(log, want);
}

TEST(MixedBFloat16Test, OutputsOnlyProductsReadAreStoredAsHalvesAlone) {
  CheckHalvesOnlyProbes(Device::Cpu());
}

class MixedBFloat16GpuTest : public testing::CudaTest {};

class DropoutGpuTest : public testing::CudaTest {};

// The dropouts inside a time_distributed (a salt per step) and a spatial
// dropout draw on gpu:0 the CPU's masks, bit for bit, from the host's step
// seed and from the step seed as a device tensor (a replayed CUDA graph's),
// for the whole batch and a shard.
TEST_F(DropoutGpuTest, NewDropoutPathsDrawTheCpusMasks) {
  ModelDef def;
  def.input_shape = {3, 16};
  LayerSpec td =
      Spec("time_distributed", {}, {Spec("dropout", {{"rate", 0.5}})});
  td.path = "model.layers[0]";
  td.layers[0].path = "model.layers[0].layers[0]";
  LayerSpec spatial = Spec("spatial_dropout1d", {{"rate", 0.3}});
  spatial.path = "model.layers[1]";
  def.layers = {td, spatial};
  auto cpu = Model::Build(def, 5, Device::Cpu());
  auto gpu = Model::Build(def, 5, Device::Cuda(0));
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  const Tensor x = testing::RandomTensor({4, 3, 16}, 3, DType::kF32);
  const ForwardContext whole{true, 77, 0, 4};
  const Tensor want = *(*cpu)->Call(x, whole);
  const Tensor on_gpu = *x.To(Device::Cuda(0));
  absl::StatusOr<Tensor> got = (*gpu)->Call(on_gpu, whole);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(testing::SameBits(*got->To(Device::Cpu()), want));
  ForwardContext device_seed = whole;
  device_seed.step_seed_tensor =
      *Tensor::FromVector<int64_t>({77}, {1}).To(Device::Cuda(0));
  device_seed.step_seed = 0;  // Not read beside the tensor.
  got = (*gpu)->Call(on_gpu, device_seed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(testing::SameBits(*got->To(Device::Cpu()), want));
  absl::StatusOr<Tensor> shard =
      (*gpu)->Call(*on_gpu.SliceRows(2, 2), {true, 77, 2, 4});
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_TRUE(
      testing::SameBits(*shard->To(Device::Cpu()), *want.SliceRows(2, 2)));
}

TEST_F(MixedBFloat16GpuTest, InputsThatFeedProductsGetTheirHalves) {
  CheckProbes(Device::Cuda(0));
}

TEST_F(MixedBFloat16GpuTest, OutputsOnlyProductsReadGetTheirHalvesAlone) {
  CheckHalvesOnlyProbes(Device::Cuda(0));
}

// An MLP of relu and linear dense layers under mixed bfloat16 on a GPU, its
// hidden outputs stored as halves alone or as rounded values with halves:
// the same output and gradients, bit for bit (every reader of those outputs
// reads the halves, which hold the rounded values either way). Read as f32
// by a product of another precision, such an output is rounded first.
TEST_F(MixedBFloat16GpuTest, HalvesAloneTrainAsRoundedOutputs) {
  ModelDef def;
  def.input_shape = {48};
  def.layers = {
      Spec("dense", {{"units", 40}, {"activation", std::string("relu")}}),
      Spec("dense", {{"units", 36}}),
      Spec("dense", {{"units", 32}, {"activation", std::string("relu")}}),
      Spec("dense", {{"units", 10}})};
  auto m = Model::Build(def, 3, Device::Cuda(0));
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetMixedBFloat16(true);
  const absl::StatusOr<Tensor> x =
      testing::RandomTensor({64, 48}, 14, DType::kF32).To(Device::Cuda(0));
  ASSERT_TRUE(x.ok()) << x.status();
  std::vector<Tensor> vars;
  for (Variable* v : (*m)->variables()) vars.push_back(v->value());
  // The output and every gradient on the host; empty on any error.
  auto run = [&](bool halves_alone) -> std::vector<Tensor> {
    ops::internal::SetBf16HalvesOnlyOutputs(halves_alone);
    SetMatMulPrecision(MatMulPrecision::kBf16);
    auto forward_backward = [&]() -> absl::StatusOr<std::vector<Tensor>> {
      GradientTape tape;
      MT_ASSIGN_OR_RETURN(const Tensor y, (*m)->Call(*x, {}));
      MT_ASSIGN_OR_RETURN(const Tensor squares, ops::Mul(y, y));
      MT_ASSIGN_OR_RETURN(const Tensor loss, ops::ReduceSum(squares));
      MT_ASSIGN_OR_RETURN(auto grads, tape.Gradient(loss, vars));
      std::vector<Tensor> host;
      MT_ASSIGN_OR_RETURN(host.emplace_back(), y.To(Device::Cpu()));
      for (const auto& g : grads) {
        if (!g.has_value()) return absl::InternalError("a missing gradient");
        MT_ASSIGN_OR_RETURN(host.emplace_back(), g->To(Device::Cpu()));
      }
      return host;
    };
    absl::StatusOr<std::vector<Tensor>> host = forward_backward();
    SetMatMulPrecision(MatMulPrecision::kFp32);
    ops::internal::SetBf16HalvesOnlyOutputs(true);
    EXPECT_TRUE(host.ok()) << host.status();
    return host.ok() ? *std::move(host) : std::vector<Tensor>();
  };
  const int64_t requests = ops::internal::HalvesOnlyOutputRequests();
  const std::vector<Tensor> alone = run(true);
  // The three hidden outputs: each feeds a dense layer, and each layer is
  // relu with a bias or linear.
  EXPECT_EQ(ops::internal::HalvesOnlyOutputRequests() - requests, 3);
  const std::vector<Tensor> rounded = run(false);
  ASSERT_EQ(alone.size(), 1 + vars.size());
  ASSERT_EQ(rounded.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_TRUE(testing::AllClose(alone[i], rounded[i], 0, 0)) << i;
  }

  // A hidden output stored as halves alone, then read by an fp32 product,
  // copied, or asked for on its own device (To gives the tensor itself):
  // each reads the rounded values.
  enum class Read { kProduct, kCopy, kSameDevice };
  for (const Read read : {Read::kProduct, Read::kCopy, Read::kSameDevice}) {
    SCOPED_TRACE(read == Read::kProduct ? "fp32 product"
                 : read == Read::kCopy  ? "copied"
                                        : "To its own device");
    absl::StatusOr<Tensor> h = ops::MatMul(*x, vars[0]);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(
        ops::RoundOutput(*h, ops::OutputRounding::kBf16HalvesOnly).ok());
    ASSERT_NE(h->bf16_rendering(), nullptr);
    EXPECT_FALSE(h->bf16_rendering()->values_rounded);
    const absl::StatusOr<Tensor> rounded_h = ops::RoundedToBFloat16(*h);
    ASSERT_TRUE(rounded_h.ok()) << rounded_h.status();
    absl::StatusOr<Tensor> want = ops::MatMul(*rounded_h, vars[2]);
    absl::StatusOr<Tensor> got = absl::InternalError("not run");
    if (read == Read::kCopy) {
      want = rounded_h->To(Device::Cpu());
      got = h->To(Device::Cpu());
    } else if (read == Read::kSameDevice) {
      want = rounded_h->To(Device::Cpu());
      got = h->To(h->device());
      // The f32 bytes themselves, read past the rendering.
      if (got.ok()) got = ops::Cast(*got, DType::kF64);
      if (got.ok()) got = ops::Cast(*got, DType::kF32);
      if (got.ok()) got = got->To(Device::Cpu());
    } else {
      got = ops::MatMul(*h, vars[2]);
      if (got.ok()) got = got->To(Device::Cpu());
      if (want.ok()) want = want->To(Device::Cpu());
    }
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    ASSERT_NE(h->bf16_rendering(), nullptr);
    EXPECT_TRUE(h->bf16_rendering()->values_rounded);
    EXPECT_TRUE(testing::AllClose(*got, *want, 0, 0));
  }
}

// Which built layers read their input only as products' operands, and
// whose gradients read at most their output's halves: dense layers, linear
// or relu with a bias; nothing else.
TEST(MixedBFloat16Test, OnlyDenseLayersStoreOrReadHalvesAlone) {
  struct Row {
    std::string type;
    Shape input;
    Values values;
    bool only_products, halves_only;
  };
  const std::vector<Row> rows = {
      {"dense", {2, 3}, {{"units", int64_t{4}}}, true, true},
      {"dense",
       {2, 3},
       {{"units", int64_t{4}}, {"activation", std::string("relu")}},
       true,
       true},
      {"dense",
       {2, 3},
       {{"units", int64_t{4}},
        {"activation", std::string("relu")},
        {"use_bias", false}},
       true,
       false},
      {"dense",
       {2, 3},
       {{"units", int64_t{4}}, {"activation", std::string("tanh")}},
       true,
       false},
      {"dense",
       {2, 5, 3},
       {{"units", int64_t{4}}, {"activation", std::string("gelu")}},
       true,
       false},
      {"multi_head_attention",
       {2, 5, 4},
       {{"num_heads", int64_t{2}}},
       false,
       false},
      {"layer_normalization", {2, 3}, {}, false, false},
      {"dropout", {2, 3}, {{"rate", 0.5}}, false, false},
      {"flatten", {2, 3}, {}, false, false},
      {"conv2d",
       {2, 5, 5, 1},
       {{"filters", int64_t{2}},
        {"kernel_size", int64_t{3}},
        {"activation", std::string("relu")}},
       false,
       false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.type);
    LayerBuilder b(1, Device::Cpu());
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        b.BuildSequence({Spec(row.type, row.values)}, row.input);
    ASSERT_TRUE(layer.ok()) << layer.status();
    EXPECT_EQ((*layer)->InputOnlyFeedsProducts(), row.only_products);
    EXPECT_EQ((*layer)->OutputNeedsOnlyHalves(), row.halves_only);
  }
}

// Which built layers read their input as a product's operand.
TEST(MixedBFloat16Test, DenseAndAttentionInputsFeedProducts) {
  auto feeds = [](const std::string& type, Shape input, Values values) {
    LayerBuilder b(1, Device::Cpu());
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        b.BuildSequence({Spec(type, std::move(values))}, input);
    EXPECT_TRUE(layer.ok()) << layer.status();
    return layer.ok() && (*layer)->InputFeedsProduct();
  };
  EXPECT_TRUE(feeds("dense", {2, 3}, {{"units", int64_t{4}}}));
  EXPECT_TRUE(
      feeds("multi_head_attention", {2, 5, 4}, {{"num_heads", int64_t{2}}}));
  EXPECT_FALSE(feeds("layer_normalization", {2, 3}, {}));
  EXPECT_FALSE(feeds("conv2d", {2, 5, 5, 1},
                     {{"filters", int64_t{2}}, {"kernel_size", int64_t{3}}}));
  EXPECT_FALSE(feeds("flatten", {2, 3}, {}));
}

// Columns sized to their content: a layer name longer than Keras's 36
// columns moves the shape and parameter columns of every row alike.
TEST(ModelTest, SummaryColumnsAlignWithLongLayerNames) {
  ModelDef def;
  def.input_shape = {3};
  LayerSpec named = Spec("dense", {{"units", 123456}});
  named.name = std::string(50, 'n');
  def.layers = {Spec("dense", {{"units", 4}}), named};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::string> lines = absl::StrSplit((*m)->Summary(), '\n');
  ASSERT_GE(lines.size(), 4u);
  const size_t shape_at = lines[0].find("Output Shape");
  const size_t params_end = lines[0].find("Param #") + 7;
  ASSERT_NE(shape_at, std::string::npos);
  EXPECT_EQ(lines[1], std::string(lines[1].size(), '='));
  EXPECT_GE(lines[1].size(), lines[0].size());
  for (int row : {2, 3}) {
    SCOPED_TRACE(lines[row]);
    EXPECT_EQ(lines[row].find("(None, "), shape_at);
    EXPECT_EQ(lines[row].size(), params_end);  // Params right-aligned.
    EXPECT_EQ(lines[row][shape_at - 1], ' ');
    EXPECT_EQ(lines[row][shape_at - 2], ' ');  // Names never touch shapes.
  }
  EXPECT_THAT(lines[3], HasSubstr(std::string(50, 'n') + " (dense)"));
  EXPECT_THAT(lines[3], HasSubstr(" 617280"));  // 4 * 123456 + 123456.
}

// Short names keep Keras's layout: 36, 24 and 12 columns.
TEST(ModelTest, SummaryKeepsKerasWidthsForShortNames) {
  ModelDef def;
  def.input_shape = {3};
  def.layers = {Spec("dense", {{"units", 4}})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::string> lines = absl::StrSplit((*m)->Summary(), '\n');
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].find("Output Shape"), 37u);
  EXPECT_EQ(lines[1], std::string(78, '='));
  EXPECT_EQ(lines[2], absl::StrFormat("%-36s %-24s %12d", "dense (dense)",
                                      "(None, 4)", 16));
}

TEST(ModelTest, IdentityShortcutMustKeepTheShape) {
  ModelDef def;
  def.input_shape = {8, 8, 3};
  def.layers = {Spec("residual", {},
                     {Spec("conv2d", {{"filters", 4},
                                      {"kernel_size", 3},
                                      {"strides", 2},
                                      {"padding", std::string("same")}})})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("model.layers[?] (residual): the main branch gives "
                        "[1,4,4,4] but the identity shortcut gives "
                        "[1,8,8,3]"));
}

TEST(ModelTest, ProjectionShortcutDownsamples) {
  ModelDef def;
  def.input_shape = {8, 8, 3};
  LayerSpec block = Spec("residual", {},
                         {Spec("conv2d", {{"filters", 4},
                                          {"kernel_size", 3},
                                          {"strides", 2},
                                          {"padding", std::string("same")}})});
  block.shortcut = std::vector<LayerSpec>{
      Spec("conv2d", {{"filters", 4}, {"kernel_size", 1}, {"strides", 2}})};
  def.layers = {block};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_shape(), (Shape{4, 4, 4}));
}

TEST(ModelTest, GlobalAveragePoolingIsTheSpatialMean) {
  ModelDef def;
  def.input_shape = {3, 2, 2};
  def.layers = {Spec("global_average_pooling2d")};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                                       {1, 3, 2, 2});
  auto y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToVector<float>(), (std::vector<float>{6, 7}));
  def.layers = {Spec("global_average_pooling2d", {{"keepdims", true}})};
  m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_shape(), (Shape{1, 1, 2}));
}

// The spatial maximum of each channel, feeding a dense layer (its shape as
// built); an empty image has none.
TEST(ModelTest, GlobalMaxPoolingIsTheSpatialMaximum) {
  ModelDef def;
  def.input_shape = {3, 2, 2};
  def.layers = {Spec("global_max_pooling2d"), Spec("dense", {{"units", 1}})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_shape(), (Shape{1}));
  def.layers = {Spec("global_max_pooling2d")};
  m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  Tensor x = Tensor::FromVector<float>({1, 12, 3, 4, 5, 6, 7, 8, 9, 10, 11, 2},
                                       {1, 3, 2, 2});
  auto y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToVector<float>(), (std::vector<float>{11, 12}));
  def.input_shape = {0, 3, 2};
  m = Model::Build(def, 1, Device::Cpu());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("an empty image has no maximum"));
}

// Dense on an image acts on its last axis, as Keras's Dense does (a 1x1
// convolution): [batch, H, W, C] -> [batch, H, W, units], each position's
// C values times the kernel plus the bias.
TEST(ModelTest, DenseActsOnTheLastAxisOfAnyRank) {
  ModelDef def;
  def.input_shape = {2, 3, 4};
  def.layers = {Spec("dense", {{"units", 5}})};
  auto m = Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_shape(), (Shape{2, 3, 5}));
  const std::vector<Variable*> vars = (*m)->variables();
  ASSERT_EQ(vars.size(), 2u);
  ASSERT_TRUE(
      vars[1]
          ->Assign(Tensor::FromVector<float>({0.5, -1, 2, 0.25, 3}, {5}))
          .ok());
  const std::vector<float> kernel = vars[0]->value().ToVector<float>();
  const std::vector<float> bias = vars[1]->value().ToVector<float>();
  std::vector<float> xs(2 * 2 * 3 * 4);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.1f * float(i % 7) - 0.3f;
  const Tensor x = Tensor::FromVector<float>(xs, {2, 2, 3, 4});
  auto y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (Shape{2, 2, 3, 5}));
  const std::vector<float> got = y->ToVector<float>();
  for (int p = 0; p < 2 * 2 * 3; ++p) {
    for (int u = 0; u < 5; ++u) {
      double want = bias[u];
      for (int c = 0; c < 4; ++c)
        want += double(xs[p * 4 + c]) * kernel[c * 5 + u];
      EXPECT_NEAR(got[p * 5 + u], want, 1e-5)
          << "position " << p << " unit " << u;
    }
  }
  // Its parameter count is the 1x1 convolution's: 4 * 5 + 5.
  EXPECT_THAT((*m)->Summary(), HasSubstr("Total params: 25"));
}

// spatial_dropout3d, 2d and 1d drop whole channels of an
// example while training (each kept one scaled by 1 / (1 - rate)), leave
// the input as it is otherwise, and draw the same mask for a replica's
// shard as for the whole batch (row_offset).
TEST(ModelTest, SpatialDropoutDropsWholeChannels) {
  for (const auto& [type, example] : std::vector<std::pair<std::string, Shape>>{
           {"spatial_dropout3d", {2, 3, 3, 4}},
           {"spatial_dropout2d", {3, 3, 4}},
           {"spatial_dropout1d", {5, 4}}}) {
    SCOPED_TRACE(type);
    ModelDef def;
    def.input_shape = example;
    def.layers = {Spec(type, {{"rate", 0.5}})};
    def.layers[0].path = "model.layers[0]";
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Build(def, 1, Device::Cpu());
    ASSERT_TRUE(m.ok()) << m.status();
    Shape shape = example;
    shape.insert(shape.begin(), 8);
    const Tensor x = Tensor::HostFull(DType::kF32, shape, 1.0);
    const ForwardContext train{true, 77, 0};
    absl::StatusOr<Tensor> y = (*m)->Call(x, train);
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<float> v = y->ToVector<float>();
    const int64_t per_example = x.num_elements() / 8, channels = 4;
    int dropped = 0;
    for (int64_t n = 0; n < 8; ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        const float first = v[n * per_example + c];
        EXPECT_TRUE(first == 0.0f || first == 2.0f) << first;
        dropped += first == 0.0f;
        for (int64_t i = c; i < per_example; i += channels) {
          EXPECT_EQ(v[n * per_example + i], first) << n << " " << c;
        }
      }
    }
    EXPECT_GT(dropped, 4);  // Of 32 channels, about half (a fixed seed).
    EXPECT_LT(dropped, 28);
    EXPECT_TRUE(testing::SameBits(*(*m)->Call(x, {}), x));
    // The second half of the batch as a shard at row 4.
    absl::StatusOr<Tensor> half = x.SliceRows(4, 4);
    ASSERT_TRUE(half.ok());
    absl::StatusOr<Tensor> shard = (*m)->Call(*half, {true, 77, 4});
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_TRUE(testing::SameBits(*shard, *y->SliceRows(4, 4)));
  }
  ModelDef wrong;
  wrong.input_shape = {5, 4};
  wrong.layers = {Spec("spatial_dropout2d", {{"rate", 0.5}})};
  wrong.layers[0].path = "model.layers[0]";
  EXPECT_THAT(
      std::string(Model::Build(wrong, 1, Device::Cpu()).status().message()),
      HasSubstr("expects NHWC input, got [1,5,4]"));
  wrong.layers = {Spec("spatial_dropout3d", {{"rate", 0.5}})};
  wrong.layers[0].path = "model.layers[0]";
  EXPECT_THAT(
      std::string(Model::Build(wrong, 1, Device::Cpu()).status().message()),
      HasSubstr("expects [batch, d1, d2, d3, channels] input, got [1,5,4]"));
}

// unit_normalization scales each last-axis vector to norm 1; an all-zero
// vector stays zeros with a finite gradient (TensorFlow's: the capped 1e12).
TEST(ModelTest, UnitNormalizationOfAZeroVector) {
  ModelDef def;
  def.input_shape = {3};
  def.layers = {Spec("unit_normalization")};
  def.layers[0].path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Build(def, 1, Device::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  const Tensor x = Tensor::FromVector<float>({0, 0, 0, 3, 4, 0}, {2, 3});
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = (*m)->Call(x, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToVector<float>(), (std::vector<float>{0, 0, 0, 0.6f, 0.8f, 0}));
  absl::StatusOr<Tensor> sum = ops::ReduceSum(*y);
  ASSERT_TRUE(sum.ok());
  auto grads = tape.Gradient(*sum, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const std::vector<float> g = (*grads)[0]->ToVector<float>();
  EXPECT_EQ(std::vector<float>(g.begin(), g.begin() + 3),
            (std::vector<float>{1e12f, 1e12f, 1e12f}));
  for (float v : g) EXPECT_TRUE(std::isfinite(v));
  // axis [1, 2] of [2, 2, 2]: each example's four values together (Keras's
  // axis list); -1 of them the last only; the batch axis refused.
  // The outputs of unit_normalization over `axis` for an input [2, 2, 2].
  auto normalized = [](std::vector<int64_t> axis, std::vector<float> in) {
    ModelDef def;
    def.input_shape = {2, 2};
    def.layers = {Spec("unit_normalization", {{"axis", std::move(axis)}})};
    def.layers[0].path = "model.layers[0]";
    auto m = Model::Build(def, 1, Device::Cpu());
    EXPECT_TRUE(m.ok()) << m.status();
    absl::StatusOr<Tensor> out =
        (*m)->Call(Tensor::FromVector<float>(in, {2, 2, 2}), {});
    EXPECT_TRUE(out.ok()) << out.status();
    return out->ToVector<float>();
  };
  EXPECT_EQ(normalized({1, -1}, {1, 1, 1, 1, 0, 3, 0, 4}),
            (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0, 0.6f, 0, 0.8f}));
  // axis [1] of [2, 2, 2]: the rows of each example (not its last axis).
  EXPECT_EQ(normalized({1}, {3, 0, 4, 2, 0, 0, 0, 0}),
            (std::vector<float>{0.6f, 0, 0.8f, 1, 0, 0, 0, 0}));
  // One integer for a list of it, as a spec built in code may hold it.
  ModelDef one;
  one.input_shape = {2, 2};
  one.layers = {Spec("unit_normalization", {{"axis", int64_t{1}}})};
  one.layers[0].path = "model.layers[0]";
  auto one_axis = Model::Build(one, 1, Device::Cpu());
  ASSERT_TRUE(one_axis.ok()) << one_axis.status();
  absl::StatusOr<Tensor> rows = (*one_axis)->Call(
      Tensor::FromVector<float>({3, 0, 4, 2, 0, 0, 0, 0}, {2, 2, 2}), {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->ToVector<float>(),
            (std::vector<float>{0.6f, 0, 0.8f, 1, 0, 0, 0, 0}));
  ModelDef both;
  both.input_shape = {2, 2};
  both.layers = {
      Spec("unit_normalization", {{"axis", std::vector<int64_t>{0}}})};
  both.layers[0].path = "model.layers[0]";
  EXPECT_THAT(
      std::string(Model::Build(both, 1, Device::Cpu()).status().message()),
      HasSubstr("axis: 0 is not an example axis of input [1,2,2]"));
}

// The cnn preset and its expansion written out by hand build the same
// variables, initial values included, and compute the same logits.
TEST(ModelTest, PresetEqualsItsExpansion) {
  auto preset = ExpandPreset("cnn",
                             {{"conv_filters", std::vector<int64_t>{4, 8}},
                              {"dense_units", 16},
                              {"dropout", 0.25}},
                             {28, 28, 1}, 10);
  ASSERT_TRUE(preset.ok()) << preset.status();
  ModelDef by_hand;
  by_hand.input_shape = {28, 28, 1};
  const Values conv = {{"kernel_size", 5},
                       {"padding", std::string("same")},
                       {"activation", std::string("relu")}};
  Values c1 = conv, c2 = conv;
  c1.push_back({"filters", 4});
  c2.push_back({"filters", 8});
  by_hand.layers = {
      Spec("conv2d", c1),
      Spec("max_pooling2d"),
      Spec("conv2d", c2),
      Spec("max_pooling2d"),
      Spec("flatten"),
      Spec("dense", {{"units", 16}, {"activation", std::string("relu")}}),
      Spec("dropout", {{"rate", 0.25}}),
      Spec("dense", {{"units", 10}})};
  auto a = Model::Build(*preset, 3, Device::Cpu());
  auto b = Model::Build(by_hand, 3, Device::Cpu());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(Names(**a), Names(**b));
  for (size_t i = 0; i < (*a)->variables().size(); ++i) {
    EXPECT_TRUE(testing::AllClose((*a)->variables()[i]->value(),
                                  (*b)->variables()[i]->value(), 0, 0));
  }
  EXPECT_THAT((*a)->Summary(), HasSubstr("computed inside the previous layer"));
  Tensor x = testing::RandomTensor({2, 28, 28, 1}, 9, DType::kF32);
  ForwardContext train{true, 77, 0};
  EXPECT_TRUE(
      testing::AllClose(*(*a)->Call(x, train), *(*b)->Call(x, train), 0, 0));
}

}  // namespace
}  // namespace mirrortrain::models
