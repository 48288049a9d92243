// Conv2DLayer with its max pooling folded in against the layer chain it
// replaces (conv2d + bias + activation, then max_pooling2d).
#include "models/conv2d_layer.h"

#include "gtest/gtest.h"
#include "models/simple_layers.h"
#include "tensor/gradient_tape.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

TEST(Conv2DLayerTest, PoolingFoldedInEqualsPoolingAfterTheActivation) {
  const ops::Pool2DOptions pool{2, 2, 2, 2, ops::Padding::kValid};
  const ops::Conv2DOptions same{1, 1, ops::Padding::kSame};
  for (const char* name : {"relu", "tanh", "sigmoid", "linear", "elu", "selu",
                           "softplus", "leaky_relu", "relu6"}) {
    SCOPED_TRACE(name);
    const ActivationDef& act = **FindActivation(name);
    auto fused = Conv2DLayer::Create("conv2d", 3, 4, {3, 3}, same, act,
                                     /*use_bias=*/true, 7, Device::Cpu());
    auto plain = Conv2DLayer::Create("conv2d", 3, 4, {3, 3}, same, act,
                                     /*use_bias=*/true, 7, Device::Cpu());
    ASSERT_TRUE(fused.ok() && plain.ok());
    MaxPool2DLayer pool_layer("max_pooling2d", pool);
    ASSERT_TRUE((*fused)->AbsorbNext(pool_layer));
    // A non-zero bias, the same in both layers.
    Tensor bias = testing::RandomTensor({4}, 5, DType::kF32);
    ASSERT_TRUE((*fused)->variables()[1]->Assign(bias).ok());
    ASSERT_TRUE((*plain)->variables()[1]->Assign(bias).ok());
    Tensor x = testing::RandomTensor({2, 9, 8, 3}, 3, DType::kF32);
    Tensor dy = testing::RandomTensor({2, 4, 4, 4}, 4, DType::kF32);
    EXPECT_EQ(*(*fused)->OutputShape({2, 9, 8, 3}), (Shape{2, 4, 4, 4}));

    auto run = [&](bool folded) {
      GradientTape tape;
      tape.Watch(x);
      ForwardContext ctx;
      absl::StatusOr<Tensor> y =
          folded ? (*fused)->Call(x, ctx)
                 : pool_layer.Call(*(*plain)->Call(x, ctx), ctx);
      EXPECT_TRUE(y.ok()) << y.status();
      Layer& layer = folded ? static_cast<Layer&>(**fused) : **plain;
      GradientOptions options;
      options.output_gradient = dy;
      auto grads = tape.Gradient(
          *y, {x, layer.variables()[0]->value(), layer.variables()[1]->value()},
          options);
      EXPECT_TRUE(grads.ok()) << grads.status();
      return std::vector<Tensor>{*y, *(*grads)[0], *(*grads)[1], *(*grads)[2]};
    };
    std::vector<Tensor> a = run(true), b = run(false);
    EXPECT_TRUE(testing::AllClose(a[0], b[0], 0, 0));  // Bitwise.
    for (int i = 1; i < 4; ++i) {
      SCOPED_TRACE(i);
      EXPECT_TRUE(testing::AllClose(a[i], b[i], 1e-5, 1e-6));
    }
  }
}

TEST(Conv2DLayerTest, PoolingIsNotAbsorbedThroughANonMonotoneActivation) {
  const ops::Conv2DOptions same{1, 1, ops::Padding::kSame};
  auto conv =
      Conv2DLayer::Create("conv2d", 3, 4, {3, 3}, same,
                          **FindActivation("softmax"), true, 7, Device::Cpu());
  ASSERT_TRUE(conv.ok());
  MaxPool2DLayer pool("max_pooling2d", {});
  EXPECT_FALSE((*conv)->AbsorbNext(pool));
}

}  // namespace
}  // namespace mirrortrain::models
