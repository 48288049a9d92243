// Forward values and argument checking of the ops.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/dropout_mask.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using ::testing::HasSubstr;

Tensor V(std::vector<float> v, Shape s) { return Tensor::FromVector(v, s); }

TEST(OpsTest, BroadcastArithmetic) {
  Tensor a = V({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = V({10, 20, 30}, {3});
  Tensor col = V({100, 200}, {2, 1});
  EXPECT_EQ(ops::Add(a, row)->ToVector<float>(),
            (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(ops::Sub(a, col)->ToVector<float>(),
            (std::vector<float>{-99, -98, -97, -196, -195, -194}));
  EXPECT_EQ(ops::Mul(col, row)->shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::Div(a, Tensor::Scalar<float>(2))->ToVector<float>(),
            (std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3}));
}

TEST(OpsTest, BadShapesAndDtypesNameTheOpAndShapes) {
  Tensor a = V({1, 2, 3, 4, 5, 6}, {2, 3});
  absl::Status s = ops::Add(a, V({1, 2}, {2})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Add"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("f32[2,3]"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("f32[2]"));

  s = ops::Mul(a, Tensor::FromVector<double>({1, 2, 3}, {3})).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("dtype mismatch"));

  s = ops::MatMul(a, V({1, 2}, {1, 2})).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("MatMul"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("f32[1,2]"));

  s = ops::Conv2D(a, a).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("Conv2D"));
  EXPECT_EQ(ops::Relu(Tensor()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ops::Exp(Tensor::Scalar<int32_t>(1)).ok());
}

TEST(OpsTest, WrongDeviceIsAnErrorNotACrash) {
  // A tensor on a GPU that does not exist here cannot even be made; ops on
  // mixed devices report the devices.
  if (!Tensor::Empty(DType::kF32, {2}, Device::Cuda(0)).ok()) {
    SUCCEED() << "no GPU: device placement errors come from allocation";
    EXPECT_FALSE(Tensor::Empty(DType::kF32, {2}, Device::Cuda(0)).ok());
    return;
  }
  Tensor gpu = *Tensor::Zeros(DType::kF32, {2}, Device::Cuda(0));
  absl::Status s = ops::Add(gpu, V({1, 2}, {2})).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("different devices"));
}

TEST(OpsTest, MatMulTransposes) {
  Tensor a = V({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = V({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(ops::MatMul(a, b)->ToVector<float>(),
            (std::vector<float>{4, 5, 10, 11}));
  // a^T a is [3,3].
  Tensor ata = *ops::MatMul(a, a, true, false);
  EXPECT_EQ(ata.shape(), (Shape{3, 3}));
  EXPECT_EQ(ata.ToVector<float>()[0], 17);
  Tensor aat = *ops::MatMul(a, a, false, true);
  EXPECT_EQ(aat.ToVector<float>(), (std::vector<float>{14, 32, 32, 77}));
}

// The logistic inside silu is 0 far below zero (exp(-x) overflows), on the
// host as on GPUs: silu(-1e30) is -0, not -1e30 times exp's saturated
// e^-88.3; its gradient there is 0 as well.
TEST(OpsTest, SiluOfHugeNegativeInputsIsZero) {
  const Tensor x = V({-1e30f, -3e38f, -100.0f, 2.0f}, {4});
  absl::StatusOr<Tensor> y = ops::Silu(x);
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> v = y->ToVector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_NEAR(v[2], -100.0 / (1.0 + std::exp(100.0)), 1e-40);
  EXPECT_NEAR(v[3], 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> z = ops::Silu(x);
  ASSERT_TRUE(z.ok());
  auto g = tape.Gradient(*ops::ReduceSum(*z), {x});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0]->ToVector<float>()[0], 0.0f);
  EXPECT_EQ((*g)[0]->ToVector<float>()[1], 0.0f);
}

// An inner dimension of 0 gives zeros (and the bias), as an empty sum.
TEST(OpsTest, ProductsOverAnEmptyInnerDimension) {
  const Tensor a = Tensor::HostZeros(DType::kF32, {3, 0});
  const Tensor b = Tensor::HostZeros(DType::kF32, {0, 2});
  const Tensor bias = V({1, 2}, {2});
  absl::StatusOr<Tensor> product = ops::MatMul(a, b);
  absl::StatusOr<Tensor> biased = ops::MatMulBias(a, b, bias);
  ASSERT_TRUE(product.ok()) << product.status();
  ASSERT_TRUE(biased.ok()) << biased.status();
  EXPECT_EQ(product->ToVector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(biased->ToVector<float>(), (std::vector<float>{1, 2, 1, 2, 1, 2}));
}

TEST(OpsTest, ReductionsOverAxes) {
  Tensor x = V({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::ReduceSum(x)->ToVector<float>(), (std::vector<float>{21}));
  EXPECT_EQ(ops::ReduceSum(x, {0})->ToVector<float>(),
            (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(ops::ReduceSum(x, {1}, true)->shape(), (Shape{2, 1}));
  EXPECT_EQ(ops::ReduceMean(x, {-1})->ToVector<float>(),
            (std::vector<float>{2, 5}));
  // A mean over an empty axis is NaN (0 / 0), as tf.reduce_mean's.
  const Tensor empty_rows = Tensor::HostZeros(DType::kF32, {0, 3});
  absl::StatusOr<Tensor> mean_of_nothing = ops::ReduceMean(empty_rows, {0});
  ASSERT_TRUE(mean_of_nothing.ok()) << mean_of_nothing.status();
  for (float v : mean_of_nothing->ToVector<float>()) EXPECT_TRUE(std::isnan(v));
  EXPECT_FALSE(ops::ReduceSum(x, {2}).ok());
  EXPECT_FALSE(ops::ReduceSum(x, {0, 0}).ok());
  EXPECT_EQ(ops::L2Loss(x)->ToVector<float>(), (std::vector<float>{45.5}));
}

// A grouped convolution (filter in-channels a divisor of x's) through the
// fused ops is the same bits as the plain ops after it, and its gradients
// match finite differences; channel counts that do not divide, or no
// channels at all, are errors, not crashes.
TEST(OpsTest, GroupedConvolutionsComposeFromTheirParts) {
  const Tensor x = testing::RandomTensor({2, 6, 6, 4}, 1);
  const Tensor f = testing::RandomTensor({3, 3, 2, 6}, 2);  // Two groups.
  const Tensor b = testing::RandomTensor({6}, 3);
  const ops::Pool2DOptions pool;
  absl::StatusOr<Tensor> conv = ops::Conv2D(x, f);
  ASSERT_TRUE(conv.ok()) << conv.status();
  ASSERT_EQ(conv->shape(), (Shape{2, 6, 6, 6}));
  // Against an ungrouped convolution of the block-diagonal filter (group
  // g's filters read only its channels): the same sums, zeros added.
  Tensor full = Tensor::HostZeros(DType::kF64, {3, 3, 4, 6});
  for (int64_t tap = 0; tap < 9; ++tap) {
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t o = 0; o < 6; ++o) {
        const int64_t g = o / 3;  // Filters 0-2 read channels 0-1.
        full.data<double>()[(tap * 4 + g * 2 + c) * 6 + o] =
            f.data<double>()[(tap * 2 + c) * 6 + o];
      }
    }
  }
  EXPECT_TRUE(testing::AllClose(*conv, *ops::Conv2D(x, full), 1e-12, 1e-12));
  EXPECT_TRUE(testing::SameBits(*ops::Conv2DBiasRelu(x, f, b),
                                *ops::BiasAddRelu(*conv, b)));
  const Tensor pooled = *ops::MaxPool2D(*conv, pool);
  EXPECT_TRUE(testing::SameBits(*ops::Conv2DMaxPool(x, f, {}, pool), pooled));
  EXPECT_TRUE(testing::SameBits(*ops::Conv2DMaxPoolBiasRelu(x, f, b, {}, pool),
                                *ops::BiasAddRelu(pooled, b)));
  testing::ExpectGradientsMatch(
      [&](const std::vector<Tensor>& in) {
        return ops::Conv2DMaxPoolBiasRelu(in[0], in[1], in[2], {}, pool);
      },
      {x, f, b});
  const absl::Status five =
      ops::Conv2D(testing::RandomTensor({1, 4, 4, 5}, 4), f).status();
  EXPECT_THAT(std::string(five.message()),
              ::testing::HasSubstr(
                  "input channels 5 are not a multiple of the filter's 2"));
  EXPECT_FALSE(
      ops::Conv2D(Tensor::HostZeros(DType::kF64, {1, 4, 4, 0}), f).ok());
  EXPECT_THAT(std::string(ops::Conv2D(x, testing::RandomTensor({3, 3, 1, 6}, 5))
                              .status()
                              .message()),
              ::testing::HasSubstr("6 filters do not split into 4 groups"));
  EXPECT_FALSE(ops::Conv2D(x, Tensor()).ok());
}

// The sum of x * Conv2D(y, f) equals that of y * Conv2DTranspose(x, f):
// the transpose is the convolution's adjoint, for strided, odd-sized and
// dilated geometries (the op table checks its gradients).
TEST(OpsTest, Conv2DTransposeIsTheConvolutionsAdjoint) {
  struct Case {
    Shape y;       // The convolution's input: the transpose's output.
    Shape filter;  // [KH, KW, y's channels, x's channels].
    ops::Conv2DOptions options;
  };
  const Case cases[] = {
      {{2, 5, 4, 3}, {3, 3, 3, 2}, {2, 2, ops::Padding::kSame}},
      {{2, 6, 7, 3}, {2, 3, 3, 4}, {2, 3, ops::Padding::kValid}},
      {{1, 7, 6, 2}, {3, 2, 2, 3}, {1, 1, ops::Padding::kSame, 2, 3}},
      {{2, 4, 4, 1}, {5, 5, 1, 2}, {1, 1, ops::Padding::kSame}},
  };
  uint64_t seed = 10;
  for (const Case& c : cases) {
    const Tensor y = testing::RandomTensor(c.y, ++seed);
    const Tensor f = testing::RandomTensor(c.filter, ++seed);
    const Tensor conv = *ops::Conv2D(y, f, c.options);
    const Tensor x = testing::RandomTensor(conv.shape(), ++seed);
    absl::StatusOr<Tensor> t =
        ops::Conv2DTranspose(x, f, c.y[1], c.y[2], c.options);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->shape(), c.y);
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      lhs += x.data<double>()[i] * conv.data<double>()[i];
    }
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      rhs += y.data<double>()[i] * t->data<double>()[i];
    }
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs) + 1e-12)
        << ShapeToString(c.y) << " " << ShapeToString(c.filter);
  }
  // An output that does not convolve back to the input's size (TF's rule):
  // SAME, stride 2 over 3 rows takes 5 or 6, not 7.
  const Tensor x = testing::RandomTensor({1, 3, 3, 2}, 1);
  const Tensor f = testing::RandomTensor({3, 3, 4, 2}, 2);
  const ops::Conv2DOptions same2{2, 2, ops::Padding::kSame};
  EXPECT_TRUE(ops::Conv2DTranspose(x, f, 6, 5, same2).ok());
  EXPECT_THAT(
      std::string(ops::Conv2DTranspose(x, f, 7, 6, same2).status().message()),
      ::testing::HasSubstr(
          "a 7x6 output convolves to 4x3, not the input's 3x3"));
  EXPECT_THAT(
      std::string(ops::Conv2DTranspose(
                      x, testing::RandomTensor({3, 3, 2, 4}, 3), 6, 6, same2)
                      .status()
                      .message()),
      ::testing::HasSubstr("input channels differ"));
}

// tf.maximum and tf.minimum: NaN from either operand; the gradient to a
// where a >= b (a <= b), a tie included, else to b (NaN: to b), as
// TensorFlow's MaximumGrad and MinimumGrad (their values, checked in
// TensorFlow 2.21).
TEST(OpsTest, MaximumAndMinimumFollowTensorFlow) {
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor a = Tensor::FromVector<float>({1, nan, 2, 3, -1}, {5});
  const Tensor b = Tensor::FromVector<float>({nan, 1, 2, 1, 4}, {5});
  // Signed zeros tie: TensorFlow returns b (max(0, -0) is -0); an infinity
  // is a value like any other.
  const Tensor za = Tensor::FromVector<float>({0.0f, -0.0f, -inf, inf}, {4});
  const Tensor zb = Tensor::FromVector<float>({-0.0f, 0.0f, 1, inf}, {4});
  for (const bool max : {true, false}) {
    const Tensor z = *(max ? ops::Maximum(za, zb) : ops::Minimum(za, zb));
    EXPECT_TRUE(std::signbit(z.data<float>()[0]));
    EXPECT_FALSE(std::signbit(z.data<float>()[1]));
    EXPECT_EQ(z.data<float>()[2], max ? 1.0f : -inf);
    EXPECT_EQ(z.data<float>()[3], inf);
  }
  for (const bool max : {true, false}) {
    SCOPED_TRACE(max ? "Maximum" : "Minimum");
    GradientTape tape;
    tape.Watch(a);
    tape.Watch(b);
    absl::StatusOr<Tensor> y = max ? ops::Maximum(a, b) : ops::Minimum(a, b);
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<float> v = y->ToVector<float>();
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
    EXPECT_EQ(
        std::vector<float>(v.begin() + 2, v.end()),
        max ? std::vector<float>({2, 3, 4}) : std::vector<float>({2, 1, -1}));
    auto grads = tape.Gradient(*y, {a, b});
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_EQ((*grads)[0]->ToVector<float>(),
              max ? std::vector<float>({0, 0, 1, 1, 0})
                  : std::vector<float>({0, 0, 1, 0, 1}));
    EXPECT_EQ((*grads)[1]->ToVector<float>(),
              max ? std::vector<float>({1, 1, 0, 0, 1})
                  : std::vector<float>({1, 1, 0, 1, 0}));
    // An infinite or NaN gradient reaches only the operand selected (as
    // tf.where selects; a product with the mask would give NaN).
    GradientOptions options;
    options.output_gradient =
        Tensor::FromVector<float>({inf, nan, inf, nan, inf}, {5});
    GradientTape again;
    again.Watch(a);
    again.Watch(b);
    y = max ? ops::Maximum(a, b) : ops::Minimum(a, b);
    ASSERT_TRUE(y.ok()) << y.status();
    grads = again.Gradient(*y, {a, b}, options);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const std::vector<float> ga = (*grads)[0]->ToVector<float>();
    const std::vector<float> gb = (*grads)[1]->ToVector<float>();
    EXPECT_EQ(ga[0], 0.0f);  // b NaN: all to b.
    EXPECT_TRUE(std::isinf(gb[0]));
    EXPECT_EQ(ga[2], inf);  // The tie: all to a.
    EXPECT_EQ(gb[2], 0.0f);
    EXPECT_EQ(max ? gb[3] : ga[3], 0.0f);  // The NaN to the other.
    EXPECT_TRUE(std::isnan(max ? ga[3] : gb[3]));
  }
}

TEST(OpsTest, ArrayOps) {
  Tensor x = V({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::Transpose(x, {1, 0})->ToVector<float>(),
            (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(ops::Concat({x, V({7, 8}, {2, 1})}, 1)->ToVector<float>(),
            (std::vector<float>{1, 2, 3, 7, 4, 5, 6, 8}));
  // Split: equal consecutive blocks along the axis; pieces must divide it.
  absl::StatusOr<std::vector<Tensor>> columns = ops::Split(x, 3, -1);
  ASSERT_TRUE(columns.ok()) << columns.status();
  ASSERT_EQ(columns->size(), 3u);
  EXPECT_EQ((*columns)[1].shape(), (Shape{2, 1}));
  EXPECT_EQ((*columns)[1].ToVector<float>(), (std::vector<float>{2, 5}));
  absl::StatusOr<std::vector<Tensor>> rows = ops::Split(x, 2, 0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)[1].ToVector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_FALSE(ops::Split(x, 2, 1).ok());
  // Slice: cells [begin, begin + size) of one axis.
  EXPECT_EQ(ops::Slice(x, 1, 1, 2)->ToVector<float>(),
            (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(ops::Slice(x, 0, 1, 1)->ToVector<float>(),
            (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(ops::Slice(x, 1, 3, 0)->shape(), (Shape{2, 0}));
  EXPECT_FALSE(ops::Slice(x, 1, 2, 2).ok());
  EXPECT_FALSE(ops::Slice(x, 1, -1, 1).ok());
  // PadZeros: zeros before and after along one axis.
  EXPECT_EQ(ops::PadZeros(x, 1, 1, 2)->ToVector<float>(),
            (std::vector<float>{0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0}));
  EXPECT_EQ(ops::PadZeros(x, 0, 0, 1)->shape(), (Shape{3, 3}));
  EXPECT_FALSE(ops::PadZeros(x, 0, -1, 0).ok());
  EXPECT_FALSE(ops::Split(x, 0, 1).ok());
  Tensor ids = Tensor::FromVector<int64_t>({1, 1, 0}, {3});
  EXPECT_EQ(ops::Gather(x, ids)->ToVector<float>(),
            (std::vector<float>{4, 5, 6, 4, 5, 6, 1, 2, 3}));
  EXPECT_FALSE(ops::Gather(x, Tensor::FromVector<int64_t>({2}, {1})).ok());
  EXPECT_EQ(ops::ArgMax(x, 1)->ToVector<int64_t>(),
            (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ops::ArgMax(V({3, 3, 1}, {3}), 0)->ToVector<int64_t>(),
            (std::vector<int64_t>{0}));  // First of ties.
  Tensor oh = *ops::OneHot(Tensor::FromVector<int32_t>({2, 0, 5}, {3}), 3);
  EXPECT_EQ(oh.ToVector<float>(),
            (std::vector<float>{0, 0, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ops::Cast(V({1.7f, -2.2f}, {2}), DType::kI32)->ToVector<int32_t>(),
            (std::vector<int32_t>{1, -2}));
  EXPECT_EQ(ops::Reshape(x, {-1})->shape(), (Shape{6}));
  EXPECT_FALSE(ops::Reshape(x, {4, -1}).ok());
}

// A float with no integer value (NaN, infinities, a truncation outside the
// integer's range) is an error naming the element and value, never the
// undefined conversion; in-range values truncate toward zero.
TEST(OpsTest, CastToIntegerChecksTheRange) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  for (DType to : {DType::kI32, DType::kI64}) {
    for (float bad : {kNaN, kInf, -kInf}) {
      absl::StatusOr<Tensor> y = ops::Cast(V({1, bad}, {2}), to);
      ASSERT_FALSE(y.ok()) << bad;
      EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(y.status().message(), HasSubstr("Cast: element 1 is "));
    }
  }
  EXPECT_THAT(ops::Cast(V({0, kNaN}, {2}), DType::kI64).status().message(),
              HasSubstr("element 1 is nan, which has no value in i64"));
  auto f64 = [](double v) { return Tensor::FromVector<double>({v}, {1}); };
  // f64 -> i32 at the edges of the range: the truncation decides.
  EXPECT_EQ(ops::Cast(f64(2147483647.9), DType::kI32)->ToVector<int32_t>(),
            (std::vector<int32_t>{2147483647}));
  EXPECT_EQ(ops::Cast(f64(-2147483648.9), DType::kI32)->ToVector<int32_t>(),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  EXPECT_THAT(ops::Cast(f64(2147483648.0), DType::kI32).status().message(),
              HasSubstr("element 0 is 2147483648, which has no value in i32"));
  EXPECT_FALSE(ops::Cast(f64(-2147483649.0), DType::kI32).ok());
  // f32 -> i32: 2^31 is the first float past the range, -2^31 is inside.
  EXPECT_FALSE(ops::Cast(V({2147483648.0f}, {1}), DType::kI32).ok());
  EXPECT_EQ(
      ops::Cast(V({-2147483648.0f}, {1}), DType::kI32)->ToVector<int32_t>(),
      (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(ops::Cast(V({3e9f}, {1}), DType::kI64)->ToVector<int64_t>(),
            (std::vector<int64_t>{3000000000}));
  // f64 -> i64: 2^63 is past the range, -2^63 is inside.
  EXPECT_FALSE(ops::Cast(f64(9223372036854775808.0), DType::kI64).ok());
  EXPECT_EQ(
      ops::Cast(f64(-9223372036854775808.0), DType::kI64)->ToVector<int64_t>(),
      (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
  // Between floating dtypes NaN and infinities still convert.
  EXPECT_TRUE(std::isnan(
      ops::Cast(V({kNaN}, {1}), DType::kF64)->ToVector<double>()[0]));
}

TEST(OpsTest, NonDifferentiableOpsGiveNoGradient) {
  GradientTape tape;
  Tensor x = V({1, 5, 2}, {3});
  tape.Watch(x);
  Tensor am = *ops::ArgMax(x, 0);
  Tensor y = *ops::Cast(am, DType::kF32);
  auto grads = tape.Gradient(y, {x});
  ASSERT_TRUE(grads.ok());
  EXPECT_FALSE((*grads)[0].has_value());
}

TEST(OpsTest, SoftmaxCrossEntropyIsStableAndChecksLabels) {
  Tensor logits = V({1000, 0, -1000, 1, 2, 3}, {2, 3});
  Tensor labels = Tensor::FromVector<int32_t>({0, 2}, {2});
  Tensor loss = *ops::SparseSoftmaxCrossEntropyWithLogits(logits, labels);
  EXPECT_NEAR(loss.ToVector<float>()[0], 0.0, 1e-6);
  EXPECT_NEAR(loss.ToVector<float>()[1], 0.40760596, 1e-6);
  absl::Status s = ops::SparseSoftmaxCrossEntropyWithLogits(
                       logits, Tensor::FromVector<int32_t>({0, 3}, {2}))
                       .status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("label 3 in row 1"));
}

TEST(OpsTest, DropoutIsSeededAndScales) {
  Tensor x = Tensor::HostFull(DType::kF32, {10000}, 1.0);
  Tensor a = *ops::Dropout(x, 0.25, 7);
  Tensor b = *ops::Dropout(x, 0.25, 7);
  Tensor c = *ops::Dropout(x, 0.25, 8);
  EXPECT_EQ(a.ToVector<float>(), b.ToVector<float>());
  EXPECT_NE(a.ToVector<float>(), c.ToVector<float>());
  int kept = 0;
  for (float v : a.ToVector<float>()) {
    ASSERT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6);
    kept += v != 0;
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  EXPECT_FALSE(ops::Dropout(x, 1.0, 1).ok());
}

// A step's seed read from a tensor (what a replayed CUDA graph reads) draws
// the mask of the seed DropoutStepSeed gives, for seeds with the top bit set
// too (they travel as int64).
TEST(OpsTest, DropoutWithAStepSeedTensorDrawsTheSameMask) {
  const Tensor x = testing::RandomTensor({300, 7}, 3, DType::kF32);
  for (uint64_t step : {uint64_t{0}, uint64_t{3}, ~uint64_t{0} - 5}) {
    for (uint64_t salt : {uint64_t{0}, uint64_t{0x6d756c7469686561}}) {
      const Tensor seed =
          Tensor::FromVector<int64_t>({static_cast<int64_t>(step)}, {1});
      const Tensor a = *ops::Dropout(x, 0.3, seed, 11, salt, 70);
      const Tensor b =
          *ops::Dropout(x, 0.3, DropoutStepSeed(step, 11, salt), 70);
      EXPECT_EQ(a.ToVector<float>(), b.ToVector<float>());
    }
  }
  const absl::StatusOr<Tensor> bad =
      ops::Dropout(x, 0.3, Tensor::HostZeros(DType::kF32, {1}), 1, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("step seed must be one i64"),
            std::string::npos)
      << bad.status();
}

TEST(OpsTest, ConvAndPoolShapes) {
  Tensor x = testing::RandomTensor({2, 28, 28, 1}, 1, DType::kF32);
  Tensor w = testing::RandomTensor({5, 5, 1, 32}, 2, DType::kF32);
  EXPECT_EQ(ops::Conv2D(x, w)->shape(), (Shape{2, 28, 28, 32}));
  ops::Conv2DOptions valid{2, 2, ops::Padding::kValid};
  EXPECT_EQ(ops::Conv2D(x, w, valid)->shape(), (Shape{2, 12, 12, 32}));
  EXPECT_EQ(ops::MaxPool2D(x)->shape(), (Shape{2, 14, 14, 1}));
}

// Ties and NaNs (the golden cases have distinct values): the gradient goes
// to the first maximum of each window in row-major order, a NaN wins its
// window and the first NaN takes the gradient.
TEST(OpsTest, MaxPoolTiesAndNaNsRouteToTheFirstWinner) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // One image, 2x4, one channel; windows 2x2 stride 2: cells {0,1,4,5} and
  // {2,3,6,7}. Window 1 is all 3s; window 2 holds two NaNs (cells 3 and 6).
  Tensor x = V({3, 3, 1, nan, 3, 3, nan, 9}, {1, 2, 4, 1});
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = ops::MaxPool2D(x);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<float> values = y->ToVector<float>();
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0], 3);
  EXPECT_TRUE(std::isnan(values[1]));
  GradientOptions options;
  options.output_gradient = V({10, 20}, {1, 1, 2, 1});
  auto grads = tape.Gradient(*y, {x}, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0]->ToVector<float>(),
            (std::vector<float>{10, 0, 0, 20, 0, 0, 0, 0}));
}

// Overlapping windows (3x3 stride 1, SAME) whose maximum is the same cell
// sum their gradients there.
TEST(OpsTest, MaxPoolOverlappingWindowsSumAtTheSharedWinner) {
  Tensor x = V({1, 2, 3, 4, 9, 5, 6, 7, 8}, {1, 3, 3, 1});
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y =
      ops::MaxPool2D(x, ops::Pool2DOptions{3, 3, 1, 1, ops::Padding::kSame});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToVector<float>(), std::vector<float>(9, 9));
  auto grads = tape.Gradient(*y, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0]->ToVector<float>(),
            (std::vector<float>{0, 0, 0, 0, 9, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace mirrortrain

namespace mirrortrain {
namespace {

TEST(OpsTest, NegativeShapesAreErrorsNotCrashes) {
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  EXPECT_EQ(ops::BroadcastTo(x, {-1, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::Fill(DType::kF32, {3, -2}, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ops::Reshape(x, {-2, -1}).ok());
  EXPECT_FALSE(ops::OneHot(Tensor::FromVector<int32_t>({0}, {1}), -3).ok());
}

// A fused op (`fused`) against the chain of ops it replaces (`parts`), each
// a function of `inputs`: the output and the gradients of sum(y * dy) with
// respect to every input must be equal bit for bit on CPUs, so a model
// moved onto the fused op keeps its numbers. `bad` must fail naming `name`.
void ExpectFusedIsItsPartsExactly(
    const std::string& name,
    const std::function<absl::StatusOr<Tensor>(bool)>& forward,
    const std::vector<Tensor>& inputs, const Tensor& dy,
    const absl::StatusOr<Tensor>& bad) {
  auto run = [&](bool fused) {
    GradientTape tape;
    for (const Tensor& t : inputs) tape.Watch(t);
    absl::StatusOr<Tensor> y = forward(fused);
    EXPECT_TRUE(y.ok()) << y.status();
    auto g = tape.Gradient(*ops::ReduceSum(*ops::Mul(*y, dy)), inputs);
    EXPECT_TRUE(g.ok()) << g.status();
    std::vector<Tensor> out = {*y};
    for (const auto& gi : *g) {
      EXPECT_TRUE(gi.has_value());
      out.push_back(gi.value_or(Tensor()));
    }
    return out;
  };
  const std::vector<Tensor> fused = run(true), parts = run(false);
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(testing::AllClose(fused[i], parts[i], 0, 0)) << i;
  }
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr(name));
}

TEST(FusedOpsTest, MatMulBiasReluIsMatMulThenBiasAddReluExactly) {
  const Tensor x = testing::RandomTensor({37, 19}, 1, DType::kF32);
  const Tensor w = testing::RandomTensor({19, 23}, 2, DType::kF32);
  const Tensor b = testing::RandomTensor({23}, 3, DType::kF32);
  const Tensor dy = testing::RandomTensor({37, 23}, 4, DType::kF32);
  ExpectFusedIsItsPartsExactly(
      "MatMulBiasRelu",
      [&](bool fused) {
        return fused ? ops::MatMulBiasRelu(x, w, b)
                     : ops::BiasAddRelu(*ops::MatMul(x, w), b);
      },
      {x, w, b}, dy, ops::MatMulBiasRelu(x, w, dy));
}

TEST(FusedOpsTest, Conv2DBiasReluIsConv2DThenBiasAddReluExactly) {
  const Tensor x = testing::RandomTensor({3, 9, 7, 4}, 1, DType::kF32);
  const Tensor f = testing::RandomTensor({3, 3, 4, 6}, 2, DType::kF32);
  const Tensor b = testing::RandomTensor({6}, 3, DType::kF32);
  const Tensor dy = testing::RandomTensor({3, 5, 4, 6}, 4, DType::kF32);
  const ops::Conv2DOptions same = {2, 2, ops::Padding::kSame};
  ExpectFusedIsItsPartsExactly(
      "Conv2DBiasRelu",
      [&](bool fused) {
        return fused ? ops::Conv2DBiasRelu(x, f, b, same)
                     : ops::BiasAddRelu(*ops::Conv2D(x, f, same), b);
      },
      {x, f, b}, dy, ops::Conv2DBiasRelu(x, f, dy, same));
}

// A matrix stored with rows wider than it (conv columns aligned for
// cuBLAS) multiplies as its dense copy, plain and transposed; the padding
// (NaN here) is never read.
TEST(GemmOperandTest, ColumnsOfAWiderMatrixMultiplyAsTheirDenseCopy) {
  using ops::internal::GemmOperand;
  const Tensor dense = testing::RandomTensor({5, 6}, 1, DType::kF32);
  Tensor padded = Tensor::HostFull(DType::kF32, {5, 8}, std::nan(""));
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t c = 0; c < 6; ++c) {
      padded.data<float>()[r * 8 + c] = dense.data<float>()[r * 6 + c];
    }
  }
  const absl::StatusOr<GemmOperand> columns = GemmOperand::Columns(padded, 6);
  ASSERT_TRUE(columns.ok()) << columns.status();
  EXPECT_EQ(columns->shape(), Shape({5, 6}));
  EXPECT_EQ(columns->leading_dim(), 8);
  const absl::StatusOr<GemmOperand> plain = GemmOperand::Of(dense, false);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->leading_dim(), 6);
  // [5, 6] @ [6, 3], and [5, 6]^T @ [5, 3] (a filter gradient).
  for (const bool transpose : {false, true}) {
    const Tensor b =
        testing::RandomTensor({transpose ? 5 : 6, 3}, 2, DType::kF32);
    const GemmOperand gb = *GemmOperand::Of(b, false);
    const Shape out_shape = {transpose ? 6 : 5, 3};
    Tensor want = Tensor::HostZeros(DType::kF32, out_shape);
    Tensor got = Tensor::HostZeros(DType::kF32, out_shape);
    ASSERT_TRUE(
        ops::internal::Gemm(*plain, gb, transpose, false, 1.0, 0.0, want).ok());
    ASSERT_TRUE(
        ops::internal::Gemm(*columns, gb, transpose, false, 1.0, 0.0, got)
            .ok());
    EXPECT_TRUE(testing::AllClose(got, want, 0, 0)) << transpose;
  }
  // None at all (a conv over no channels) is an empty matrix.
  const absl::StatusOr<GemmOperand> none = GemmOperand::Columns(padded, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->shape(), Shape({5, 0}));
  for (const int64_t cols : {int64_t{-1}, int64_t{9}}) {
    const absl::Status wrong = GemmOperand::Columns(padded, cols).status();
    EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << cols;
    EXPECT_THAT(std::string(wrong.message()), HasSubstr("columns"));
  }
  EXPECT_FALSE(
      GemmOperand::Columns(Tensor::HostZeros(DType::kF32, {2, 2, 2}), 2).ok());
  EXPECT_FALSE(
      GemmOperand::Columns(Tensor::HostZeros(DType::kI32, {2, 2}), 2).ok());
}

}  // namespace
}  // namespace mirrortrain
