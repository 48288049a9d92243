// bfloat16 rounding (tensor/bfloat16.h, ops/precision_ops.h) and matrix
// products with bf16 operands on the CPU (MatMulPrecision::kBf16): exact
// rounding cases, then products equal to f64 products of the rounded
// operands within f32 summation error, and visibly not the fp32 product.
#include "tensor/bfloat16.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/gradient_tape.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/depthwise_conv_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/precision_ops.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

TEST(BFloat16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(BFloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(RoundToBFloat16(-2.5f), -2.5f);
  // Halfway between 1 and 1 + 2^-7: to the even one, 1.
  EXPECT_EQ(RoundToBFloat16(1.0f + 0x1p-8f), 1.0f);
  // Halfway between 1 + 2^-7 and 1 + 2^-6: to the even one, 1 + 2^-6.
  EXPECT_EQ(RoundToBFloat16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just above halfway rounds up; just below rounds down.
  EXPECT_EQ(RoundToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(RoundToBFloat16(1.0f + 0x1p-8f - 0x1p-20f), 1.0f);
  EXPECT_EQ(RoundToBFloat16(-(1.0f + 0x1p-8f + 0x1p-20f)), -(1.0f + 0x1p-7f));
  // A carry into the exponent.
  EXPECT_EQ(RoundToBFloat16(2.0f - 0x1p-9f), 2.0f);
}

TEST(BFloat16Test, EdgesOfTheRange) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(RoundToBFloat16(inf), inf);
  EXPECT_EQ(RoundToBFloat16(-inf), -inf);
  // The largest bfloat16 stays; float's largest is past it and overflows.
  EXPECT_EQ(RoundToBFloat16(FromBits(0x7f7f0000)), FromBits(0x7f7f0000));
  EXPECT_EQ(RoundToBFloat16(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(RoundToBFloat16(0x1p-133f), 0x1p-133f);  // bf16's least denormal
  EXPECT_EQ(RoundToBFloat16(0x1p-149f), 0.0f);
  EXPECT_TRUE(std::signbit(RoundToBFloat16(-0.0f)));
  // A NaN whose payload is only in the dropped bits stays a NaN (plain
  // truncation would make it infinity), with its sign.
  const float nan_low = FromBits(0xff800001);
  EXPECT_TRUE(std::isnan(RoundToBFloat16(nan_low)));
  EXPECT_TRUE(std::signbit(RoundToBFloat16(nan_low)));
  EXPECT_TRUE(std::isnan(RoundToBFloat16(std::nanf(""))));
}

TEST(BFloat16Test, ArraysRoundAsScalarsInPlaceOrNot) {
  const Tensor x = testing::RandomTensor({1000}, 3, DType::kF32, -50, 50);
  std::vector<float> out(1000),
      in_place(x.data<float>(), x.data<float>() + 1000);
  RoundToBFloat16(x.data<float>(), out.data(), 1000);
  RoundToBFloat16(in_place.data(), in_place.data(), 1000);
  int changed = 0;
  for (int i = 0; i < 1000; ++i) {
    const float v = x.data<float>()[i];
    ASSERT_EQ(out[i], RoundToBFloat16(v));
    ASSERT_EQ(in_place[i], out[i]);
    // Within half a bf16 ulp: 2^-9 relative.
    ASSERT_LE(std::fabs(out[i] - v), std::ldexp(std::fabs(v), -8));
    changed += out[i] != v;
  }
  EXPECT_GT(changed, 990);
}

TEST(PrecisionOpsTest, RoundsF32TensorsOnlyAndCopiesLeaveTheInput) {
  Tensor x = testing::RandomTensor({7, 9}, 5, DType::kF32);
  const Tensor original = *x.Clone();
  absl::StatusOr<Tensor> copy = ops::RoundedToBFloat16(x);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(testing::AllClose(x, original, 0, 0));
  ASSERT_TRUE(ops::RoundToBFloat16InPlace(x).ok());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    ASSERT_EQ(x.data<float>()[i], RoundToBFloat16(original.data<float>()[i]));
    ASSERT_EQ(copy->data<float>()[i], x.data<float>()[i]);
  }
  Tensor d = testing::RandomTensor({5}, 6, DType::kF64);
  const Tensor d0 = *d.Clone();
  ASSERT_TRUE(ops::RoundToBFloat16InPlace(d).ok());
  EXPECT_TRUE(testing::AllClose(d, d0, 0, 0));
}

// A rounded tensor records it on its buffer (Bf16Rendering): rounding it
// again does not run (seen here through a value written behind the
// record's back, which no op does), views inside it share the record, and
// writing the buffer through CopyFrom drops it.
TEST(PrecisionOpsTest, RoundedTensorsAreRecordedUntilOverwritten) {
  Tensor x = testing::RandomTensor({4, 3}, 7, DType::kF32);
  EXPECT_EQ(x.bf16_rendering(), nullptr);
  ASSERT_TRUE(ops::RoundToBFloat16InPlace(x).ok());
  ASSERT_NE(x.bf16_rendering(), nullptr);
  EXPECT_EQ(x.bf16_rendering()->halves, nullptr);  // CPUs read f32 storage.
  EXPECT_NE(x.SliceRows(1, 2)->bf16_rendering(), nullptr);
  EXPECT_NE(x.Reshaped({12})->bf16_rendering(), nullptr);
  const float unrounded = 1.0f + 0x1p-20f;
  x.data<float>()[0] = unrounded;
  ASSERT_TRUE(ops::RoundToBFloat16InPlace(x, /*halves=*/true).ok());
  EXPECT_EQ(x.data<float>()[0], unrounded);

  ASSERT_TRUE(x.CopyFrom(testing::RandomTensor({4, 3}, 8, DType::kF32)).ok());
  EXPECT_EQ(x.bf16_rendering(), nullptr);
  EXPECT_EQ(x.SliceRows(1, 2)->bf16_rendering(), nullptr);
  // A record of part of a buffer covers that part only.
  Tensor rows = *x.SliceRows(1, 2);
  ASSERT_TRUE(ops::RoundToBFloat16InPlace(rows).ok());
  EXPECT_NE(x.SliceRows(2, 1)->bf16_rendering(), nullptr);
  EXPECT_EQ(x.SliceRows(0, 2)->bf16_rendering(), nullptr);
  EXPECT_EQ(x.bf16_rendering(), nullptr);
  // The copy is recorded, its input is not.
  const Tensor y = testing::RandomTensor({5}, 9, DType::kF32);
  EXPECT_NE(ops::RoundedToBFloat16(y)->bf16_rendering(), nullptr);
  EXPECT_EQ(y.bf16_rendering(), nullptr);
}

// Sets the process-wide precision for one scope.
class ScopedPrecision {
 public:
  explicit ScopedPrecision(MatMulPrecision p) : saved_(GetMatMulPrecision()) {
    SetMatMulPrecision(p);
  }
  ~ScopedPrecision() { SetMatMulPrecision(saved_); }

 private:
  MatMulPrecision saved_;
};

Tensor Rounded(const Tensor& t) { return *ops::RoundedToBFloat16(t); }

Tensor ToF64(const Tensor& t) {
  Tensor out = Tensor::HostEmpty(DType::kF64, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    out.data<double>()[i] = t.data<float>()[i];
  }
  return out;
}

TEST(Bf16MatMulTest, OneProductShowsTheRounding) {
  const Tensor a = Tensor::FromVector<float>({1.0f + 0x1p-9f}, {1, 1});
  const Tensor b = Tensor::FromVector<float>({3.0f}, {1, 1});
  EXPECT_EQ(ops::MatMul(a, b)->data<float>()[0], 3.0f + 3 * 0x1p-9f);
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  EXPECT_EQ(ops::MatMul(a, b)->data<float>()[0], 3.0f);
}

// Every transpose, a batched product and one large enough for the
// threaded split: the f64 product of the rounded operands, within f32
// summation error (K products of magnitude < 1), and the unrounded fp32
// product is far from it.
TEST(Bf16MatMulTest, ProductsOfRoundedOperandsSummedInF32) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c :
       std::vector<Case>{{{33, 17}, {17, 29}, false, false},
                         {{17, 33}, {17, 29}, true, false},
                         {{33, 17}, {29, 17}, false, true},
                         {{17, 33}, {29, 17}, true, true},
                         {{3, 8, 16}, {3, 16, 5}, false, false},
                         {{300, 200}, {200, 160}, false, false}}) {
    SCOPED_TRACE(ShapeToString(c.a) + " @ " + ShapeToString(c.b));
    const Tensor a = testing::RandomTensor(c.a, 11, DType::kF32);
    const Tensor b = testing::RandomTensor(c.b, 12, DType::kF32);
    const Tensor exact =
        *ops::MatMul(ToF64(Rounded(a)), ToF64(Rounded(b)), c.ta, c.tb);
    const Tensor fp32 = ToF64(*ops::MatMul(a, b, c.ta, c.tb));
    ScopedPrecision bf16(MatMulPrecision::kBf16);
    absl::StatusOr<Tensor> got = ops::MatMul(a, b, c.ta, c.tb);
    ASSERT_TRUE(got.ok()) << got.status();
    const double k = c.ta ? c.a.end()[-2] : c.a.back();
    EXPECT_TRUE(testing::AllClose(ToF64(*got), exact, 0, k * 0x1p-23));
    const testing::DiffAndNorm d = testing::L2DiffAndNorm(fp32, exact);
    EXPECT_GT(d.diff / d.norm, 1e-3) << "the operands were not rounded";
  }
}

TEST(Bf16MatMulTest, F64ProductsAreNotRounded) {
  const Tensor a = Tensor::FromVector<double>({1.0 + 0x1p-30}, {1, 1});
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  EXPECT_EQ(ops::MatMul(a, a)->data<double>()[0],
            (1.0 + 0x1p-30) * (1.0 + 0x1p-30));
}

// Conv2D's GEMMs go through the same path: a bf16 convolution is the fp32
// convolution of the rounded input and filter, up to summation order.
TEST(Bf16MatMulTest, ConvolutionsRoundTheirOperands) {
  const Tensor x = testing::RandomTensor({4, 9, 9, 3}, 21, DType::kF32);
  const Tensor f = testing::RandomTensor({3, 3, 3, 8}, 22, DType::kF32);
  ops::Conv2DOptions opt;
  opt.padding = ops::Padding::kSame;
  const Tensor of_rounded = *ops::Conv2D(Rounded(x), Rounded(f), opt);
  const Tensor fp32 = *ops::Conv2D(x, f, opt);
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  absl::StatusOr<Tensor> got = ops::Conv2D(x, f, opt);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(testing::AllClose(*got, of_rounded, 0, 27 * 0x1p-23));
  EXPECT_FALSE(testing::AllClose(*got, fp32, 0, 1e-4));
}

// A depthwise convolution reads its operands as the products do: x, the
// filter and, for the gradients, dy rounded to bfloat16, sums in f32. Its
// loops are the same either way, so the results are those of the rounded
// operands bit for bit.
TEST(Bf16MatMulTest, DepthwiseConvolutionsRoundTheirOperands) {
  const Tensor x = testing::RandomTensor({2, 7, 6, 3}, 31, DType::kF32);
  const Tensor f = testing::RandomTensor({3, 3, 3, 2}, 32, DType::kF32);
  const Tensor dy = testing::RandomTensor({2, 4, 6, 6}, 33, DType::kF32);
  const ops::Conv2DOptions opt{2, 1, ops::Padding::kSame};
  auto run = [&](const Tensor& xs, const Tensor& fs, const Tensor& dys) {
    GradientTape tape;
    tape.Watch(xs);
    tape.Watch(fs);
    absl::StatusOr<Tensor> y = ops::DepthwiseConv2D(xs, fs, opt);
    EXPECT_TRUE(y.ok()) << y.status();
    GradientOptions options;
    options.output_gradient = dys;
    auto grads = tape.Gradient(*y, {xs, fs}, options);
    EXPECT_TRUE(grads.ok()) << grads.status();
    return std::vector<Tensor>{*y, *(*grads)[0], *(*grads)[1]};
  };
  const std::vector<Tensor> of_rounded =
      run(Rounded(x), Rounded(f), Rounded(dy));
  const std::vector<Tensor> fp32 = run(x, f, dy);
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  const std::vector<Tensor> got = run(x, f, dy);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(testing::SameBits(got[i], of_rounded[i]));
    EXPECT_FALSE(testing::AllClose(got[i], fp32[i], 0, 1e-4));
  }
}

// The dense layer's product ops keep the bfloat16 operands their forward
// product read for their gradient, and convert the incoming gradient once
// for both backward products: changing x and the kernel in place after the
// forward pass changes no gradient (a backward pass that converted the
// tensors again would read the new values).
TEST(Bf16MatMulTest, BackwardProductsReuseTheForwardConversions) {
  using Run = std::function<absl::StatusOr<Tensor>(const Tensor&, const Tensor&,
                                                   const Tensor&)>;
  const std::pair<const char*, Run> product_ops[] = {
      {"MatMul", [](const Tensor& x, const Tensor& k,
                    const Tensor&) { return ops::MatMul(x, k); }},
      {"MatMulBias", [](const Tensor& x, const Tensor& k,
                        const Tensor& b) { return ops::MatMulBias(x, k, b); }},
      {"MatMulBiasRelu", [](const Tensor& x, const Tensor& k, const Tensor& b) {
         return ops::MatMulBiasRelu(x, k, b);
       }}};
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  for (const auto& [name, run] : product_ops) {
    SCOPED_TRACE(name);
    // Gradients of sum(y * w) for x, kernel and bias; `change_inputs`
    // rewrites x and the kernel between the forward and backward passes.
    auto gradients = [&](bool change_inputs) {
      const Tensor x = testing::RandomTensor({6, 5}, 31, DType::kF32);
      const Tensor kernel = testing::RandomTensor({5, 4}, 32, DType::kF32);
      const Tensor bias = testing::RandomTensor({4}, 33, DType::kF32);
      const Tensor w = testing::RandomTensor({6, 4}, 34, DType::kF32);
      GradientTape tape;
      for (const Tensor* t : {&x, &kernel, &bias}) tape.Watch(*t);
      absl::StatusOr<Tensor> y = run(x, kernel, bias);
      EXPECT_TRUE(y.ok()) << y.status();
      if (!y.ok()) return std::vector<std::vector<float>>{};
      if (change_inputs) {
        for (const Tensor* t : {&x, &kernel}) {
          float* p = t->data<float>();
          for (int64_t i = 0; i < t->num_elements(); ++i) p[i] = 3 * p[i] + 1;
        }
      }
      GradientOptions options;
      options.output_gradient = w;
      auto grads = tape.Gradient(*y, {x, kernel, bias}, options);
      EXPECT_TRUE(grads.ok()) << grads.status();
      if (!grads.ok()) return std::vector<std::vector<float>>{};
      std::vector<std::vector<float>> values;
      for (const auto& g : *grads) {  // None for MatMul's unused bias.
        values.push_back(g ? g->ToVector<float>() : std::vector<float>{});
      }
      return values;
    };
    EXPECT_EQ(gradients(/*change_inputs=*/true),
              gradients(/*change_inputs=*/false));
  }
}

// Kernel-filled bf16 storage (conv's im2col) is for GPU operands only; on
// CPUs a bf16 operand is f32 storage of rounded values (GemmOperand::Of),
// and either kind stands for an f32 value of its shape.
TEST(Bf16MatMulTest, OperandsDescribeTheValueTheyStandFor) {
  const absl::StatusOr<ops::internal::GemmOperand> storage =
      ops::internal::GemmOperand::Bf16Storage({2, 3}, Device::Cpu());
  ASSERT_FALSE(storage.ok());
  EXPECT_NE(storage.status().message().find("GPU operands"), std::string::npos)
      << storage.status();
  const Tensor t = Tensor::HostZeros(DType::kF32, {2, 3});
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  absl::StatusOr<ops::internal::GemmOperand> of =
      ops::internal::GemmOperand::Of(t);
  ASSERT_TRUE(of.ok()) << of.status();
  EXPECT_TRUE(of->bf16());
  EXPECT_EQ(of->bf16_storage(), nullptr);
  EXPECT_EQ(of->shape(), Shape({2, 3}));
  EXPECT_EQ(of->dtype(), DType::kF32);
  EXPECT_EQ(of->DebugString(), "f32[2,3]@cpu:0 as bf16");
  EXPECT_FALSE(ops::internal::GemmOperand().defined());
  // Mismatched operands are refused with both described.
  const absl::StatusOr<ops::internal::GemmOperand> plain =
      ops::internal::GemmOperand::Of(Tensor::HostZeros(DType::kF32, {3, 2}),
                                     false);
  Tensor out = Tensor::HostZeros(DType::kF32, {2, 2});
  const absl::Status mixed =
      ops::internal::Gemm(*of, *plain, false, false, 1.0, 0.0, out);
  EXPECT_NE(mixed.message().find("one operand converted to bfloat16"),
            std::string::npos)
      << mixed;
}

// A product reads a rounded tensor (a layer output under mixed bfloat16)
// as it is, and a tensor not known to be rounded through a rounded copy;
// both products are the same numbers.
TEST(Bf16MatMulTest, RoundedOperandsAreReadWithoutACopy) {
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  const Tensor raw = testing::RandomTensor({6, 5}, 10, DType::kF32);
  Tensor rounded = *raw.Clone();
  ASSERT_TRUE(ops::RoundToBFloat16InPlace(rounded).ok());
  const Tensor view = *rounded.SliceRows(2, 3);
  for (const Tensor* t : {static_cast<const Tensor*>(&rounded), &view}) {
    const absl::StatusOr<ops::internal::GemmOperand> op =
        ops::internal::GemmOperand::Of(*t);
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_TRUE(op->bf16());
    EXPECT_EQ(op->data(), t->raw_data());
  }
  const absl::StatusOr<ops::internal::GemmOperand> copied =
      ops::internal::GemmOperand::Of(raw);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(copied->bf16());
  EXPECT_NE(copied->data(), raw.raw_data());
  const Tensor w = testing::RandomTensor({5, 4}, 11, DType::kF32);
  const absl::StatusOr<Tensor> from_raw = ops::MatMul(raw, w);
  const absl::StatusOr<Tensor> from_rounded = ops::MatMul(rounded, w);
  ASSERT_TRUE(from_raw.ok() && from_rounded.ok());
  EXPECT_TRUE(testing::AllClose(*from_raw, *from_rounded, 0, 0));
}

// With an outer tape recording the backward pass (higher-order
// gradients), the backward products are recorded ops: d/dx of
// d(x @ x)/dx = 2x for a 1x1 x is 2.
TEST(Bf16MatMulTest, OuterTapesRecordTheBackwardProducts) {
  ScopedPrecision bf16(MatMulPrecision::kBf16);
  const Tensor x = Tensor::FromVector<float>({3.0f}, {1, 1});
  GradientTape outer;
  outer.Watch(x);
  GradientTape inner;
  inner.Watch(x);
  absl::StatusOr<Tensor> y = ops::MatMul(x, x);
  ASSERT_TRUE(y.ok()) << y.status();
  auto dy = inner.Gradient(*y, {x});
  ASSERT_TRUE(dy.ok()) << dy.status();
  EXPECT_EQ((*dy)[0]->ScalarAt(0), 6.0);
  auto d2y = outer.Gradient(*(*dy)[0], {x});
  ASSERT_TRUE(d2y.ok()) << d2y.status();
  ASSERT_TRUE((*d2y)[0].has_value())
      << "the backward products were not recorded";
  EXPECT_EQ((*d2y)[0]->ScalarAt(0), 2.0);
}

}  // namespace
}  // namespace mirrortrain
