// Keras masking (models/masking.h): the mask each layer passes on, and
// what the layers that read one compute, checked by the properties Keras's
// semantics imply: a recurrent layer, attention or a global average over a
// right-padded row gives what it gives on the row without its padding;
// masked steps keep the state before them (0 in front); a bidirectional
// layer's masked steps are 0. Whole training runs against Keras itself are
// tests/trainer/keras_training_test.cc's mtext, tagger, mattn and mreg.
#include "models/masking.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "models/layer_registry.h"
#include "models/losses.h"
#include "models/model.h"
#include "tensor/ops/array_ops.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

using Values = std::vector<std::pair<std::string, ParamValue>>;

LayerSpec Spec(const std::string& type, Values values = {}) {
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(values));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

LayerSpec Embedding(bool mask_zero = true) {
  return Spec("embedding", {{"input_dim", int64_t{9}},
                            {"output_dim", int64_t{4}},
                            {"mask_zero", mask_zero}});
}

absl::StatusOr<std::unique_ptr<Model>> TryBuild(const Shape& input,
                                                std::vector<LayerSpec> layers) {
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i].path = "model.layers[" + std::to_string(i) + "]";
  }
  return Model::Build(ModelDef{input, std::move(layers)}, 5, Device::Cpu());
}

std::unique_ptr<Model> Build(const Shape& input,
                             std::vector<LayerSpec> layers) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      TryBuild(input, std::move(layers));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// Ids [3, 6]: row 0 of length 4 right-padded, row 1 whole, row 2 of length
// 3 left-padded.
const std::vector<float> kIds = {3, 1, 4, 1, 0, 0,  //
                                 5, 2, 6, 5, 3, 5,  //
                                 0, 0, 0, 8, 7, 2};
Tensor Ids() { return Tensor::FromVector<float>(kIds, {3, 6}); }
// Row `r`'s ids without padding, as a batch of one.
Tensor Unpadded(int r) {
  std::vector<float> row;
  for (int t = 0; t < 6; ++t) {
    if (kIds[r * 6 + t] != 0) row.push_back(kIds[r * 6 + t]);
  }
  const int64_t n = static_cast<int64_t>(row.size());
  return Tensor::FromVector<float>(row, {1, n});
}

// Row r of x [b, ...] (steps [first, first + n) when x has steps).
Tensor Row(const Tensor& x, int64_t r) { return *x.SliceRows(r, 1); }
Tensor Steps(const Tensor& x, int64_t first, int64_t n) {
  return *ops::Slice(x, 1, first, n);
}

TEST(MaskTest, NotEqualCountsNaNAsDifferent) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::FromVector<float>({0, 1, nan, -0.0f}, {4});
  absl::StatusOr<Tensor> m = NotEqualMask(x, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ToVector<float>(), (std::vector<float>{0, 1, 1, 0}));
  // A step is masked only when every feature equals the value.
  const Tensor steps =
      Tensor::FromVector<float>({-1, -1, -1, 2, 0, -1, -1, -1}, {1, 4, 2});
  absl::StatusOr<Tensor> any = AnyNotEqualMask(steps, -1);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->shape(), (Shape{1, 4}));
  EXPECT_EQ(any->ToVector<float>(), (std::vector<float>{0, 1, 1, 0}));
}

// The last state over a padded row is the last state over the row alone,
// right- or left-padded (masked steps in front keep the zero state).
TEST(MaskTest, RecurrentLayersSkipMaskedSteps) {
  for (const char* type : {"lstm", "gru", "simple_rnn"}) {
    SCOPED_TRACE(type);
    const LayerSpec rnn = Spec(type, {{"units", int64_t{3}}});
    std::unique_ptr<Model> masked = Build({6}, {Embedding(), rnn});
    ASSERT_NE(masked, nullptr);
    EXPECT_FALSE(masked->output_masked());
    absl::StatusOr<Tensor> y = masked->Call(Ids(), {});
    ASSERT_TRUE(y.ok()) << y.status();
    for (int r = 0; r < 3; ++r) {
      const Tensor alone = Unpadded(r);
      // The same seed: the same variables for any number of steps.
      std::unique_ptr<Model> plain =
          Build({alone.dim(1)}, {Embedding(false), rnn});
      absl::StatusOr<Tensor> want = plain->Call(alone, {});
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_TRUE(testing::AllClose(Row(*y, r), *want, 0, 0)) << "row " << r;
    }
  }
}

// Every step's output: a masked step repeats the step before it (0 in
// front), and the mask passes on.
TEST(MaskTest, MaskedStepsRepeatTheOutputBeforeThem) {
  std::unique_ptr<Model> model = Build(
      {6}, {Embedding(),
            Spec("lstm", {{"units", int64_t{3}}, {"return_sequences", true}})});
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->output_masked());
  Tensor mask;
  absl::StatusOr<Tensor> y = model->Call(Ids(), {}, &mask);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_TRUE(mask.defined());
  EXPECT_EQ(mask.ToVector<float>(),
            (std::vector<float>{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1,
                                1, 1}));
  const Tensor last_real = Steps(Row(*y, 0), 3, 1);
  for (int64_t t : {4, 5}) {
    EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 0), t, 1), last_real, 0, 0));
  }
  const Tensor zeros = *Tensor::Zeros(DType::kF32, {1, 1, 3});
  EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 2), 0, 1), zeros, 0, 0));
  EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 2), 2, 1), zeros, 0, 0));
}

// Keras's Bidirectional sets zero_output_for_mask: masked steps give 0,
// and the others what the row alone gives.
TEST(MaskTest, BidirectionalMaskedStepsAreZero) {
  LayerSpec bi = Spec("bidirectional");
  bi.layers = {
      Spec("gru", {{"units", int64_t{2}}, {"return_sequences", true}})};
  std::unique_ptr<Model> model = Build({6}, {Embedding(), bi});
  ASSERT_NE(model, nullptr);
  absl::StatusOr<Tensor> y = model->Call(Ids(), {});
  ASSERT_TRUE(y.ok()) << y.status();
  const Tensor zeros = *Tensor::Zeros(DType::kF32, {1, 2, 4});
  EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 0), 4, 2), zeros, 0, 0));
  EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 2), 0, 2), zeros, 0, 0));
  const Tensor alone = Unpadded(0);
  std::unique_ptr<Model> plain = Build({4}, {Embedding(false), bi});
  absl::StatusOr<Tensor> want = plain->Call(alone, {});
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 0), 0, 4), *want, 0, 0));
}

// Attention leaves masked keys out: a right-padded row's unmasked steps
// attend as the row alone does (causal or not); the global average is
// over the unmasked steps.
TEST(MaskTest, AttentionAndAverageSkipMaskedSteps) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const LayerSpec attention =
        Spec("multi_head_attention",
             {{"num_heads", int64_t{2}}, {"causal", causal}});
    std::unique_ptr<Model> model = Build({6}, {Embedding(), attention});
    ASSERT_NE(model, nullptr);
    EXPECT_TRUE(model->output_masked());
    absl::StatusOr<Tensor> y = model->Call(Ids(), {});
    ASSERT_TRUE(y.ok()) << y.status();
    std::unique_ptr<Model> plain = Build({4}, {Embedding(false), attention});
    absl::StatusOr<Tensor> want = plain->Call(Unpadded(0), {});
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(testing::AllClose(Steps(Row(*y, 0), 0, 4), *want, 1e-6, 1e-7));
  }
  std::unique_ptr<Model> pooled =
      Build({6}, {Embedding(), Spec("global_average_pooling1d")});
  ASSERT_NE(pooled, nullptr);
  EXPECT_FALSE(pooled->output_masked());
  absl::StatusOr<Tensor> y = pooled->Call(Ids(), {});
  ASSERT_TRUE(y.ok()) << y.status();
  for (int r = 0; r < 3; ++r) {
    const Tensor alone = Unpadded(r);
    std::unique_ptr<Model> plain = Build(
        {alone.dim(1)}, {Embedding(false), Spec("global_average_pooling1d")});
    absl::StatusOr<Tensor> want = plain->Call(alone, {});
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(testing::AllClose(Row(*y, r), *want, 1e-6, 1e-7)) << r;
  }
}

// The masking layer zeroes the steps it masks; a layer without Keras's
// supports_masking drops the mask and is named; a layer that passes it
// keeps it.
TEST(MaskTest, MaskingLayerAndWhereMasksEnd) {
  const Tensor x =
      Tensor::FromVector<float>({1, 2, -1, -1, 3, -1, -1, -1}, {2, 2, 2});
  std::unique_ptr<Model> model =
      Build({2, 2}, {Spec("masking", {{"mask_value", -1.0}}),
                     Spec("dense", {{"units", int64_t{2}}})});
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->output_masked());
  EXPECT_TRUE(model->mask_warnings().empty());
  std::unique_ptr<Model> zeroes =
      Build({2, 2}, {Spec("masking", {{"mask_value", -1.0}})});
  Tensor mask;
  absl::StatusOr<Tensor> y = zeroes->Call(x, {}, &mask);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToVector<float>(),
            (std::vector<float>{1, 2, 0, 0, 3, -1, 0, 0}));
  EXPECT_EQ(mask.ToVector<float>(), (std::vector<float>{1, 0, 1, 0}));

  std::unique_ptr<Model> dropped =
      Build({6}, {Embedding(), Spec("conv1d", {{"filters", int64_t{2}},
                                               {"kernel_size", int64_t{1}}})});
  ASSERT_NE(dropped, nullptr);
  EXPECT_FALSE(dropped->output_masked());
  ASSERT_EQ(dropped->mask_warnings().size(), 1u);
  EXPECT_TRUE(absl::StrContains(dropped->mask_warnings()[0],
                                "model.layers[1] (conv1d) drops the mask"))
      << dropped->mask_warnings()[0];
  EXPECT_TRUE(
      absl::StrContains(dropped->Summary(), "warning: model.layers[1]"));
  Tensor none;
  ASSERT_TRUE(dropped->Call(Ids(), {}, &none).ok());
  EXPECT_FALSE(none.defined());
}

// Batch normalization while training: the statistics of the unmasked
// steps alone (Keras's masked moments), as of a batch holding only them.
TEST(MaskTest, BatchStatisticsSkipMaskedSteps) {
  std::unique_ptr<Model> masked =
      Build({6}, {Embedding(), Spec("batch_normalization")});
  ASSERT_NE(masked, nullptr);
  EXPECT_TRUE(masked->output_masked());
  const ForwardContext training{.training = true};
  absl::StatusOr<Tensor> y = masked->Call(Ids(), training);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<float> tokens;
  for (float id : kIds) {
    if (id != 0) tokens.push_back(id);
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::unique_ptr<Model> plain =
      Build({n}, {Embedding(false), Spec("batch_normalization")});
  absl::StatusOr<Tensor> want =
      plain->Call(Tensor::FromVector<float>(tokens, {1, n}), training);
  ASSERT_TRUE(want.ok()) << want.status();
  int64_t k = 0;
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 6; ++t) {
      if (kIds[r * 6 + t] == 0) continue;
      EXPECT_TRUE(testing::AllClose(Steps(Row(*y, r), t, 1),
                                    Steps(*want, k++, 1), 1e-5, 1e-6))
          << "row " << r << " step " << t;
    }
  }
  // The moving statistics (after embeddings, gamma, beta) moved towards
  // the same numbers.
  for (size_t v : {3, 4}) {
    EXPECT_TRUE(testing::AllClose(masked->variables()[v]->value(),
                                  plain->variables()[v]->value(), 1e-5, 1e-7))
        << masked->variables()[v]->name();
  }
}

// time_distributed hands its layer each step's column of the mask: a batch
// normalization there normalises step 0 by rows 0 and 1 alone (row 2's
// first step is padding).
TEST(MaskTest, TimeDistributedHandsItsLayerEachStepsMask) {
  LayerSpec per_step = Spec("time_distributed");
  per_step.layers = {Spec("batch_normalization")};
  std::unique_ptr<Model> masked = Build({6}, {Embedding(), per_step});
  ASSERT_NE(masked, nullptr);
  EXPECT_TRUE(masked->output_masked());
  EXPECT_TRUE(masked->mask_warnings().empty());
  const ForwardContext training{.training = true};
  absl::StatusOr<Tensor> y = masked->Call(Ids(), training);
  ASSERT_TRUE(y.ok()) << y.status();
  std::unique_ptr<Model> plain = Build({1}, {Embedding(false), per_step});
  absl::StatusOr<Tensor> want =
      plain->Call(Tensor::FromVector<float>({3, 5}, {2, 1}), training);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(
      testing::AllClose(*Steps(*y, 0, 1).SliceRows(0, 2), *want, 1e-5, 1e-6));
}

// Under mixed bfloat16 the inputs are rounded, and so is the value they are
// compared with (Keras's not_equal casts it to the inputs' bfloat16): 0.1
// masks the steps of 0.1.
TEST(MaskTest, MaskingComparesBFloat16InputsWithARoundedValue) {
  std::unique_ptr<Model> model =
      Build({2, 2}, {Spec("masking", {{"mask_value", 0.1}})});
  ASSERT_NE(model, nullptr);
  model->SetMixedBFloat16(true);
  const Tensor x =
      Tensor::FromVector<float>({0.1f, 0.1f, 0.5f, 0.1f}, {1, 2, 2});
  Tensor mask;
  ASSERT_TRUE(model->Call(x, {}, &mask).ok());
  EXPECT_EQ(mask.ToVector<float>(), (std::vector<float>{0, 1}));
}

// Keras's merges: an elementwise merge keeps a mask only when both branches
// have one; a concatenation counts a branch without one as all 1.
TEST(MaskTest, MergesCombineTheBranchesMasks) {
  const LayerSpec conv =
      Spec("conv1d", {{"filters", int64_t{4}}, {"kernel_size", int64_t{1}}});
  const LayerSpec dense = Spec("dense", {{"units", int64_t{4}}});
  struct Case {
    const char* type;
    LayerSpec main;
    bool masked;
    std::vector<float> mask;  // Row 0's.
  };
  const std::vector<Case> cases = {
      {"residual", dense, true, {1, 1, 1, 1, 0, 0}},
      {"residual", conv, false, {}},
      {"concatenate", conv, true, {1, 1, 1, 1, 1, 1}},
      {"concatenate", dense, true, {1, 1, 1, 1, 0, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.type) + " of " + c.main.type);
    LayerSpec merge = Spec(c.type);
    merge.layers = {c.main};
    std::unique_ptr<Model> model = Build({6}, {Embedding(), merge});
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->output_masked(), c.masked);
    Tensor mask;
    ASSERT_TRUE(model->Call(Ids(), {}, &mask).ok());
    ASSERT_EQ(mask.defined(), c.masked);
    if (c.masked) {
      EXPECT_EQ(Row(mask, 0).ToVector<float>(), c.mask);
    }
  }
  // parallel: the same rules over any number of branches.
  for (const auto& [merge, masked] : std::vector<std::pair<std::string, bool>>{
           {"add", false}, {"concatenate", true}}) {
    SCOPED_TRACE("parallel " + merge);
    LayerSpec parallel = Spec("parallel", {{"merge", merge}});
    parallel.layers = {Spec("identity"), dense, conv};
    std::unique_ptr<Model> model = Build({6}, {Embedding(), parallel});
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->output_masked(), masked);
    Tensor mask;
    ASSERT_TRUE(model->Call(Ids(), {}, &mask).ok());
    ASSERT_EQ(mask.defined(), masked);
    if (masked) {
      EXPECT_EQ(Row(mask, 0).ToVector<float>(),
                (std::vector<float>{1, 1, 1, 1, 1, 1}));
    }
  }
  LayerSpec passing = Spec("parallel", {{"merge", std::string("average")}});
  passing.layers = {Spec("identity"), dense};
  std::unique_ptr<Model> model = Build({6}, {Embedding(), passing});
  ASSERT_NE(model, nullptr);
  Tensor mask;
  ASSERT_TRUE(model->Call(Ids(), {}, &mask).ok());
  ASSERT_TRUE(mask.defined());
  EXPECT_EQ(Row(mask, 0).ToVector<float>(),
            (std::vector<float>{1, 1, 1, 1, 0, 0}));
}

// With dropout, Keras's attention (its Softmax layer's path) gives a query
// whose every key is masked no attention at all: row 2's padded steps are
// then the output projection's bias (0 as built), where without dropout
// they attend to all alike (the fused path's uniform weights).
TEST(MaskTest, AttentionWithDropoutGivesFullyMaskedQueriesNothing) {
  for (double dropout : {0.0, 0.5}) {
    SCOPED_TRACE(dropout);
    std::unique_ptr<Model> model = Build(
        {6},
        {Embedding(), Spec("multi_head_attention",
                           {{"num_heads", int64_t{2}}, {"dropout", dropout}})});
    ASSERT_NE(model, nullptr);
    absl::StatusOr<Tensor> y = model->Call(Ids(), {});  // Inference.
    ASSERT_TRUE(y.ok()) << y.status();
    const Tensor padded = Steps(Row(*y, 2), 0, 3);
    double largest = 0;
    for (int64_t i = 0; i < padded.num_elements(); ++i) {
      largest = std::max(largest, std::abs(padded.ScalarAt(i)));
    }
    if (dropout > 0) {
      EXPECT_EQ(largest, 0.0);
    } else {
      EXPECT_GT(largest, 1e-4);
    }
  }
}

// Masks from two masking layers (steps all 0 in front, all 1 in the main
// branch) merge as Keras's: an OR, so a step masked on one side only stays.
TEST(MaskTest, MergedMasksAreTheOrOfTheBranches) {
  const Tensor x = Tensor::FromVector<float>({0, 0, 1, 1, 2, 3,  //
                                              5, 6, 0, 0, 1, 1},
                                             {2, 3, 2});
  LayerSpec residual = Spec("residual");
  residual.layers = {Spec("masking", {{"mask_value", 1.0}})};
  std::unique_ptr<Model> model = Build({3, 2}, {Spec("masking"), residual});
  ASSERT_NE(model, nullptr);
  Tensor mask;
  ASSERT_TRUE(model->Call(x, {}, &mask).ok());
  // Front: {0, 1, 1}, {1, 0, 1}; main (1s masked, front's 0s kept): {1, 0,
  // 1}, {1, 1, 0}.
  EXPECT_EQ(mask.ToVector<float>(), (std::vector<float>{1, 1, 1, 1, 1, 1}));
  std::unique_ptr<Model> front_only = Build({3, 2}, {Spec("masking")});
  ASSERT_TRUE(front_only->Call(x, {}, &mask).ok());
  EXPECT_EQ(mask.ToVector<float>(), (std::vector<float>{0, 1, 1, 1, 0, 1}));
}

// Keras's Multiply counts a masked step of a branch as 1 (and zeroes the
// product's masked steps when every branch is masked); its Maximum takes
// the other side's value at a masked step, in order.
TEST(MaskTest, MaskedMergesChangeTheValuesAsKerasDoes) {
  const LayerSpec conv =
      Spec("conv1d", {{"filters", int64_t{4}}, {"kernel_size", int64_t{1}}});
  const LayerSpec dense = Spec("dense", {{"units", int64_t{4}}});
  const Tensor mask = *NotEqualMask(Ids(), 0);
  auto outputs = [&](const LayerSpec& branch) {
    std::unique_ptr<Model> m = Build({6}, {Embedding(false), branch});
    return *m->Call(Ids(), {});
  };
  const Tensor embedded = *Build({6}, {Embedding(false)})->Call(Ids(), {});
  for (const char* merge : {"multiply", "maximum"}) {
    for (bool both_masked : {false, true}) {
      SCOPED_TRACE(std::string(merge) + (both_masked ? " both" : " one"));
      const LayerSpec& other = both_masked ? dense : conv;
      LayerSpec parallel = Spec("parallel", {{"merge", std::string(merge)}});
      parallel.layers = {Spec("identity"), other};
      absl::StatusOr<Tensor> got =
          Build({6}, {Embedding(), parallel})->Call(Ids(), {});
      ASSERT_TRUE(got.ok()) << got.status();
      const Tensor y = outputs(other);
      std::vector<float> want;
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        const bool kept = mask.ScalarAt(i / 4) != 0;
        const float e = static_cast<float>(embedded.ScalarAt(i));
        const float o = static_cast<float>(y.ScalarAt(i));
        if (std::string(merge) == "multiply") {
          // where(mask, e, 1) * (where(mask, o, 1) if masked), then 0 at
          // masked steps when both are.
          const float product =
              (kept ? e : 1.0f) * (both_masked && !kept ? 1.0f : o);
          want.push_back(both_masked && !kept ? 0.0f : product);
        } else {
          // Both masked alike: e at masked steps; else max(e, o) where the
          // identity is unmasked, and o (taking e's place) where masked.
          want.push_back(kept ? std::max(e, o) : (both_masked ? e : o));
        }
      }
      EXPECT_TRUE(testing::AllClose(*got, Tensor::FromVector(want, y.shape()),
                                    1e-6, 1e-7));
    }
  }
}

// Integer ids give the mask float ids give; the average keeps its axis
// under keepdims.
TEST(MaskTest, IntegerIdsAndKeptAxes) {
  std::unique_ptr<Model> model = Build(
      {6},
      {Embedding(), Spec("global_average_pooling1d", {{"keepdims", true}})});
  ASSERT_NE(model, nullptr);
  std::vector<int64_t> ids(kIds.begin(), kIds.end());
  absl::StatusOr<Tensor> from_ints =
      model->Call(Tensor::FromVector<int64_t>(ids, {3, 6}), {});
  absl::StatusOr<Tensor> from_floats = model->Call(Ids(), {});
  ASSERT_TRUE(from_ints.ok()) << from_ints.status();
  ASSERT_TRUE(from_floats.ok()) << from_floats.status();
  EXPECT_EQ(from_ints->shape(), (Shape{3, 1, 4}));
  EXPECT_TRUE(testing::AllClose(*from_ints, *from_floats, 0, 0));
  std::unique_ptr<Model> unkept =
      Build({6}, {Embedding(), Spec("global_average_pooling1d")});
  absl::StatusOr<Tensor> flat = unkept->Call(Ids(), {});
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_TRUE(
      testing::AllClose(*ops::Reshape(*from_floats, {3, 4}), *flat, 0, 0));
}

// Label weights: each weighs n / m consecutive labels; the weighted loss
// of a mask is the loss of the labels it keeps.
TEST(MaskTest, WeightedLossesCountTheUnmaskedLabels) {
  const Tensor logits = testing::RandomTensor({2, 3, 4}, 3);
  const Tensor labels = Tensor::FromVector<int64_t>({1, 0, 3, 2, 2, 1}, {2, 3});
  const Tensor mask = Tensor::FromVector<double>({1, 1, 0, 1, 0, 0}, {2, 3});
  absl::StatusOr<Tensor> masked =
      SparseCategoricalCrossentropy(logits, labels, 1, 0, mask);
  ASSERT_TRUE(masked.ok()) << masked.status();
  const Tensor rows = *ops::Reshape(logits, {6, 4});
  const Tensor flat_labels = *ops::Reshape(labels, {6});
  double want = 0;
  for (int64_t i : {0, 1, 3}) {  // The mask's 1s.
    want += SparseCategoricalCrossentropy(*rows.SliceRows(i, 1),
                                          *flat_labels.SliceRows(i, 1), 1)
                ->ScalarAt(0);
  }
  EXPECT_NEAR(masked->ScalarAt(0), want, 1e-12);
  // Every loss and its metric, under its keys' defaults and (where it has
  // one) label smoothing: the masked sums are those of the kept labels.
  const std::vector<int64_t> kept = {0, 1, 3};
  for (const LossType* type : LossRegistry::Global().Entries()) {
    const bool classes = !type->output_activation.empty();
    absl::StatusOr<Shape> out = type->output_shape({3}, classes ? 2 : 0);
    ASSERT_TRUE(out.ok()) << out.status();
    Shape shape = {2};
    shape.insert(shape.end(), out->begin(), out->end());
    const Tensor outputs = testing::RandomTensor(shape, 11, DType::kF64, -3, 3);
    const Tensor targets =
        classes ? Tensor::FromVector<int64_t>({1, 0, 1, 1, 0, 1}, {2, 3})
                : testing::RandomTensor({2, 3}, 12, DType::kF64, -3, 3);
    // The kept labels' rows of each, as a batch of 3.
    const int64_t per = outputs.num_elements() / 6;
    const Tensor output_rows = *ops::Reshape(outputs, {6, per});
    const Tensor target_rows = *ops::Reshape(targets, {6});
    std::vector<Tensor> kept_outputs, kept_targets;
    for (int64_t i : kept) {
      kept_outputs.push_back(*output_rows.SliceRows(i, 1));
      kept_targets.push_back(*target_rows.SliceRows(i, 1));
    }
    Tensor kept_out = *ops::Concat(kept_outputs, 0);
    if (per == 1) kept_out = *ops::Reshape(kept_out, {3});
    const Tensor kept_target = *ops::Concat(kept_targets, 0);
    std::vector<Params> keys = {DefaultLossParams(type->name)};
    if (keys[0].Has(kLabelSmoothing)) {
      keys.push_back(keys[0]);
      keys.back().Set(kLabelSmoothing, 0.2);
    }
    for (const Params& k : keys) {
      SCOPED_TRACE(type->name + " " + std::to_string(LabelSmoothingOf(k)));
      absl::StatusOr<Tensor> weighted =
          type->compute(outputs, targets, mask, 1, k);
      absl::StatusOr<Tensor> alone =
          type->compute(kept_out, kept_target, Tensor(), 1, k);
      ASSERT_TRUE(weighted.ok()) << weighted.status();
      ASSERT_TRUE(alone.ok()) << alone.status();
      EXPECT_NEAR(weighted->ScalarAt(0), alone->ScalarAt(0), 1e-12);
    }
    absl::StatusOr<double> metric = type->metric_sum(outputs, targets, mask);
    absl::StatusOr<double> metric_alone =
        type->metric_sum(kept_out, kept_target, Tensor());
    ASSERT_TRUE(metric.ok()) << metric.status();
    ASSERT_TRUE(metric_alone.ok()) << metric_alone.status();
    EXPECT_NEAR(*metric, *metric_alone, 1e-12) << type->name;
  }
  // Two targets per mask element: weights repeat over them.
  absl::StatusOr<std::vector<double>> w =
      LabelWeights(Tensor::FromVector<double>({1, 0, 1}, {3}), 6);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::vector<double>{1, 1, 0, 0, 1, 1}));
  EXPECT_FALSE(
      LabelWeights(Tensor::FromVector<double>({1, 0, 1}, {3}), 7).ok());
}

}  // namespace
}  // namespace mirrortrain::models
