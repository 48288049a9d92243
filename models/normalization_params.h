// What the normalization layers (layer_normalization, batch_normalization)
// share: they normalise the last axis of an input [batch, ..., C], and
// learn an optional scale gamma and offset beta over C, with Keras's names
// and order.
//
// Ownership: NormalizationParams owns its variables; the layer that holds it
// lists them. Thread contract: that of the owning layer (layer.h).
#ifndef MIRRORTRAIN_MODELS_NORMALIZATION_PARAMS_H_
#define MIRRORTRAIN_MODELS_NORMALIZATION_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/device.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"
#include "tensor/variable.h"

namespace mirrortrain::models {

// C, the size of the normalised last axis of a layer's input shape
// (LayerBuilder::input_shape()); InvalidArgument "expects input [batch, ...,
// <axis_name>], got ..." when there is no axis after the batch.
absl::StatusOr<int64_t> NormalizedAxis(const Shape& input,
                                       absl::string_view axis_name);

// Layer::OutputShape of layer `layer` normalising `channels` values: the
// input shape itself when it is [batch, ..., channels], else InvalidArgument
// naming the layer.
absl::StatusOr<Shape> NormalizedOutputShape(absl::string_view layer,
                                            const Shape& input,
                                            int64_t channels);

// Variable "<layer>/<var>" of shape [channels], every element `value`.
absl::StatusOr<Variable> ChannelVariable(absl::string_view layer,
                                         absl::string_view var,
                                         int64_t channels, double value,
                                         bool trainable, Device device);

// gamma (initially ones) and beta (zeros) over the channels; a disabled one
// (Keras scale / center false) is a constant instead of a variable.
class NormalizationParams {
 public:
  static absl::StatusOr<NormalizationParams> Create(absl::string_view layer,
                                                    int64_t channels,
                                                    bool scale, bool center,
                                                    Device device);

  // Reading a learned one watches it on an active tape (Variable::value).
  const Tensor& gamma() const { return gamma_ ? gamma_->value() : ones_; }
  const Tensor& beta() const { return beta_ ? beta_->value() : zeros_; }

  // Appends the learned variables to `out` in Keras's order: gamma, beta.
  void AppendVariables(std::vector<Variable*>& out);

 private:
  NormalizationParams() = default;

  std::optional<Variable> gamma_, beta_;
  Tensor ones_, zeros_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_NORMALIZATION_PARAMS_H_
