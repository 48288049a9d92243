// Layers without variables: MaxPool2D, AvgPool2D, Flatten, Reshape,
// Dropout, Activation (config types max_pooling2d, average_pooling2d,
// flatten, reshape, dropout, activation).
#ifndef MIRRORTRAIN_MODELS_SIMPLE_LAYERS_H_
#define MIRRORTRAIN_MODELS_SIMPLE_LAYERS_H_

#include <string>

#include "absl/status/statusor.h"
#include "models/activation.h"
#include "models/layer.h"
#include "tensor/ops/pooling_ops.h"

namespace mirrortrain::models {

// The window geometry and output shape shared by the pooling layers.
class Pool2DLayer : public Layer {
 public:
  Pool2DLayer(std::string name, ops::Pool2DOptions options)
      : Layer(std::move(name)), options_(options) {}
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
  const ops::Pool2DOptions& options() const { return options_; }

 private:
  ops::Pool2DOptions options_;
};

class MaxPool2DLayer final : public Pool2DLayer {
 public:
  using Pool2DLayer::Pool2DLayer;
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
};

class AvgPool2DLayer final : public Pool2DLayer {
 public:
  using Pool2DLayer::Pool2DLayer;
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
};

// [batch, ...] -> [batch, product of the rest].
class FlattenLayer final : public Layer {
 public:
  explicit FlattenLayer(std::string name) : Layer(std::move(name)) {}
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;
};

// [batch, ...] -> [batch, target...] (Keras Reshape; the element count per
// example is unchanged).
class ReshapeLayer final : public Layer {
 public:
  ReshapeLayer(std::string name, Shape target)
      : Layer(std::move(name)), target_(std::move(target)) {}
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override;

 private:
  Shape target_;  // One example's shape.
};

// Inverted dropout while training; the identity otherwise. `index` tells
// dropout layers of one model apart so their masks differ. With `channels`
// (Keras's SpatialDropout1D/2D/3D) whole channels drop: one draw per example
// and channel (noise shape [batch, 1, ..., channels]), under `salt` (each
// kind's own, large: streams count per type, so a small salt would let one
// kind's seeds meet another's).
class DropoutLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  DropoutLayer(std::string name, double rate, int index, bool channels = false,
               uint64_t salt = 0)
      : Layer(std::move(name)),
        rate_(rate),
        index_(index),
        channels_(channels),
        salt_(salt) {}
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }

 private:
  double rate_;
  int index_;
  bool channels_;
  uint64_t salt_;
};

class ActivationLayer final : public Layer {
 public:
  // Keras masking: the input's mask passes to the output.
  bool SupportsMasking() const override { return true; }
  ActivationLayer(std::string name, const ActivationDef& activation)
      : Layer(std::move(name)), activation_(activation) {}
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) override;
  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    return input;
  }

 private:
  const ActivationDef& activation_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_SIMPLE_LAYERS_H_
