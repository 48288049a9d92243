// optimizer.l2_regularization: l2 * w joins the gradient of every weight of
// rank >= 2 but biases (attention's [heads, key_dim] ones included) and
// normalization parameters.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace mirrortrain::trainer {
namespace {

// Every variable after one SGD step (learning rate 1) with `l2`, by name.
std::map<std::string, std::vector<float>> AfterOneStep(double l2) {
  auto config = ParseConfig(
      "", "l2.yaml",
      {"data.name=synthetic", "data.train_examples=32", "data.test_examples=8",
       "data.global_batch_size=32",
       "model.layers=[{type: reshape, target_shape: [28, 28]}, "
       "{type: multi_head_attention, num_heads: 2}, "
       "{type: layer_normalization}, {type: flatten}, "
       "{type: dense, units: 10}]",
       "optimizer.name=sgd", "optimizer.learning_rate=1", "ema.decay=null",
       "optimizer.l2_regularization=" + std::to_string(l2), "train.steps=1",
       "train.eval_every_epochs=0", "distribute.strategy=one_device",
       "distribute.devices=[cpu:0]"});
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return {};
  auto trainer = Trainer::Create(*config, "", DataNeeds::kTrainAndTest);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  std::map<std::string, std::vector<float>> before;
  for (Variable* v : (*trainer)->ReplicaState(0)) {
    before[v->name()] = v->value().ToVector<float>();
  }
  EXPECT_TRUE((*trainer)->Train().ok());
  std::map<std::string, std::vector<float>> decay;
  for (Variable* v : (*trainer)->ReplicaState(0)) {
    // w1 = w0 - (g + l2 * w0): the step each element took.
    const std::vector<float> after = v->value().ToVector<float>();
    std::vector<float>& d = decay[v->name()];
    for (size_t i = 0; i < after.size(); ++i) {
      d.push_back(before[v->name()][i] - after[i]);
    }
  }
  return decay;
}

TEST(RegularizationTest, L2DecaysKernelsNotBiasesOrNormalization) {
  const auto without = AfterOneStep(0);
  const auto with = AfterOneStep(0.5);
  ASSERT_EQ(without.size(), with.size());
  ASSERT_FALSE(with.empty());
  int kernels = 0, attention_biases = 0;
  for (const auto& [name, step] : with) {
    SCOPED_TRACE(name);
    const std::vector<float>& plain = without.at(name);
    ASSERT_EQ(step.size(), plain.size());
    const bool decayed = absl::EndsWith(name, "/kernel");
    kernels += decayed;
    attention_biases += absl::StrContains(name, "query/bias");
    double extra = 0;
    for (size_t i = 0; i < step.size(); ++i) {
      extra += std::abs(step[i] - plain[i]);
    }
    if (decayed) {
      EXPECT_GT(extra, 0);
    } else {
      EXPECT_EQ(extra, 0);  // Biases, gamma and beta: the same step.
    }
  }
  EXPECT_EQ(kernels, 5);  // query, key, value, attention_output, dense.
  EXPECT_EQ(attention_biases, 1);
}

}  // namespace
}  // namespace mirrortrain::trainer
