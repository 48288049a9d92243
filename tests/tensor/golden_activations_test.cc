// Activation ops against TensorFlow (scripts/golden/activations.py ->
// tests/golden/activations.txt): tf.nn.gelu, exact and approximate,
// tf.nn.silu, elu, selu, softplus and leaky_relu, forward and gradient,
// float32 and float64.
#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/math_ops.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

TEST(GoldenActivationsTest, GeluMatchesTensorFlow) {
  const auto& g = testing::CachedGolden("activations.txt");
  ASSERT_FALSE(g.empty()) << "cannot load activations.txt";
  for (const char* dtype : {"f32", "f64"}) {
    // Same formulas; we use libm's erf/tanh/exp, TensorFlow Eigen's rational
    // approximations, which differ from libm by up to 5e-9 in float64
    // (measured on these inputs by the script's data against Python's
    // math.erf/tanh) and saturate tanh to +-1 earlier in float32.
    const double tol = std::string(dtype) == "f32" ? 1e-5 : 1e-8;
    for (bool approximate : {false, true}) {
      const std::string name = approximate ? "gelu_tanh" : "gelu";
      SCOPED_TRACE(name + " " + dtype);
      const Tensor& x = g.at(std::string("x_") + dtype);
      GradientTape tape;
      tape.Watch(x);
      auto y = ops::Gelu(x, approximate);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(testing::AllClose(*y, g.at(name + "/y_" + dtype), tol, tol));
      GradientOptions options;
      options.output_gradient = g.at(std::string("upstream_") + dtype);
      auto dx = tape.Gradient(*y, {x}, options);
      ASSERT_TRUE(dx.ok()) << dx.status();
      EXPECT_TRUE(
          testing::AllClose(*(*dx)[0], g.at(name + "/dx_" + dtype), tol, tol));
    }
  }
}

// silu, elu, selu, softplus and leaky_relu (Keras 3's slope 0.2): forward
// and gradient against tf.nn's.
TEST(GoldenActivationsTest, SiluEluSeluSoftplusLeakyReluMatchTensorFlow) {
  const auto& g = testing::CachedGolden("activations.txt");
  ASSERT_FALSE(g.empty()) << "cannot load activations.txt";
  using Fn = absl::StatusOr<Tensor> (*)(const Tensor&);
  const std::pair<const char*, Fn> cases[] = {{"silu", ops::Silu},
                                              {"elu", ops::Elu},
                                              {"selu", ops::Selu},
                                              {"softplus", ops::Softplus},
                                              {"leaky_relu", ops::LeakyRelu},
                                              {"relu6", ops::Relu6}};
  for (const char* dtype : {"f32", "f64"}) {
    // float32: our host exp is within 2.5e-7 of libm's (vector_math.h),
    // and TensorFlow's Eigen logistic, exp and log1p are its own (measured
    // worst for silu: 9e-8 relative forward, 4.5e-7 in the gradient);
    // float64: libm's on both sides (worst 1e-15).
    const bool f32 = std::string(dtype) == "f32";
    const double rtol = f32 ? 1e-6 : 1e-12, atol = f32 ? 1e-7 : 1e-12;
    for (const auto& [name, fn] : cases) {
      SCOPED_TRACE(std::string(name) + " " + dtype);
      const Tensor& x = g.at(std::string("x_") + dtype);
      GradientTape tape;
      tape.Watch(x);
      auto y = fn(x);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(testing::AllClose(*y, g.at(std::string(name) + "/y_" + dtype),
                                    rtol, atol));
      GradientOptions options;
      options.output_gradient = g.at(std::string("upstream_") + dtype);
      auto dx = tape.Gradient(*y, {x}, options);
      ASSERT_TRUE(dx.ok()) << dx.status();
      EXPECT_TRUE(testing::AllClose(
          *(*dx)[0], g.at(std::string(name) + "/dx_" + dtype), rtol, atol));
      // The tails, where elu and selu saturate (TensorFlow's gradient is 0
      // there, computed from the output) and softplus changes formula.
      const std::string tail = std::string(name) + "/ytail_" + dtype;
      if (!g.contains(tail)) continue;
      const Tensor& xt = g.at(std::string("xtail_") + dtype);
      GradientTape tail_tape;
      tail_tape.Watch(xt);
      auto yt = fn(xt);
      ASSERT_TRUE(yt.ok()) << yt.status();
      EXPECT_TRUE(testing::AllClose(*yt, g.at(tail), rtol, atol));
      auto dxt = tail_tape.Gradient(*yt, {xt});
      ASSERT_TRUE(dxt.ok()) << dxt.status();
      EXPECT_TRUE(testing::AllClose(
          *(*dxt)[0], g.at(std::string(name) + "/dxtail_" + dtype), rtol,
          atol));
    }
  }
}

}  // namespace
}  // namespace mirrortrain
