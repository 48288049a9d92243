// GroupNormalization (config type `group_normalization`), Keras semantics
// with axis -1: the C channels of each example fall into `groups` groups
// of C / groups consecutive channels, each group normalised over its
// channels and every position (height and width, or steps) with its own
// mean and variance, then scaled by gamma and shifted by beta per channel.
// No batch statistics (nothing is synchronised across replicas): with one
// group it is a layer normalization over the whole example, with C groups
// an instance normalization.
//
// The statistics are layer normalization's op (its CPU and GPU kernels,
// double sums) over rows of a group's values: x [n, S, G, C/G] transposed
// to [n, G, S, C/G], each of the n * G rows normalised whole.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/normalization_params.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/nn_ops.h"
#include "tensor/ops/normalization_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class GroupNormalizationLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  // `input` is the layer's input shape, [batch, ..., C].
  static absl::StatusOr<std::unique_ptr<Layer>> Create(
      std::string name, const Shape& input, int64_t groups, double epsilon,
      bool center, bool scale, Device device) {
    const int64_t channels = input.back();
    const int64_t positions = NumElements(input) / input[0] / channels;
    MT_ASSIGN_OR_RETURN(
        NormalizationParams params,
        NormalizationParams::Create(name, channels, scale, center, device));
    // The unit scale and zero offset of the group rows' normalization; the
    // learned ones apply per channel after it.
    const int64_t row = positions * (channels / groups);
    MT_ASSIGN_OR_RETURN(Tensor one_row,
                        Tensor::HostFull(DType::kF32, {row}, 1.0).To(device));
    MT_ASSIGN_OR_RETURN(Tensor zero_row,
                        Tensor::Zeros(DType::kF32, {row}, device));
    return std::unique_ptr<Layer>(new GroupNormalizationLayer(
        std::move(name), channels, groups, positions, epsilon, center, scale,
        std::move(params), std::move(one_row), std::move(zero_row)));
  }

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    const int64_t n = x.dim(0), g = groups_, cg = channels_ / groups_;
    // From the build-time shape: a replica's shard may hold no rows.
    const int64_t positions = positions_;
    // Each group's values contiguous: [n, S, G, C/G] -> [n, G, S, C/G]
    // (nothing to move with one position or one group, or no rows).
    const bool move = n > 0 && positions > 1 && g > 1;
    Tensor y = x;
    if (move) {
      MT_ASSIGN_OR_RETURN(y, ops::Reshape(x, {n, positions, g, cg}));
      MT_ASSIGN_OR_RETURN(y, ops::Transpose(y, {0, 2, 1, 3}));
    }
    MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, {n * g, positions * cg}));
    MT_ASSIGN_OR_RETURN(
        y, ops::LayerNormalization(y, one_row_, zero_row_, epsilon_));
    if (move) {
      MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, {n, g, positions, cg}));
      MT_ASSIGN_OR_RETURN(y, ops::Transpose(y, {0, 2, 1, 3}));
    }
    MT_ASSIGN_OR_RETURN(y, ops::Reshape(y, out));
    if (scale_) {
      MT_ASSIGN_OR_RETURN(y, ops::Mul(y, params_.gamma()));
    }
    if (!center_) return y;
    return ops::BiasAdd(y, params_.beta());
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_ASSIGN_OR_RETURN(Shape out,
                        NormalizedOutputShape(name(), input, channels_));
    if (NumElements(absl::MakeConstSpan(input).subspan(1)) !=
        positions_ * channels_) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": built for ", positions_, " positions of ", channels_,
          " channels per example, got ", ShapeToString(input)));
    }
    return out;
  }

  std::vector<Variable*> variables() override {
    std::vector<Variable*> out;
    params_.AppendVariables(out);
    return out;
  }

 private:
  GroupNormalizationLayer(std::string name, int64_t channels, int64_t groups,
                          int64_t positions, double epsilon, bool center,
                          bool scale, NormalizationParams params,
                          Tensor one_row, Tensor zero_row)
      : Layer(std::move(name)),
        channels_(channels),
        groups_(groups),
        positions_(positions),
        epsilon_(epsilon),
        center_(center),
        scale_(scale),
        params_(std::move(params)),
        one_row_(std::move(one_row)),
        zero_row_(std::move(zero_row)) {}

  int64_t channels_, groups_;
  int64_t positions_;  // Per example: height * width, or steps.
  double epsilon_;
  bool center_, scale_;
  NormalizationParams params_;
  Tensor one_row_, zero_row_;
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "group_normalization",
     .doc = "normalises each example's groups of channels over their "
            "channels and every position, then gamma * x + beta per channel "
            "(Keras GroupNormalization, axis -1)",
     .params =
         {{Param::Int("groups")
               .Default(32)
               .Min(1)
               .Max(kMaxDimension)
               .Doc("groups of consecutive channels; must divide them"),
           Param::Float("epsilon").Default(0.001).Min(0, false).InFloat32().Doc(
               "added to the variance"),
           Param::Bool("center").Default(true).Doc("learn an offset (beta)"),
           Param::Bool("scale").Default(true).Doc("learn a scale (gamma)")}},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_ASSIGN_OR_RETURN(const int64_t channels,
                           NormalizedAxis(b.input_shape(), "channels"));
       const Params& p = spec.params;
       const int64_t groups = p.Int("groups");
       if (channels % groups != 0) {
         return absl::InvalidArgumentError(
             absl::StrCat("groups: ", groups, " groups do not divide the ",
                          channels, " channels"));
       }
       return GroupNormalizationLayer::Create(
           b.name(), b.input_shape(), groups, p.Float("epsilon"),
           p.Bool("center"), p.Bool("scale"), b.device());
     }});

}  // namespace mirrortrain::models
