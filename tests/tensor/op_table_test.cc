// One table, one row per registered op (tensor/op.h): every row gets a
// float64 finite-difference check of its gradient on the CPU (or, for a
// non-differentiable op, a check that nothing flows through it) and its GPU
// kernel against the CPU one on fresh random inputs, forward and gradient
// (skipped with the reason without a GPU). A new op adds a row here; the
// first test fails for an op without one.
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/clip_ops.h"
#include "tensor/ops/collective_ops.h"
#include "tensor/ops/conv_ops.h"
#include "tensor/ops/depthwise_conv_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/normalization_ops.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"
#include "tests/test_util.h"

namespace mirrortrain {
namespace {

using Inputs = std::vector<Tensor>;
using testing::RandomTensor;

struct OpRow {
  std::string op;  // The registered name.
  // Runs the op on inputs made by `inputs`.
  std::function<absl::StatusOr<Tensor>(const Inputs&)> call;
  // Fresh inputs with floating ones of `dtype`, from `seed`.
  std::function<Inputs(DType dtype, uint64_t seed)> inputs;
  // Finite-difference step and tolerance (float64).
  double fd_eps = 1e-6;
  double fd_tol = 1e-6;
};

// Random floating tensor of `shape` in [lo, hi).
auto Rand(Shape shape, double lo = -1, double hi = 1) {
  return [=](DType dtype, uint64_t seed) {
    return RandomTensor(shape, seed, dtype, lo, hi);
  };
}

template <typename... Makers>
std::function<Inputs(DType, uint64_t)> Args(Makers... makers) {
  return [=](DType dtype, uint64_t seed) {
    Inputs out;
    uint64_t k = 0;
    (out.push_back(makers(dtype, seed * 31 + k++)), ...);
    return out;
  };
}

// A fixed integer tensor (labels, indices), whatever the dtype.
auto Ints(std::vector<int64_t> values, Shape shape) {
  return [=](DType, uint64_t) {
    return Tensor::FromVector<int64_t>(values, shape);
  };
}

template <typename F>
std::function<absl::StatusOr<Tensor>(const Inputs&)> Unary(F f) {
  return [f](const Inputs& in) { return f(in[0]); };
}

const std::vector<OpRow>& Rows() {
  static const auto* rows = new std::vector<OpRow>{
      {"Add", [](const Inputs& in) { return ops::Add(in[0], in[1]); },
       Args(Rand({2, 3, 4}), Rand({3, 1}))},
      {"Sub", [](const Inputs& in) { return ops::Sub(in[0], in[1]); },
       Args(Rand({2, 3}), Rand({3}))},
      {"Mul", [](const Inputs& in) { return ops::Mul(in[0], in[1]); },
       Args(Rand({2, 3}), Rand({2, 1}))},
      {"Div", [](const Inputs& in) { return ops::Div(in[0], in[1]); },
       Args(Rand({2, 3}), Rand({3}, 0.5, 2))},
      // Broadcast; ties (and a NaN) are Maximum/Minimum tests' in ops_test.
      {"Maximum", [](const Inputs& in) { return ops::Maximum(in[0], in[1]); },
       Args(Rand({2, 3, 4}), Rand({3, 1}))},
      {"Minimum", [](const Inputs& in) { return ops::Minimum(in[0], in[1]); },
       Args(Rand({3, 1}), Rand({2, 3, 4}))},
      {"Neg", Unary(ops::Neg), Args(Rand({3, 4}))},
      {"Exp", Unary(ops::Exp), Args(Rand({3, 4}))},
      {"Log", Unary(ops::Log), Args(Rand({3, 4}, 0.5, 3))},
      {"Sqrt", Unary(ops::Sqrt), Args(Rand({3, 4}, 0.5, 3))},
      {"Square", Unary(ops::Square), Args(Rand({3, 4}))},
      {"Relu", Unary(ops::Relu), Args(Rand({3, 4}))},
      {"Sigmoid", Unary(ops::Sigmoid), Args(Rand({3, 4}, -3, 3))},
      {"Tanh", Unary(ops::Tanh), Args(Rand({3, 4}, -2, 2))},
      {"Gelu",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         // Both forms in one output, so both gradients are checked.
         auto exact = ops::Gelu(in[0], false);
         auto approximate = ops::Gelu(in[0], true);
         if (!exact.ok() || !approximate.ok()) return exact.status();
         return ops::Concat({*exact, *approximate}, 0);
       },
       Args(Rand({3, 4}, -3, 3))},
      {"Silu", Unary(ops::Silu), Args(Rand({3, 4}, -4, 4))},
      {"Elu", Unary(ops::Elu), Args(Rand({3, 4}, -3, 3))},
      {"Selu", Unary(ops::Selu), Args(Rand({3, 4}, -3, 3))},
      {"Softplus", Unary(ops::Softplus), Args(Rand({3, 4}, -4, 4))},
      {"LeakyRelu", Unary(ops::LeakyRelu), Args(Rand({3, 4}, -3, 3))},
      // Both kinks (0 and 6) in range (the fixed draws keep clear of them,
      // as Relu's do of 0).
      {"Relu6", Unary(ops::Relu6), Args(Rand({3, 4}, -3, 9))},
      {"MatMul",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         // A plain product broadcast onto a batched one with both
         // operands transposed, so both gradients are checked (Add, not
         // Concat, whose gradient cannot be differentiated again).
         MT_ASSIGN_OR_RETURN(Tensor plain, ops::MatMul(in[0], in[1]));
         MT_ASSIGN_OR_RETURN(Tensor batched,
                             ops::MatMul(in[2], in[3], true, true));
         return ops::Add(plain, batched);
       },
       Args(Rand({3, 4}), Rand({4, 5}), Rand({2, 4, 3}), Rand({2, 5, 4}))},
      {"MatMulBias",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         // Plain, and with the first operand transposed (added, as in the
         // MatMul row).
         MT_ASSIGN_OR_RETURN(Tensor plain, ops::MatMulBias(in[0], in[1], in[2]));
         MT_ASSIGN_OR_RETURN(Tensor transposed,
                             ops::MatMulBias(in[3], in[1], in[2], true));
         return ops::Add(plain, transposed);
       },
       Args(Rand({3, 4}), Rand({4, 5}), Rand({5}), Rand({4, 3}))},
      {"BiasAdd", [](const Inputs& in) { return ops::BiasAdd(in[0], in[1]); },
       Args(Rand({2, 3, 4}), Rand({4}))},
      {"BiasAddRelu",
       [](const Inputs& in) { return ops::BiasAddRelu(in[0], in[1]); },
       Args(Rand({3, 4}), Rand({4}))},
      {"MatMulBiasRelu",
       [](const Inputs& in) {
         return ops::MatMulBiasRelu(in[0], in[1], in[2]);
       },
       Args(Rand({6, 4}), Rand({4, 5}), Rand({5}))},
      {"Softmax", Unary(ops::Softmax), Args(Rand({3, 5}, -3, 3))},
      {"LogSoftmax", Unary(ops::LogSoftmax), Args(Rand({3, 5}, -3, 3))},
      {"SparseSoftmaxCrossEntropyWithLogits",
       [](const Inputs& in) {
         return ops::SparseSoftmaxCrossEntropyWithLogits(in[0], in[1]);
       },
       Args(Rand({4, 6}, -3, 3), Ints({0, 5, 2, 2}, {4}))},
      {"Dropout",
       [](const Inputs& in) { return ops::Dropout(in[0], 0.4, 99); },
       Args(Rand({4, 5}))},
      {"Conv2D",
       [](const Inputs& in) {
         return ops::Conv2D(in[0], in[1], {2, 2, ops::Padding::kSame});
       },
       Args(Rand({2, 5, 4, 2}), Rand({3, 3, 2, 3}))},
      {"Conv2DTranspose",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         // Strided SAME to an odd height; dilated VALID: one output.
         MT_ASSIGN_OR_RETURN(
             Tensor strided, ops::Conv2DTranspose(in[0], in[1], 5, 4,
                                                  {2, 2, ops::Padding::kSame}));
         MT_ASSIGN_OR_RETURN(
             Tensor dilated,
             ops::Conv2DTranspose(in[0], in[2], 5, 4,
                                  {1, 1, ops::Padding::kValid, 2, 2}));
         MT_ASSIGN_OR_RETURN(strided, ops::Reshape(strided, {-1}));
         MT_ASSIGN_OR_RETURN(dilated, ops::Reshape(dilated, {-1}));
         return ops::Concat({strided, dilated}, 0);
       },
       Args(Rand({2, 3, 2, 3}), Rand({3, 3, 2, 3}), Rand({2, 2, 2, 3}))},
      {"DepthwiseConv2D",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         // Two filters per channel, strided SAME padding; one filter per
         // channel, VALID, a wider window: both in one output.
         MT_ASSIGN_OR_RETURN(
             Tensor two,
             ops::DepthwiseConv2D(in[0], in[1], {2, 1, ops::Padding::kSame}));
         MT_ASSIGN_OR_RETURN(
             Tensor one,
             ops::DepthwiseConv2D(in[0], in[2], {1, 1, ops::Padding::kValid}));
         MT_ASSIGN_OR_RETURN(two, ops::Reshape(two, {-1}));
         MT_ASSIGN_OR_RETURN(one, ops::Reshape(one, {-1}));
         return ops::Concat({two, one}, 0);
       },
       Args(Rand({2, 5, 6, 3}), Rand({3, 3, 3, 2}), Rand({2, 4, 3, 1}))},
      {"Conv2DBiasRelu",
       [](const Inputs& in) {
         return ops::Conv2DBiasRelu(in[0], in[1], in[2],
                                    {1, 2, ops::Padding::kValid});
       },
       Args(Rand({2, 5, 6, 2}), Rand({3, 3, 2, 4}), Rand({4}))},
      // The fused GPU op (direct 3x3 conv, 2x2 pool): odd output columns.
      {"Conv2DMaxPool",
       [](const Inputs& in) {
         return ops::Conv2DMaxPool(in[0], in[1], {1, 1, ops::Padding::kSame},
                                   {});
       },
       Args(Rand({2, 6, 7, 2}), Rand({3, 3, 2, 3}))},
      // The same with the bias and relu in the pooled kernel's epilogue.
      {"Conv2DMaxPoolBiasRelu",
       [](const Inputs& in) {
         return ops::Conv2DMaxPoolBiasRelu(
             in[0], in[1], in[2], {1, 1, ops::Padding::kSame}, {});
       },
       Args(Rand({2, 6, 7, 2}), Rand({3, 3, 2, 3}), Rand({3}))},
      {"MaxPool2D",
       [](const Inputs& in) {
         return ops::MaxPool2D(in[0], {3, 3, 2, 2, ops::Padding::kSame});
       },
       Args(Rand({2, 5, 6, 3}))},
      {"AvgPool2D",
       [](const Inputs& in) {
         return ops::AvgPool2D(in[0], {3, 3, 2, 2, ops::Padding::kSame});
       },
       Args(Rand({2, 5, 6, 3}))},
      // Both outputs reach the checked result: sum + 0.5 * sum_sq.
      {"ChannelSums",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         MT_ASSIGN_OR_RETURN(ops::ChannelSumsResult r, ops::ChannelSums(in[0]));
         MT_ASSIGN_OR_RETURN(Tensor half, ops::Scale(r.sum_sq, 0.5));
         return ops::Add(r.sum, half);
       },
       Args(Rand({2, 3, 4, 5}))},
      // From the float64 sums of x (40 elements per channel; inputs away
      // from 0 as real activations are): mean + 0.5 * variance.
      {"MomentsFromSums",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         MT_ASSIGN_OR_RETURN(ops::ChannelSumsResult s, ops::ChannelSums(in[0]));
         MT_ASSIGN_OR_RETURN(ops::MomentsResult m,
                             ops::MomentsFromSums(s, 40, in[0].dtype()));
         MT_ASSIGN_OR_RETURN(Tensor half, ops::Scale(m.variance, 0.5));
         return ops::Add(m.mean, half);
       },
       Args(Rand({2, 4, 5, 3}, 2, 4))},
      {"BatchNormalization",
       [](const Inputs& in) {
         return ops::BatchNormalization(in[0], in[1], in[2], in[3], in[4],
                                        1e-3);
       },
       Args(Rand({6, 2, 4}), Rand({4}), Rand({4}, 0.5, 2), Rand({4}),
            Rand({4}))},
      {"LayerNormalization",
       [](const Inputs& in) {
         return ops::LayerNormalization(in[0], in[1], in[2], 1e-3);
       },
       Args(Rand({2, 3, 5}), Rand({5}, 0.5, 2), Rand({5}))},
      // One replica's view of two replicas holding the same values: the
      // all-reduce doubles, and so does the gradient.
      {"CrossReplicaSum",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         const ops::AllReduceSumFn twice = [](absl::Span<Tensor> ts) {
           for (Tensor& t : ts) {
             MT_ASSIGN_OR_RETURN(Tensor d, ops::Scale(t, 2.0));
             MT_RETURN_IF_ERROR(t.CopyFrom(d));
           }
           return absl::OkStatus();
         };
         MT_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                             ops::CrossReplicaSum({in[0], in[1]}, twice));
         return ops::Add(out[0], out[1]);
       },
       Args(Rand({2, 3}), Rand({2, 3}))},
      {"ReduceSum",
       [](const Inputs& in) { return ops::ReduceSum(in[0], {0, 2}, true); },
       Args(Rand({2, 3, 4}))},
      {"L2Loss", Unary(ops::L2Loss), Args(Rand({2, 3}))},
      {"BroadcastTo",
       [](const Inputs& in) { return ops::BroadcastTo(in[0], {2, 3, 4}); },
       Args(Rand({3, 1}))},
      {"Reshape",
       [](const Inputs& in) { return ops::Reshape(in[0], {4, -1}); },
       Args(Rand({2, 3, 4}))},
      {"Transpose",
       [](const Inputs& in) { return ops::Transpose(in[0], {2, 0, 1}); },
       Args(Rand({2, 3, 4}))},
      {"Concat", [](const Inputs& in) { return ops::Concat(in, 1); },
       Args(Rand({2, 3, 4}), Rand({2, 2, 4}))},
      {"Slice",
       [](const Inputs& in) { return ops::Slice(in[0], 1, 2, 3); },
       Args(Rand({2, 6, 4}))},
      {"Split",
       [](const Inputs& in) -> absl::StatusOr<Tensor> {
         // Pieces weighed apart, the middle one unused (a zero gradient).
         MT_ASSIGN_OR_RETURN(const std::vector<Tensor> pieces,
                             ops::Split(in[0], 3, 1));
         MT_ASSIGN_OR_RETURN(const Tensor twice, ops::Scale(pieces[0], 2));
         return ops::Sub(twice, pieces[2]);
       },
       Args(Rand({2, 6, 4}))},
      {"Gather",
       [](const Inputs& in) { return ops::EmbeddingLookup(in[0], in[1]); },
       Args(Rand({5, 3}), Ints({4, 0, 4, 2, 4, 1}, {2, 3}))},
      {"Cast",
       [](const Inputs& in) {
         // To the other floating type and back: identity up to rounding.
         const DType other =
             in[0].dtype() == DType::kF64 ? DType::kF32 : DType::kF64;
         auto c = ops::Cast(in[0], other);
         if (!c.ok()) return c;
         return ops::Cast(*c, in[0].dtype());
       },
       Args(Rand({3, 2})),
       // The round trip through f32 is the identity only up to f32
       // rounding: a step f32 resolves.
       1e-2, 1e-4},
      {"ClipByValue",
       [](const Inputs& in) { return ops::ClipByValue(in[0], -0.5, 0.3); },
       Args(Rand({4, 5}))},
      {"ArgMax", [](const Inputs& in) { return ops::ArgMax(in[0], 1); },
       Args(Rand({3, 5}))},
      {"OneHot",
       [](const Inputs& in) {
         return ops::OneHot(in[1], 4, in[0].dtype());
       },
       Args(Rand({1}), Ints({3, 0, 1}, {3}))},
      {"StopGradient", Unary(ops::StopGradient), Args(Rand({2, 3}))},
  };
  return *rows;
}

const OpRow* FindRow(const std::string& op) {
  for (const OpRow& row : Rows()) {
    if (row.op == op) return &row;
  }
  return nullptr;
}

TEST(OpTableTest, EveryRegisteredOpHasARowAndEveryRowAnOp) {
  EXPECT_TRUE(OpRegistry::Global().duplicates().empty())
      << "an op name is defined twice: "
      << OpRegistry::Global().duplicates()[0];
  for (const OpEntry* entry : OpRegistry::Global().Entries()) {
    EXPECT_NE(FindRow(entry->name), nullptr)
        << "op " << entry->name << " has no row in op_table_test.cc";
  }
  std::set<std::string> names;
  for (const OpRow& row : Rows()) {
    EXPECT_NE(OpRegistry::Global().Find(row.op), nullptr)
        << "row " << row.op << " names no registered op";
    EXPECT_TRUE(names.insert(row.op).second) << "two rows for " << row.op;
  }
}

class OpTableTest : public ::testing::TestWithParam<std::string> {
 protected:
  const OpDef& def() const {
    return *OpRegistry::Global().Find(GetParam())->def;
  }
  const OpRow& row() const { return *FindRow(GetParam()); }
};

// Gradients of sum(op(inputs) * w) for a fixed random w, on `device`.
absl::StatusOr<std::vector<std::optional<Tensor>>> Gradients(
    const OpRow& row, const Inputs& inputs, const Tensor& w) {
  GradientTape tape;
  std::vector<Tensor> sources;
  for (const Tensor& in : inputs) {
    if (IsFloating(in.dtype())) {
      tape.Watch(in);
      sources.push_back(in);
    }
  }
  absl::StatusOr<Tensor> y = row.call(inputs);
  if (!y.ok()) return y.status();
  absl::StatusOr<Tensor> yw = ops::Mul(*y, w);
  if (!yw.ok()) return yw.status();
  absl::StatusOr<Tensor> loss = ops::ReduceSum(*yw);
  if (!loss.ok()) return loss.status();
  return tape.Gradient(*loss, sources);
}

TEST_P(OpTableTest, GradientMatchesFiniteDifferencesInFloat64) {
  const Inputs inputs = row().inputs(DType::kF64, 1);
  if (def().differentiable) {
    testing::ExpectGradientsMatch(row().call, inputs, row().fd_eps,
                                  row().fd_tol);
    return;
  }
  // Nothing flows through: every floating input is unconnected.
  absl::StatusOr<Tensor> y = row().call(inputs);
  ASSERT_TRUE(y.ok()) << y.status();
  if (!IsFloating(y->dtype())) return;  // Integer output: nothing to check.
  Tensor w = RandomTensor(y->shape(), 7, y->dtype());
  auto grads = Gradients(row(), inputs, w);
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (const auto& g : *grads) EXPECT_FALSE(g.has_value());
}

TEST_P(OpTableTest, GpuKernelMatchesCpuForwardAndGradient) {
  if (!cuda::Built()) GTEST_SKIP() << "built without CUDA";
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const Inputs cpu_in = row().inputs(dtype, 2);
    Inputs gpu_in;
    for (const Tensor& t : cpu_in) gpu_in.push_back(*t.To(Device::Cuda(0)));
    absl::StatusOr<Tensor> cpu_y = row().call(cpu_in);
    absl::StatusOr<Tensor> gpu_y = row().call(gpu_in);
    ASSERT_TRUE(cpu_y.ok()) << cpu_y.status();
    ASSERT_TRUE(gpu_y.ok()) << gpu_y.status();
    ASSERT_EQ(gpu_y->device(), Device::Cuda(0));
    // Sums of a few terms in another order: a few ulps of the dtype.
    const double tol = dtype == DType::kF32 ? 1e-5 : 1e-12;
    EXPECT_TRUE(testing::AllClose(*gpu_y->To(Device::Cpu()), *cpu_y, tol, tol));
    if (!def().differentiable || !IsFloating(cpu_y->dtype())) continue;
    // The output's dtype, not the inputs' (ChannelSums sums in f64).
    Tensor w = RandomTensor(cpu_y->shape(), 3, cpu_y->dtype());
    auto cpu_g = Gradients(row(), cpu_in, w);
    auto gpu_g = Gradients(row(), gpu_in, *w.To(Device::Cuda(0)));
    ASSERT_TRUE(cpu_g.ok()) << cpu_g.status();
    ASSERT_TRUE(gpu_g.ok()) << gpu_g.status();
    ASSERT_EQ(cpu_g->size(), gpu_g->size());
    for (size_t i = 0; i < cpu_g->size(); ++i) {
      ASSERT_EQ((*cpu_g)[i].has_value(), (*gpu_g)[i].has_value());
      if (!(*cpu_g)[i].has_value()) continue;
      EXPECT_TRUE(testing::AllClose(*(*gpu_g)[i]->To(Device::Cpu()),
                                    *(*cpu_g)[i], tol, tol))
          << "gradient of input " << i;
    }
  }
}

// sum_i <dL/dx_i, v_i> for L = sum(op(inputs) * w): the op's gradient,
// computed by its gradient function under whatever tape records it.
absl::StatusOr<Tensor> GradientProbe(const OpRow& row, const Inputs& inputs,
                                     const Tensor& w,
                                     const std::vector<Tensor>& v) {
  MT_ASSIGN_OR_RETURN(auto grads, Gradients(row, inputs, w));
  Tensor sum = Tensor::Scalar<double>(0);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].has_value()) continue;
    MT_ASSIGN_OR_RETURN(Tensor gv, ops::Mul(*grads[i], v[i]));
    MT_ASSIGN_OR_RETURN(gv, ops::ReduceSum(gv));
    MT_ASSIGN_OR_RETURN(sum, ops::Add(sum, gv));
  }
  return sum;
}

// Higher-order gradients (tensor/op.h): an op declared with a recorded
// gradient is differentiated twice correctly (finite differences of its
// gradient, in float64); any other op's gradient is an error naming it
// when differentiated again, never a silent zero.
TEST_P(OpTableTest, SecondOrderGradientMatchesFiniteDifferencesOrIsAnError) {
  if (!def().differentiable) return;  // Nothing flows through, checked above.
  const Inputs inputs = row().inputs(DType::kF64, 1);
  absl::StatusOr<Tensor> y = row().call(inputs);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<Tensor> sources, v;
  for (const Tensor& in : inputs) {
    if (!IsFloating(in.dtype())) continue;
    sources.push_back(in);
    v.push_back(RandomTensor(in.shape(), 11 + v.size(), DType::kF64));
  }
  // The output weights are a source too (the last input here): the
  // gradient depends on them even for a linear op, whose second derivative
  // in its inputs is 0, so an unrecorded gradient wrongly declared recorded
  // cannot pass by giving zeros.
  Inputs all = inputs;
  all.push_back(RandomTensor(y->shape(), 5, DType::kF64));
  sources.push_back(all.back());
  auto probe = [&](const Inputs& with_w) {
    return GradientProbe(row(), Inputs(with_w.begin(), with_w.end() - 1),
                         with_w.back(), v);
  };
  GradientTape outer;
  for (const Tensor& s : sources) outer.Watch(s);
  absl::StatusOr<Tensor> h = probe(all);
  ASSERT_TRUE(h.ok()) << h.status();
  GradientOptions options;
  options.unconnected = UnconnectedGradients::kZero;  // A linear op's.
  auto second = outer.Gradient(*h, sources, options);
  if (!def().gradient_recorded) {
    // The error names the op, or another op of the row's call whose
    // gradient is not recorded either (a row may compute its inputs).
    ASSERT_FALSE(second.ok());
    const std::string message(second.status().message());
    const std::string prefix = "the gradient of op ";
    const size_t at = message.find(prefix);
    ASSERT_NE(at, std::string::npos) << message;
    const size_t begin = at + prefix.size();
    const std::string named =
        message.substr(begin, message.find(' ', begin) - begin);
    const OpEntry* entry = OpRegistry::Global().Find(named);
    ASSERT_NE(entry, nullptr) << message;
    EXPECT_FALSE(entry->def->gradient_recorded) << message;
    EXPECT_NE(message.find("cannot be differentiated again"), std::string::npos)
        << message;
    return;
  }
  ASSERT_TRUE(second.ok()) << second.status();
  const double eps = row().fd_eps, tol = row().fd_tol;
  size_t s = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    if (!IsFloating(all[k].dtype())) continue;
    const Tensor& g = *(*second)[s++];
    for (int64_t i = 0; i < all[k].num_elements(); ++i) {
      Inputs plus = all, minus = all;
      plus[k] = *all[k].Clone();
      minus[k] = *all[k].Clone();
      plus[k].data<double>()[i] += eps;
      minus[k].data<double>()[i] -= eps;
      absl::StatusOr<Tensor> h_plus = probe(plus);
      absl::StatusOr<Tensor> h_minus = probe(minus);
      ASSERT_TRUE(h_plus.ok() && h_minus.ok());
      const double numeric =
          (h_plus->ScalarAt(0) - h_minus->ScalarAt(0)) / (2 * eps);
      EXPECT_NEAR(g.ScalarAt(i), numeric, tol * (1 + std::abs(numeric)))
          << "input " << k << " element " << i;
    }
  }
}

std::vector<std::string> RegisteredOps() {
  return OpRegistry::Global().Names();
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTableTest, ::testing::ValuesIn(RegisteredOps()),
                         [](const auto& info) { return info.param; });

// An op whose gradient is missing is an error naming it, also when the
// caller asks for zeros where a source is unconnected.
// (Not registered: the table covers registered ops only.)
constinit const OpDef kNoGradientTestOp{"NoGradientForTest", nullptr};

TEST(OpTableTest, DifferentiatingThroughAnOpWithoutGradientNamesIt) {
  Tensor x = RandomTensor({3}, 1);
  for (auto unconnected :
       {UnconnectedGradients::kNone, UnconnectedGradients::kZero}) {
    GradientTape tape;
    tape.Watch(x);
    absl::StatusOr<Tensor> y = x.Clone();
    ASSERT_TRUE(y.ok());
    tape::RecordOperation(kNoGradientTestOp, {x}, {*y});
    GradientOptions options;
    options.unconnected = unconnected;
    auto grads = tape.Gradient(*ops::ReduceSum(*y), {x}, options);
    ASSERT_FALSE(grads.ok());
    EXPECT_NE(grads.status().message().find("NoGradientForTest"),
              std::string::npos)
        << grads.status();
  }
}

}  // namespace
}  // namespace mirrortrain
