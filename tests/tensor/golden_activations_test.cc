// Activation ops against TensorFlow (scripts/golden/activations.py ->
// tests/golden/activations.txt): tf.nn.gelu, exact and approximate,
// forward and gradient, float32 and float64.
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

}  // namespace
}  // namespace mirrortrain
