// Keras's named initialisers (kernel_initializer, bias_initializer): each
// variance-scaling one has Keras's bound and variance over its fans, the
// constants are exact, glorot_uniform stays the default's numbers, the
// streams depend on the seed alone; and the layers take the keys.
#include "models/initializers.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

using ::testing::HasSubstr;

// TruncatedNormal({4}, 2024, 1, f64): recorded when the generator was
// written (it has no other source of truth than itself; the other tests
// check its distribution).
constexpr char kPinnedTruncatedNormal[] =
    "0.45073818105410002 -0.93737143865387829 -1.9752227976732724 "
    "-1.0661390586194002";

struct Moments {
  double mean = 0, stddev = 0, max_abs = 0;
};
Moments Of(const Tensor& t) {
  const float* v = t.data<float>();
  const int64_t n = t.num_elements();
  Moments m;
  for (int64_t i = 0; i < n; ++i) m.mean += v[i];
  m.mean /= n;
  for (int64_t i = 0; i < n; ++i) {
    m.stddev += (v[i] - m.mean) * (v[i] - m.mean);
    m.max_abs = std::max(m.max_abs, std::abs(static_cast<double>(v[i])));
  }
  m.stddev = std::sqrt(m.stddev / n);
  return m;
}

struct ScalingCase {
  std::string name;
  double scale;
  bool fan_in_only;
  bool uniform;
};

class VarianceScalingTest : public ::testing::TestWithParam<ScalingCase> {};

// A conv kernel [3, 3, 64, 32]: fan_in 576, fan_out 288, as Keras counts.
TEST_P(VarianceScalingTest, HasKerasBoundAndVariance) {
  const ScalingCase& c = GetParam();
  const Shape shape = {3, 3, 64, 32};
  absl::StatusOr<Tensor> t = Initialize(c.name, shape, 11);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->shape(), shape);
  const double n = c.fan_in_only ? 576.0 : (576.0 + 288.0) / 2;
  const double stddev = std::sqrt(c.scale / n);
  const Moments m = Of(*t);
  EXPECT_NEAR(m.stddev, stddev, 0.03 * stddev);
  EXPECT_LT(std::abs(m.mean), 0.05 * stddev);
  // Uniform: within sqrt(3) stddev and reaching it; truncated normal:
  // within two of its untruncated stddev (stddev / 0.8796...).
  const double bound =
      c.uniform ? std::sqrt(3.0) * stddev : 2 * stddev / 0.87962566103423978;
  EXPECT_LE(m.max_abs, bound * (1 + 1e-6));
  EXPECT_GT(m.max_abs, 0.97 * bound);
  // The same seed, the same numbers; another seed, others.
  EXPECT_TRUE(testing::SameBits(*t, *Initialize(c.name, shape, 11)));
  EXPECT_FALSE(testing::SameBits(*t, *Initialize(c.name, shape, 12)));
}

INSTANTIATE_TEST_SUITE_P(
    Keras, VarianceScalingTest,
    ::testing::Values(ScalingCase{"glorot_uniform", 1, false, true},
                      ScalingCase{"glorot_normal", 1, false, false},
                      ScalingCase{"he_uniform", 2, true, true},
                      ScalingCase{"he_normal", 2, true, false},
                      ScalingCase{"lecun_uniform", 1, true, true},
                      ScalingCase{"lecun_normal", 1, true, false}),
    [](const ::testing::TestParamInfo<ScalingCase>& info) {
      return info.param.name;
    });

TEST(InitializersTest, ConstantsDefaultAndUnknownNames) {
  for (const auto& [name, value] :
       {std::pair<std::string, float>{"zeros", 0.0f}, {"ones", 1.0f}}) {
    absl::StatusOr<Tensor> t = Initialize(name, {4, 5}, 3);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      EXPECT_EQ(t->data<float>()[i], value) << name;
    }
  }
  // The default is the function every model's kernels always came from.
  EXPECT_TRUE(testing::SameBits(*Initialize("glorot_uniform", {7, 9}, 5),
                                *GlorotUniform({7, 9}, 5)));
  absl::StatusOr<Tensor> unknown = Initialize("he_normall", {2}, 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(
      std::string(unknown.status().message()),
      HasSubstr("unknown initializer 'he_normall' (expected one of "
                "glorot_uniform, glorot_normal, he_uniform, he_normal"));
}

// The layers' keys: a dense layer's he_normal kernel over its fan-in and a
// ones bias; its defaults give what a layer without the keys gives, bit for
// bit; conv2d and depthwise_conv2d (depthwise_initializer, Keras's name)
// take them too.
TEST(InitializersTest, LayersTakeTheKeys) {
  auto build = [](const std::string& type, const Shape& input,
                  std::vector<std::pair<std::string, ParamValue>> values) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(values));
    if (!spec.ok()) ADD_FAILURE() << spec.status();
    spec->path = "model.layers[0]";
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Build(ModelDef{input, {*spec}}, 9, Device::Cpu());
    if (!m.ok()) ADD_FAILURE() << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  };
  auto he = build("dense", {400},
                  {{"units", int64_t{300}},
                   {"kernel_initializer", std::string("he_normal")},
                   {"bias_initializer", std::string("ones")}});
  const Moments kernel = Of(he->variables()[0]->value());
  EXPECT_NEAR(kernel.stddev, std::sqrt(2.0 / 400), 0.03 * std::sqrt(2.0 / 400));
  const Tensor& bias = he->variables()[1]->value();
  for (int64_t i = 0; i < bias.num_elements(); ++i) {
    ASSERT_EQ(bias.data<float>()[i], 1.0f);
  }
  auto plain = build("dense", {400}, {{"units", int64_t{300}}});
  auto named = build("dense", {400},
                     {{"units", int64_t{300}},
                      {"kernel_initializer", std::string("glorot_uniform")},
                      {"bias_initializer", std::string("zeros")}});
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(testing::SameBits(plain->variables()[i]->value(),
                                  named->variables()[i]->value()));
  }
  auto conv = build("conv2d", {8, 8, 16},
                    {{"filters", int64_t{32}},
                     {"kernel_size", int64_t{3}},
                     {"kernel_initializer", std::string("lecun_uniform")}});
  EXPECT_NEAR(Of(conv->variables()[0]->value()).max_abs,
              std::sqrt(3.0 / (9 * 16)), 0.01 * std::sqrt(3.0 / (9 * 16)));
  auto depthwise = build("depthwise_conv2d", {8, 8, 16},
                         {{"kernel_size", int64_t{3}},
                          {"depthwise_initializer", std::string("zeros")}});
  EXPECT_EQ(Of(depthwise->variables()[0]->value()).max_abs, 0.0);
  // Keras's depthwise fans: [3, 3, 16, 1] has fan_in 144.
  depthwise = build("depthwise_conv2d", {8, 8, 16},
                    {{"kernel_size", int64_t{3}},
                     {"depthwise_initializer", std::string("lecun_uniform")}});
  EXPECT_NEAR(Of(depthwise->variables()[0]->value()).max_abs,
              std::sqrt(3.0 / 144), 0.01 * std::sqrt(3.0 / 144));
  // A random bias: fans of its length, and a stream of its own (the
  // kernel's bits are the default layer's).
  auto random_bias = build("dense", {400},
                           {{"units", int64_t{300}},
                            {"bias_initializer", std::string("he_uniform")}});
  EXPECT_TRUE(testing::SameBits(random_bias->variables()[0]->value(),
                                plain->variables()[0]->value()));
  EXPECT_NEAR(Of(random_bias->variables()[1]->value()).max_abs,
              std::sqrt(6.0 / 300), 0.05 * std::sqrt(6.0 / 300));
}

// The truncated normal's stream is arithmetic alone (no libm): its first
// values are pinned, so a change of generator, or a host whose numbers
// differ, shows here.
TEST(InitializersTest, TruncatedNormalStreamIsPinned) {
  absl::StatusOr<Tensor> t = TruncatedNormal({4}, 2024, 1.0, DType::kF64);
  ASSERT_TRUE(t.ok()) << t.status();
  const double* v = t->data<double>();
  for (int i = 0; i < 4; ++i) EXPECT_LE(std::abs(v[i]), 2.0);
  EXPECT_EQ(absl::StrFormat("%.17g %.17g %.17g %.17g", v[0], v[1], v[2], v[3]),
            kPinnedTruncatedNormal);
}

// keras.initializers.Orthogonal: rows x cols (the last axis the columns)
// with orthonormal columns where rows >= cols, orthonormal rows where
// fewer; seeded; below rank 2 an error. The LSTM's recurrent kernel
// [units, 4 units] has orthonormal rows.
TEST(InitializersTest, OrthogonalHasOrthonormalRowsOrColumns) {
  for (const Shape& shape : {Shape{4, 16}, Shape{3, 3, 2, 5}, Shape{6, 6}}) {
    SCOPED_TRACE(ShapeToString(shape));
    absl::StatusOr<Tensor> t = Initialize("orthogonal", shape, 7);
    ASSERT_TRUE(t.ok()) << t.status();
    const int64_t cols = shape.back(), rows = t->num_elements() / cols;
    const float* v = t->data<float>();
    const bool by_rows = rows < cols;
    const int64_t n = by_rows ? rows : cols, len = by_rows ? cols : rows;
    auto at = [&](int64_t vec, int64_t i) {
      return by_rows ? v[vec * cols + i] : v[i * cols + vec];
    };
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        double dot = 0;
        for (int64_t i = 0; i < len; ++i) dot += at(a, i) * at(b, i);
        EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6) << a << "," << b;
      }
    }
    absl::StatusOr<Tensor> again = Initialize("orthogonal", shape, 7);
    absl::StatusOr<Tensor> other = Initialize("orthogonal", shape, 8);
    ASSERT_TRUE(again.ok() && other.ok());
    EXPECT_TRUE(testing::SameBits(*t, *again));
    EXPECT_FALSE(testing::SameBits(*t, *other));
  }
  EXPECT_FALSE(Initialize("orthogonal", {5}, 1).ok());
}

}  // namespace
}  // namespace mirrortrain::models
