// Keras's (height, width) windows: conv2d, depthwise_conv2d and the pooling
// layers with kernel_size, strides and pool_size given as pairs whose two
// entries differ, global max pooling (the image as one window), and conv1d's
// windows over sequences (same, valid, causal), against
// Keras (scripts/golden/window_layers.py -> tests/golden/window_layers.txt);
// an integer means the square pair; and what the config refuses.
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/array_ops.h"
#include "tests/test_util.h"

namespace mirrortrain::models {
namespace {

constexpr double kF32Tol = 2e-5;

const std::map<std::string, Tensor>& Golden() {
  return testing::CachedGolden("window_layers.txt");
}
Tensor F32(const Tensor& t) { return *ops::Cast(t, DType::kF32); }
Tensor F64(const Tensor& t) {
  return *ops::Cast(*t.To(Device::Cpu()), DType::kF64);
}
using Pair = std::vector<int64_t>;

struct WindowCase {
  std::string golden;  // The case's prefix in the golden file.
  std::string type;
  std::vector<std::pair<std::string, ParamValue>> params;
  // Between the layer's name and its variables' (an LSTM's cell).
  std::string scope = "";
  // The layer's Keras auto-name where it is not its type (PReLU's).
  std::string layer_name = "";
  // A container's one layer (time_distributed's): its type and keys.
  std::string inner_type = "";
  std::vector<std::pair<std::string, ParamValue>> inner_params = {};
};

void PrintTo(const WindowCase& c, std::ostream* os) { *os << c.golden; }

class WindowGoldenTest : public ::testing::TestWithParam<WindowCase> {};

// The case's layer built on `device` against Keras's values and gradients.
void ExpectMatchesKeras(const WindowCase& c, Device device) {
  ASSERT_FALSE(Golden().empty()) << "cannot load window_layers.txt";
  auto g = [&](const std::string& part) -> const Tensor& {
    return Golden().at(c.golden + "/" + part);
  };
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(c.type, c.params);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  if (!c.inner_type.empty()) {
    absl::StatusOr<LayerSpec> inner =
        MakeLayerSpec(c.inner_type, c.inner_params);
    ASSERT_TRUE(inner.ok()) << inner.status();
    inner->path = "model.layers[0].layers[0]";
    spec->layers = {*inner};
  }
  absl::StatusOr<Tensor> on_device = F32(g("x")).To(device);
  ASSERT_TRUE(on_device.ok()) << on_device.status();
  const Tensor x = *on_device;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Build(
      ModelDef{Shape(x.shape().begin() + 1, x.shape().end()), {*spec}}, 1,
      device);
  ASSERT_TRUE(model.ok()) << model.status();
  // Keras's variables in Keras's order, with its shapes.
  const std::vector<Variable*>& vars = (*model)->variables();
  std::vector<std::string> parts;
  for (const char* part :
       {"kernel", "recurrent_kernel", "depthwise_kernel", "pointwise_kernel",
        "bias", "gamma", "beta", "alpha"}) {
    if (Golden().contains(c.golden + "/" + part)) parts.push_back(part);
  }
  ASSERT_EQ(vars.size(), parts.size());
  std::vector<Tensor> sources = {x};
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_EQ(vars[i]->name(), (c.layer_name.empty() ? c.type : c.layer_name) +
                                   "/" + c.scope + parts[i]);
    ASSERT_EQ(vars[i]->shape(), g(parts[i]).shape()) << parts[i];
    absl::StatusOr<Tensor> value = F32(g(parts[i])).To(device);
    ASSERT_TRUE(value.ok()) << value.status();
    ASSERT_TRUE(vars[i]->Assign(*value).ok());
    sources.push_back(vars[i]->value());
  }
  GradientTape tape;
  tape.Watch(x);
  absl::StatusOr<Tensor> y = (*model)->Call(x, {.training = true});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), g("y").shape());
  GradientOptions options;
  absl::StatusOr<Tensor> upstream = F32(g("upstream")).To(device);
  ASSERT_TRUE(upstream.ok()) << upstream.status();
  options.output_gradient = *upstream;
  auto grads = tape.Gradient(*y, sources, options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(testing::AllClose(F64(*y), g("y"), kF32Tol, kF32Tol));
  EXPECT_TRUE(testing::AllClose(F64(*(*grads)[0]), g("dx"), kF32Tol, kF32Tol));
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_TRUE(testing::AllClose(F64(*(*grads)[i + 1]), g("d" + parts[i]),
                                  kF32Tol, kF32Tol))
        << parts[i];
  }
}

TEST_P(WindowGoldenTest, LayerMatchesKeras) {
  ExpectMatchesKeras(GetParam(), Device::Cpu());
}

// The same on gpu:0 (f32 products, TF32 off by default): the layers' GPU
// paths (rectangular and one-row windows, the depthwise and 1x1 kernels,
// layer normalization's over group rows, broadcast up-sampling) against
// Keras too.
TEST_P(WindowGoldenTest, LayerMatchesKerasOnAGpu) {
  if (!cuda::Built()) GTEST_SKIP() << "built without CUDA";
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  ExpectMatchesKeras(GetParam(), Device::Cuda(0));
}

INSTANTIATE_TEST_SUITE_P(
    Keras, WindowGoldenTest,
    ::testing::Values(
        WindowCase{"conv_same",
                   "conv2d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", Pair{1, 3}},
                    {"strides", Pair{2, 1}},
                    {"padding", "same"}}},
        WindowCase{"conv_valid",
                   "conv2d",
                   {{"filters", int64_t{3}},
                    {"kernel_size", Pair{3, 2}},
                    {"strides", Pair{1, 2}}}},
        WindowCase{"depthwise",
                   "depthwise_conv2d",
                   {{"kernel_size", Pair{3, 1}},
                    {"strides", Pair{2, 2}},
                    {"padding", "same"},
                    {"depth_multiplier", int64_t{2}}}},
        WindowCase{"max_pool",
                   "max_pooling2d",
                   {{"pool_size", Pair{2, 3}}, {"strides", Pair{1, 2}}}},
        WindowCase{"avg_pool",
                   "average_pooling2d",
                   {{"pool_size", Pair{3, 2}},
                    {"strides", Pair{2, 1}},
                    {"padding", "same"}}},
        WindowCase{
            "max_pool_default", "max_pooling2d", {{"pool_size", Pair{3, 2}}}},
        WindowCase{"global_max", "global_max_pooling2d", {}},
        WindowCase{
            "global_max_keep", "global_max_pooling2d", {{"keepdims", true}}},
        // Conv1D on sequences [2, 9, 3]: conv2d's op on a one-row image.
        WindowCase{"conv1d_same",
                   "conv1d",
                   {{"filters", int64_t{4}},
                    {"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"padding", "same"}}},
        WindowCase{"conv1d_valid",
                   "conv1d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{4}},
                    {"use_bias", false}}},
        WindowCase{"conv1d_causal",
                   "conv1d",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"padding", "causal"},
                    {"activation", "tanh"}}},
        // Pooling over steps: the 2-D pools on a one-row image.
        WindowCase{"max_pool1d",
                   "max_pooling1d",
                   {{"pool_size", int64_t{3}}, {"strides", int64_t{2}}}},
        WindowCase{"avg_pool1d",
                   "average_pooling1d",
                   {{"pool_size", int64_t{4}},
                    {"strides", int64_t{3}},
                    {"padding", "same"}}},
        WindowCase{"max_pool1d_default", "max_pooling1d", {}},
        WindowCase{"global_max1d", "global_max_pooling1d", {}},
        WindowCase{"global_avg1d_keep",
                   "global_average_pooling1d",
                   {{"keepdims", true}}},
        // TensorFlow's uneven split (1 before, 2 after); valid with strides
        // and relu without a bias; causal with nothing to pad.
        WindowCase{"conv1d_same_odd",
                   "conv1d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{4}},
                    {"strides", int64_t{2}},
                    {"padding", "same"}}},
        WindowCase{"conv1d_valid_stride",
                   "conv1d",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{2}},
                    {"strides", int64_t{3}},
                    {"use_bias", false},
                    {"activation", "relu"}}},
        WindowCase{"conv1d_causal_one",
                   "conv1d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{1}},
                    {"padding", "causal"}}},
        // Depthwise then pointwise, Keras's three variables.
        WindowCase{"separable_same",
                   "separable_conv2d",
                   {{"filters", int64_t{4}},
                    {"kernel_size", Pair{3, 2}},
                    {"strides", int64_t{2}},
                    {"padding", "same"},
                    {"depth_multiplier", int64_t{2}},
                    {"activation", "relu"}}},
        WindowCase{"separable_valid",
                   "separable_conv2d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{3}},
                    {"use_bias", false}}},
        // Groups of channels over every position (group_normalization).
        WindowCase{"group_norm", "group_normalization", {{"groups", 2}}},
        WindowCase{"group_norm_seq",
                   "group_normalization",
                   {{"groups", 3}, {"epsilon", 0.01}, {"center", false}}},
        WindowCase{
            "group_norm_instance", "group_normalization", {{"groups", 6}}},
        WindowCase{"max_pool1d_same",
                   "max_pooling1d",
                   {{"pool_size", int64_t{4}},
                    {"strides", int64_t{3}},
                    {"padding", "same"}}},
        WindowCase{"global_avg1d", "global_average_pooling1d", {}},
        // Resizing without variables.
        WindowCase{"up_sampling", "up_sampling2d", {{"size", Pair{2, 3}}}},
        WindowCase{"zero_padding", "zero_padding2d", {{"padding", Pair{1, 2}}}},
        // Dilated (atrous) windows: im2col's taps dilation_rate apart, the
        // span padded and sized as one window.
        WindowCase{"conv_dilated_same",
                   "conv2d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", Pair{3, 2}},
                    {"dilation_rate", Pair{2, 3}},
                    {"padding", "same"}}},
        WindowCase{"conv_dilated_valid",
                   "conv2d",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{3}},
                    {"dilation_rate", int64_t{2}},
                    {"activation", "relu"}}},
        WindowCase{"conv1d_dilated_causal",
                   "conv1d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{3}},
                    {"dilation_rate", int64_t{3}},
                    {"padding", "causal"}}},
        WindowCase{"conv1d_dilated_same",
                   "conv1d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{2}},
                    {"dilation_rate", int64_t{3}},
                    {"padding", "same"},
                    {"use_bias", false}}},
        WindowCase{"depthwise_dilated",
                   "depthwise_conv2d",
                   {{"kernel_size", Pair{3, 2}},
                    {"dilation_rate", int64_t{2}},
                    {"padding", "same"},
                    {"depth_multiplier", int64_t{2}}}},
        WindowCase{"separable_dilated",
                   "separable_conv2d",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{2}},
                    {"dilation_rate", Pair{2, 3}}}},
        // Grouped convolutions: Keras's kernel [kh, kw, in / groups,
        // filters], each group of channels with its filters.
        WindowCase{"conv_grouped",
                   "conv2d",
                   {{"filters", int64_t{6}},
                    {"kernel_size", Pair{3, 2}},
                    {"strides", Pair{2, 1}},
                    {"groups", int64_t{3}},
                    {"padding", "same"}}},
        WindowCase{"conv_grouped_two",
                   "conv2d",
                   {{"filters", int64_t{4}},
                    {"kernel_size", int64_t{3}},
                    {"groups", int64_t{2}},
                    {"activation", "relu"},
                    {"use_bias", false}}},
        WindowCase{"conv1d_grouped",
                   "conv1d",
                   {{"filters", int64_t{6}},
                    {"kernel_size", int64_t{2}},
                    {"groups", int64_t{3}},
                    {"dilation_rate", int64_t{2}},
                    {"padding", "causal"}}},
        // Each side its own count ([[top, bottom], [left, right]] held
        // flat).
        WindowCase{"zero_padding_sides",
                   "zero_padding2d",
                   {{"padding", Pair{0, 1, 2, 1}}}},
        WindowCase{"cropping", "cropping2d", {{"cropping", Pair{1, 0, 1, 2}}}},
        WindowCase{"cropping_square", "cropping2d", {{"cropping", int64_t{2}}}},
        WindowCase{
            "zero_padding1d", "zero_padding1d", {{"padding", Pair{2, 1}}}},
        WindowCase{"cropping1d", "cropping1d", {{"cropping", Pair{1, 3}}}},
        WindowCase{
            "cropping_end", "cropping2d", {{"cropping", Pair{0, 2, 0, 1}}}},
        // Recurrent: every gradient through time.
        WindowCase{"lstm_seq",
                   "lstm",
                   {{"units", int64_t{4}}, {"return_sequences", true}},
                   "lstm_cell/"},
        WindowCase{"lstm_back",
                   "lstm",
                   {{"units", int64_t{3}},
                    {"go_backwards", true},
                    {"use_bias", false}},
                   "lstm_cell/"},
        WindowCase{"lstm_back_seq",
                   "lstm",
                   {{"units", int64_t{2}},
                    {"go_backwards", true},
                    {"return_sequences", true},
                    {"activation", "relu"}},
                   "lstm_cell/"},
        WindowCase{"gru_seq",
                   "gru",
                   {{"units", int64_t{4}}, {"return_sequences", true}},
                   "gru_cell/"},
        WindowCase{"gru_before",
                   "gru",
                   {{"units", int64_t{3}},
                    {"reset_after", false},
                    {"go_backwards", true}},
                   "gru_cell/"},
        WindowCase{"gru_no_bias",
                   "gru",
                   {{"units", int64_t{2}},
                    {"use_bias", false},
                    {"return_sequences", true},
                    {"activation", "relu"}},
                   "gru_cell/"},
        // Values moved or repeated.
        WindowCase{"permute_seq", "permute", {{"dims", Pair{2, 1}}}},
        WindowCase{"permute_image", "permute", {{"dims", Pair{3, 1, 2}}}},
        WindowCase{"repeat_vector", "repeat_vector", {{"n", int64_t{4}}}},
        // A learned activation, Keras's auto-name p_re_lu.
        WindowCase{"prelu_image",
                   "prelu",
                   {{"shared_axes", Pair{1, 2}}},
                   "",
                   "p_re_lu"},
        WindowCase{"prelu_seq", "prelu", {}, "", "p_re_lu"},
        // Transposed convolutions.
        WindowCase{"conv_transpose_same",
                   "conv2d_transpose",
                   {{"filters", int64_t{2}},
                    {"kernel_size", Pair{3, 2}},
                    {"strides", Pair{2, 3}},
                    {"padding", "same"}}},
        WindowCase{"conv_transpose_valid",
                   "conv2d_transpose",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"activation", "relu"}}},
        WindowCase{"conv_transpose_pad",
                   "conv2d_transpose",
                   {{"filters", int64_t{2}},
                    {"kernel_size", Pair{2, 3}},
                    {"strides", Pair{3, 2}},
                    {"output_padding", Pair{1, 1}},
                    {"padding", "same"},
                    {"use_bias", false}}},
        WindowCase{"conv_transpose_wide",
                   "conv2d_transpose",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{2}},
                    {"strides", int64_t{3}}}},
        WindowCase{"conv_transpose_dilated",
                   "conv2d_transpose",
                   {{"filters", int64_t{2}},
                    {"kernel_size", Pair{2, 3}},
                    {"dilation_rate", Pair{2, 1}},
                    {"padding", "same"}}},
        WindowCase{"conv1d_transpose",
                   "conv1d_transpose",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"padding", "same"},
                    {"activation", "tanh"}}},
        WindowCase{"up_bilinear",
                   "up_sampling2d",
                   {{"size", Pair{2, 3}}, {"interpolation", "bilinear"}}},
        WindowCase{"up_bilinear_edge",
                   "up_sampling2d",
                   {{"size", int64_t{4}}, {"interpolation", "bilinear"}}},
        WindowCase{"up_bilinear_long",
                   "up_sampling2d",
                   {{"size", Pair{7, 1}}, {"interpolation", "bilinear"}}},
        WindowCase{"depthwise1d",
                   "depthwise_conv1d",
                   {{"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"padding", "same"},
                    {"depth_multiplier", int64_t{2}}}},
        WindowCase{"depthwise1d_dilated",
                   "depthwise_conv1d",
                   {{"kernel_size", int64_t{2}},
                    {"dilation_rate", int64_t{3}},
                    {"activation", "relu"},
                    {"use_bias", false}}},
        WindowCase{"separable1d",
                   "separable_conv1d",
                   {{"filters", int64_t{4}},
                    {"kernel_size", int64_t{3}},
                    {"padding", "same"},
                    {"depth_multiplier", int64_t{2}},
                    {"activation", "relu"}}},
        WindowCase{"separable1d_dilated",
                   "separable_conv1d",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{2}},
                    {"dilation_rate", int64_t{2}},
                    {"use_bias", false}}},
        WindowCase{"depthwise_strided_dilated",
                   "depthwise_conv2d",
                   {{"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"dilation_rate", int64_t{2}},
                    {"padding", "same"}}},
        WindowCase{"separable1d_strided_dilated",
                   "separable_conv1d",
                   {{"filters", int64_t{3}},
                    {"kernel_size", int64_t{2}},
                    {"strides", int64_t{2}},
                    {"dilation_rate", int64_t{2}}}},
        WindowCase{"up_bilinear_mixed",
                   "up_sampling2d",
                   {{"size", Pair{61, 1}}, {"interpolation", "bilinear"}}},
        WindowCase{"up_bilinear_mixed_two",
                   "up_sampling2d",
                   {{"size", Pair{41, 1}}, {"interpolation", "bilinear"}}},
        WindowCase{"time_distributed_conv",
                   "time_distributed",
                   {},
                   "conv2d/",
                   "",
                   "conv2d",
                   {{"filters", int64_t{4}},
                    {"kernel_size", int64_t{3}},
                    {"strides", int64_t{2}},
                    {"padding", "same"},
                    {"activation", "relu"}}},
        WindowCase{"time_distributed_dense",
                   "time_distributed",
                   {},
                   "dense/",
                   "",
                   "dense",
                   {{"units", int64_t{3}}}},
        WindowCase{
            "rescaling", "rescaling", {{"scale", 2.0}, {"offset", -1.0}}},
        WindowCase{"unit_normalization", "unit_normalization", {}},
        WindowCase{"simple_rnn_seq",
                   "simple_rnn",
                   {{"units", int64_t{4}}, {"return_sequences", true}},
                   "simple_rnn_cell/"},
        WindowCase{"simple_rnn_back",
                   "simple_rnn",
                   {{"units", int64_t{3}},
                    {"go_backwards", true},
                    {"activation", "relu"}},
                   "simple_rnn_cell/"},
        WindowCase{"conv1d_transpose_pad",
                   "conv1d_transpose",
                   {{"filters", int64_t{2}},
                    {"kernel_size", int64_t{4}},
                    {"strides", int64_t{3}},
                    {"output_padding", int64_t{2}}}}),
    [](const ::testing::TestParamInfo<WindowCase>& info) {
      return info.param.golden;
    });

// An integer is the square pair: the same variables, initial values and
// outputs, bit for bit.
TEST(WindowPairTest, AnIntegerIsTheSquarePair) {
  const Tensor x = F32(Golden().at("conv_same/x"));
  auto build = [](ParamValue kernel, ParamValue strides) {
    absl::StatusOr<LayerSpec> spec =
        MakeLayerSpec("conv2d", {{"filters", int64_t{4}},
                                 {"kernel_size", std::move(kernel)},
                                 {"strides", std::move(strides)}});
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Build(ModelDef{{7, 6, 3}, {*spec}}, 5, Device::Cpu());
    EXPECT_TRUE(model.ok()) << model.status();
    return *std::move(model);
  };
  auto square = build(int64_t{3}, int64_t{2});
  auto pair = build(Pair{3, 3}, Pair{2, 2});
  ASSERT_EQ(square->variables().size(), pair->variables().size());
  for (size_t i = 0; i < square->variables().size(); ++i) {
    EXPECT_TRUE(testing::SameBits(square->variables()[i]->value(),
                                  pair->variables()[i]->value()));
  }
  EXPECT_TRUE(testing::SameBits(*square->Call(x, {}), *pair->Call(x, {})));
}

// A model of one layer of `type` with `params` on inputs of `input`: its
// build status.
absl::Status BuildOne(const std::string& type,
                      std::vector<std::pair<std::string, ParamValue>> params,
                      Shape input) {
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(params));
  if (!spec.ok()) return spec.status();
  spec->path = "model.layers[0]";
  return Model::Build(ModelDef{std::move(input), {*spec}}, 1, Device::Cpu())
      .status();
}

// A pair must hold two integers in range (the config's own errors are
// tests/trainer/config_test.cc's); a window must fit the input in each
// dimension, named as given.
TEST(WindowPairTest, BadPairsAreRefused) {
  const ParamSchema& conv = LayerRegistry::Global().Find("conv2d")->params;
  for (const ParamValue& bad : {ParamValue(Pair{1, 2, 3}), ParamValue(Pair{3}),
                                ParamValue(Pair{0, 3}), ParamValue(1.5)}) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(
        "conv2d", {{"filters", int64_t{1}}, {"kernel_size", bad}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_FALSE(CheckParams(conv, spec->params).ok())
        << ParamValueToString(bad);
  }
  absl::StatusOr<LayerSpec> good = MakeLayerSpec(
      "conv2d", {{"filters", int64_t{1}}, {"kernel_size", Pair{1, 7}}});
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(CheckParams(conv, good->params).ok());
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(
      "max_pooling2d", {{"pool_size", Pair{2, 9}}, {"padding", "valid"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{7, 6, 3}, {*spec}}, 1, Device::Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(
                "pool_size 2x9 does not fit the 7x6 input with padding valid"),
            std::string::npos)
      << model.status();
}

// A dilated window must fit the input by its span; conv and transposed
// layers take it with strides 1 only (Keras's rule), depthwise and
// separable ones with strides too; the errors say so.
TEST(WindowPairTest, DilatedWindowsAreChecked) {
  const auto build = BuildOne;
  const absl::Status wide = build("conv2d",
                                  {{"filters", int64_t{1}},
                                   {"kernel_size", Pair{3, 2}},
                                   {"dilation_rate", int64_t{3}}},
                                  {7, 6, 3});
  EXPECT_TRUE(wide.ok()) << wide;  // A 7x4 span on the 7x6 input.
  const absl::Status too_wide = build(
      "depthwise_conv2d",
      {{"kernel_size", int64_t{3}}, {"dilation_rate", Pair{3, 4}}}, {7, 6, 3});
  EXPECT_THAT(std::string(too_wide.message()),
              ::testing::HasSubstr("kernel_size 3 dilated by 3x4 (7x9 cells) "
                                   "does not fit the 7x6 input with padding "
                                   "valid"));
  const absl::Status steps = build("conv1d",
                                   {{"filters", int64_t{1}},
                                    {"kernel_size", int64_t{4}},
                                    {"dilation_rate", int64_t{3}}},
                                   {9, 3});
  EXPECT_THAT(std::string(steps.message()),
              ::testing::HasSubstr("kernel_size 4 dilated by 3 (10 cells) "
                                   "does not fit the 9 steps with padding "
                                   "valid"));
  // Causal pads the span in front: any kernel fits.
  EXPECT_TRUE(build("conv1d",
                    {{"filters", int64_t{1}},
                     {"kernel_size", int64_t{4}},
                     {"dilation_rate", int64_t{3}},
                     {"padding", "causal"}},
                    {9, 3})
                  .ok());
  for (const std::string type :
       {"conv2d", "conv1d", "conv2d_transpose", "conv1d_transpose"}) {
    const absl::Status strided = build(
        type,
        {{"filters", int64_t{1}},
         {"kernel_size", int64_t{2}},
         {"strides", int64_t{2}},
         {"dilation_rate", int64_t{2}}},
        type.find("1d") != std::string::npos ? Shape{9, 3} : Shape{7, 6, 3});
    EXPECT_THAT(std::string(strided.message()),
                ::testing::HasSubstr("dilation_rate: 2 with strides 2: a "
                                     "dilated window takes strides 1"))
        << type;
  }
  // Keras's depthwise and separable layers take both (their goldens).
  for (const std::string type : {"depthwise_conv2d", "depthwise_conv1d",
                                 "separable_conv2d", "separable_conv1d"}) {
    std::vector<std::pair<std::string, ParamValue>> params = {
        {"kernel_size", int64_t{2}},
        {"strides", int64_t{2}},
        {"dilation_rate", int64_t{2}}};
    if (type.starts_with("separable"))
      params.push_back({"filters", int64_t{1}});
    const absl::Status both = build(
        type, params, type.ends_with("1d") ? Shape{9, 3} : Shape{7, 6, 3});
    EXPECT_TRUE(both.ok()) << type << ": " << both;
  }
}

// The 1-D depthwise and separable layers take sequences of the channels
// they were built for, and say so (not the one-row image they run).
TEST(WindowPairTest, OneDimensionalDepthwiseLayersCheckTheirInput) {
  EXPECT_THAT(std::string(BuildOne("depthwise_conv1d",
                                   {{"kernel_size", int64_t{2}}}, {7, 6, 3})
                              .message()),
              ::testing::HasSubstr("expects [batch, steps, channels] input"));
  EXPECT_THAT(std::string(BuildOne("separable_conv1d",
                                   {{"filters", int64_t{2}},
                                    {"kernel_size", int64_t{4}},
                                    {"dilation_rate", int64_t{3}}},
                                   {9, 3})
                              .message()),
              ::testing::HasSubstr("kernel_size 4 dilated by 3 (10 cells) "
                                   "does not fit the 9 steps"));
  for (const std::string type : {"depthwise_conv1d", "separable_conv1d"}) {
    std::vector<std::pair<std::string, ParamValue>> params = {
        {"kernel_size", int64_t{2}}};
    if (type.starts_with("separable"))
      params.push_back({"filters", int64_t{2}});
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, params);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Build(ModelDef{{9, 3}, {*spec}}, 1, Device::Cpu());
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<Tensor> y =
        (*model)->Call(testing::RandomTensor({1, 9, 4}, 1, DType::kF32), {});
    ASSERT_FALSE(y.ok()) << type;
    EXPECT_THAT(std::string(y.status().message()),
                ::testing::HasSubstr("expects [batch, steps, 3] input, got "
                                     "[1,9,4]"))
        << type;
  }
}

// A transposed convolution's output_padding is below its strides (Keras's
// rule) and its output must convolve back to the input's size
// (TensorFlow's); the errors name the key.
TEST(WindowPairTest, TransposedConvolutionSizesAreChecked) {
  EXPECT_TRUE(BuildOne("conv2d_transpose",
                       {{"filters", int64_t{2}},
                        {"kernel_size", int64_t{3}},
                        {"strides", Pair{2, 3}},
                        {"output_padding", Pair{1, 2}}},
                       {3, 4, 3})
                  .ok());
  EXPECT_THAT(std::string(BuildOne("conv2d_transpose",
                                   {{"filters", int64_t{2}},
                                    {"kernel_size", int64_t{3}},
                                    {"strides", Pair{2, 3}},
                                    {"output_padding", Pair{1, 3}}},
                                   {3, 4, 3})
                              .message()),
              ::testing::HasSubstr(
                  "output_padding: 3 is not below strides 3 (Keras's rule)"));
  // Same padding, an even kernel and no extra cell: (3 - 1) * 2 + 0 = 4
  // output rows, which convolve to 2.
  EXPECT_THAT(std::string(BuildOne("conv1d_transpose",
                                   {{"filters", int64_t{2}},
                                    {"kernel_size", int64_t{2}},
                                    {"strides", int64_t{2}},
                                    {"padding", "same"},
                                    {"output_padding", int64_t{0}}},
                                   {3, 3})
                              .message()),
              ::testing::HasSubstr("output_padding: an output of 4 cells "
                                   "convolves to 2, not the input's 3"));
  EXPECT_THAT(std::string(BuildOne("conv2d_transpose",
                                   {{"filters", int64_t{2}},
                                    {"kernel_size", int64_t{3}}},
                                   {9, 3})
                              .message()),
              ::testing::HasSubstr("NHWC"));
  // The layer reads the input size it was built for (its output's is
  // fixed).
  absl::StatusOr<LayerSpec> spec =
      MakeLayerSpec("conv2d_transpose", {{"filters", int64_t{2}},
                                         {"kernel_size", int64_t{3}},
                                         {"strides", int64_t{2}}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{3, 4, 5}, {*spec}}, 1, Device::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Tensor> y =
      (*model)->Call(testing::RandomTensor({1, 3, 5, 5}, 1, DType::kF32), {});
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(std::string(y.status().message()),
              ::testing::HasSubstr(
                  "expects NHWC input [batch, 3, 4, 5], got [1,3,5,5]"));
}

// groups must divide the input channels and the filters (Keras's rule);
// the error names the key and which does not divide.
TEST(WindowPairTest, GroupsMustDivideChannelsAndFilters) {
  auto build = [](const std::string& type, int64_t filters, int64_t groups,
                  Shape input) -> absl::Status {
    absl::StatusOr<LayerSpec> spec =
        MakeLayerSpec(type, {{"filters", filters},
                             {"kernel_size", int64_t{2}},
                             {"groups", groups}});
    if (!spec.ok()) return spec.status();
    spec->path = "model.layers[0]";
    return Model::Build(ModelDef{std::move(input), {*spec}}, 1, Device::Cpu())
        .status();
  };
  EXPECT_TRUE(build("conv2d", 6, 2, {5, 5, 4}).ok());
  EXPECT_THAT(std::string(build("conv2d", 6, 4, {5, 5, 4}).message()),
              ::testing::HasSubstr("groups: 4 does not divide the 6 filters"));
  EXPECT_THAT(
      std::string(build("conv1d", 6, 2, {9, 3}).message()),
      ::testing::HasSubstr("groups: 2 does not divide the 3 input channels"));
  // A layer takes the channels it was built for: twice as many are not
  // read as two groups (Keras's InputSpec).
  absl::StatusOr<LayerSpec> spec = MakeLayerSpec(
      "conv2d", {{"filters", int64_t{4}}, {"kernel_size", int64_t{2}}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{5, 5, 3}, {*spec}}, 1, Device::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Tensor> doubled =
      (*model)->Call(testing::RandomTensor({1, 5, 5, 6}, 1, DType::kF32), {});
  ASSERT_FALSE(doubled.ok());
  EXPECT_THAT(std::string(doubled.status().message()),
              ::testing::HasSubstr("expects NHWC input with 3 channels"));
}

// Inputs a layer cannot read, and the one line each gets: Permute takes an
// order of every example axis; RepeatVector a vector per example; PReLU
// shares alpha across example axes only; a crop leaves cells.
TEST(WindowPairTest, LayersRefuseInputsTheyCannotRead) {
  for (const auto& [type, key, value, input, expected] :
       std::vector<std::tuple<std::string, std::string, ParamValue, Shape,
                              std::string>>{
           {"permute",
            "dims",
            Pair{1, 1},
            {9, 3},
            "dims: [1, 1] is not an order of the 2 example axes 1..2"},
           {"permute",
            "dims",
            Pair{2, 1},
            {7, 6, 3},
            "dims: [2, 1] is not an order of the 3 example axes"},
           {"repeat_vector",
            "n",
            int64_t{2},
            {9, 3},
            "expects [batch, features] input, got [1,9,3]"},
           {"prelu",
            "shared_axes",
            Pair{3},
            {9, 3},
            "shared_axes: 3 is not an example axis of input"},
           // A crop must leave cells on every axis; the error names it.
           {"cropping2d",
            "cropping",
            Pair{4, 3, 0, 0},
            {7, 6, 3},
            "cropping 4 and 3 leaves none of the 7 cells of axis 1"},
           {"cropping2d",
            "cropping",
            int64_t{3},
            {7, 6, 3},
            "cropping 3 and 3 leaves none of the 6 cells of axis 2"},
           {"cropping1d",
            "cropping",
            Pair{5, 4},
            {9, 3},
            "cropping 5 and 4 leaves none of the 9 cells of axis 1"}}) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, {{key, value}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Build(ModelDef{input, {*spec}}, 1, Device::Cpu());
    ASSERT_FALSE(model.ok()) << type;
    EXPECT_THAT(std::string(model.status().message()),
                ::testing::HasSubstr(expected));
  }
}

// Keras numbers PReLU layers under its own prefix: p_re_lu, p_re_lu_1.
TEST(WindowPairTest, PReluTakesKerasAutoNames) {
  std::vector<LayerSpec> layers;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec("prelu", {});
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->path = absl::StrCat("model.layers[", i, "]");
    layers.push_back(*spec);
  }
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Build(ModelDef{{4}, layers}, 1, Device::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->variables().size(), 2u);
  EXPECT_EQ((*model)->variables()[0]->name(), "p_re_lu/alpha");
  EXPECT_EQ((*model)->variables()[1]->name(), "p_re_lu_1/alpha");
}

// Causal conv1d layers (a byte language model's body): an output sees no
// later step, so changing step t leaves every output before t bit for bit
// and changes the one at t; same padding sees both sides.
TEST(Conv1DTest, CausalOutputsSeeNoLaterStep) {
  auto build = [](const std::string& padding) {
    std::vector<LayerSpec> layers;
    for (const auto& [filters, k] :
         {std::pair<int64_t, int64_t>{5, 3}, {4, 2}}) {
      absl::StatusOr<LayerSpec> spec =
          MakeLayerSpec("conv1d", {{"filters", filters},
                                   {"kernel_size", k},
                                   {"padding", padding},
                                   {"activation", "relu"}});
      EXPECT_TRUE(spec.ok()) << spec.status();
      spec->path = absl::StrCat("model.layers[", layers.size(), "]");
      layers.push_back(*spec);
    }
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Build(ModelDef{{8, 3}, layers}, 3, Device::Cpu());
    EXPECT_TRUE(model.ok()) << model.status();
    return *std::move(model);
  };
  Tensor x = testing::RandomTensor({2, 8, 3}, 11, DType::kF32);
  Tensor changed = testing::RandomTensor({2, 8, 3}, 11, DType::kF32);
  const int64_t t = 5;
  for (int64_t c = 0; c < 3; ++c) changed.data<float>()[(8 + t) * 3 + c] += 1;
  for (const std::string padding : {"causal", "same"}) {
    SCOPED_TRACE(padding);
    std::unique_ptr<Model> model = build(padding);
    ASSERT_EQ(model->output_shape(), (Shape{8, 4}));
    const Tensor a = *model->Call(x, {}), b = *model->Call(changed, {});
    // Example 1, steps before t, then step t (the first example is equal).
    const float* pa = a.data<float>() + 8 * 4;
    const float* pb = b.data<float>() + 8 * 4;
    bool before_equal = true, at_changed = false;
    for (int64_t i = 0; i < t * 4; ++i) before_equal &= pa[i] == pb[i];
    for (int64_t i = t * 4; i < (t + 1) * 4; ++i) at_changed |= pa[i] != pb[i];
    EXPECT_EQ(before_equal, padding == "causal");
    EXPECT_TRUE(at_changed);
    for (int64_t i = 0; i < 8 * 4; ++i) {
      ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
    }
  }
}

// conv1d and the 1-D pools read sequences; a window must fit them
// (valid), or span at most 2 * steps - 1 (same); causal takes any kernel.
TEST(Conv1DTest, InputsAndWindowsThatDoNotFitAreRefused) {
  auto build = [](const Shape& input, int64_t k, const std::string& padding) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(
        "conv1d",
        {{"filters", int64_t{2}}, {"kernel_size", k}, {"padding", padding}});
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    return Model::Build(ModelDef{input, {*spec}}, 1, Device::Cpu());
  };
  auto message = [](const absl::StatusOr<std::unique_ptr<Model>>& m) {
    return m.ok() ? std::string("ok") : std::string(m.status().message());
  };
  EXPECT_NE(message(build({7, 6, 3}, 3, "valid"))
                .find("expects [batch, steps, channels] input, got [1,7,6,3]"),
            std::string::npos);
  EXPECT_NE(message(build({5, 3}, 6, "valid"))
                .find("kernel_size 6 does not fit the 5 steps with padding "
                      "valid"),
            std::string::npos);
  EXPECT_NE(message(build({5, 3}, 10, "same"))
                .find("kernel_size 10 does not fit the 5 steps (padding "
                      "same: at most 2 * steps - 1)"),
            std::string::npos);
  EXPECT_TRUE(build({5, 3}, 9, "same").ok());
  absl::StatusOr<std::unique_ptr<Model>> causal = build({5, 3}, 10, "causal");
  ASSERT_TRUE(causal.ok()) << causal.status();
  EXPECT_EQ((*causal)->output_shape(), (Shape{5, 2}));

  // The 1-D pools alike.
  auto pool = [](const std::string& type, const Shape& input,
                 std::vector<std::pair<std::string, ParamValue>> params) {
    absl::StatusOr<LayerSpec> spec = MakeLayerSpec(type, std::move(params));
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    return Model::Build(ModelDef{input, {*spec}}, 1, Device::Cpu());
  };
  EXPECT_NE(message(pool("global_max_pooling1d", {7, 6, 3}, {}))
                .find("expects [batch, steps, channels] input, got [1,7,6,3]"),
            std::string::npos);
  EXPECT_NE(message(pool("max_pooling1d", {5, 3}, {{"pool_size", int64_t{6}}}))
                .find("pool_size 6 does not fit the 5 steps with padding "
                      "valid"),
            std::string::npos);
  EXPECT_NE(message(pool("average_pooling1d", {5, 3},
                         {{"pool_size", int64_t{10}}, {"padding", "same"}}))
                .find("pool_size 10 does not fit the 5 steps (padding same"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<Model>> ok =
      pool("max_pooling1d", {5, 3},
           {{"pool_size", int64_t{9}}, {"padding", "same"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->output_shape(), (Shape{1, 3}));  // ceil(5 / 9).
}

// Groups of consecutive channels: their count must divide the channels;
// Keras's default is 32 groups.
TEST(GroupNormalizationTest, GroupsMustDivideTheChannels) {
  auto build = [](const Shape& input, int64_t groups) {
    absl::StatusOr<LayerSpec> spec =
        MakeLayerSpec("group_normalization", {{"groups", groups}});
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->path = "model.layers[0]";
    return Model::Build(ModelDef{input, {*spec}}, 1, Device::Cpu());
  };
  absl::StatusOr<std::unique_ptr<Model>> bad = build({4, 4, 6}, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "groups: 4 groups do not divide the 6 channels"),
            std::string::npos)
      << bad.status();
  absl::StatusOr<std::unique_ptr<Model>> keras_default = build({4, 4, 64}, 32);
  ASSERT_TRUE(keras_default.ok()) << keras_default.status();
  EXPECT_EQ((*keras_default)->output_shape(), (Shape{4, 4, 64}));

  // A replica's shard of no rows (mirrored training with fewer rows than
  // replicas) passes through.
  absl::StatusOr<std::unique_ptr<Model>> images = build({4, 4, 6}, 2);
  ASSERT_TRUE(images.ok()) << images.status();
  absl::StatusOr<Tensor> none = (*images)->Call(
      testing::RandomTensor({0, 4, 4, 6}, 1, DType::kF32), {.training = true});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->shape(), (Shape{0, 4, 4, 6}));
  // One group over [batch, C] is a layer normalization of the channels.
  absl::StatusOr<std::unique_ptr<Model>> one = build({6}, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<LayerSpec> ln = MakeLayerSpec("layer_normalization", {});
  ASSERT_TRUE(ln.ok());
  ln->path = "model.layers[0]";
  absl::StatusOr<std::unique_ptr<Model>> layer_norm =
      Model::Build(ModelDef{{6}, {*ln}}, 1, Device::Cpu());
  ASSERT_TRUE(layer_norm.ok()) << layer_norm.status();
  const Tensor x = testing::RandomTensor({5, 6}, 2, DType::kF32);
  EXPECT_TRUE(testing::AllClose(*(*one)->Call(x, {}),
                                *(*layer_norm)->Call(x, {}), 1e-6, 1e-6));
}

}  // namespace
}  // namespace mirrortrain::models
