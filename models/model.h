// A sequential model built from a spec (the `model` section of a config),
// with Keras layer names (dense, dense_1, conv2d, ...) and initialisers.
//
// Ownership: the model owns its layers and their variables. Every replica
// builds its own Model from the same spec and seed, so the replicas' initial
// variables are identical (mirrored). Thread contract: one thread at a time.
#ifndef MIRRORTRAIN_MODELS_MODEL_H_
#define MIRRORTRAIN_MODELS_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/layer.h"

namespace mirrortrain::models {

struct ModelSpec {
  std::string name = "mlp";                        // mlp | cnn
  std::vector<int64_t> hidden_units = {256, 128};  // mlp
  std::string activation = "relu";
  double dropout = 0.0;
  std::vector<int64_t> conv_filters = {32, 64};  // cnn
  int64_t kernel_size = 5;                       // cnn
  int64_t dense_units = 1024;                    // cnn
  Shape input_shape = {28, 28, 1};               // One example, NHWC.
  int64_t num_classes = 10;
};

class Model {
 public:
  // mlp: flatten, [dense(units, activation), dropout?]..., dense(classes).
  // cnn: [conv2d(filters, k, same, activation), maxpool(2)]..., flatten,
  //      dense(dense_units, activation), dropout?, dense(classes)
  //      (the TensorFlow tutorial CNN with the defaults).
  static absl::StatusOr<std::unique_ptr<Model>> Build(const ModelSpec& spec,
                                                      uint64_t seed,
                                                      Device device);

  // Logits [batch, classes] for images [batch, ...input_shape].
  absl::StatusOr<Tensor> Call(const Tensor& images, const ForwardContext& ctx);

  // Every variable, in layer order (kernel before bias).
  const std::vector<Variable*>& variables() const { return variables_; }
  std::vector<Variable*> trainable_variables() const;

 private:
  Model() = default;
  absl::Status Add(std::unique_ptr<Layer> layer, Shape* shape);

  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Variable*> variables_;
  Shape input_shape_;
};

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_MODEL_H_
