#include "models/dense_layer.h"

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "tensor/ops/matmul.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<std::unique_ptr<DenseLayer>> DenseLayer::Create(
    std::string name, int64_t in, int64_t units, Activation activation,
    uint64_t seed, Device device) {
  MT_ASSIGN_OR_RETURN(Tensor k, GlorotUniform({in, units}, seed).To(device));
  MT_ASSIGN_OR_RETURN(Tensor b, Tensor::Zeros(DType::kF32, {units}, device));
  MT_ASSIGN_OR_RETURN(Variable kernel,
                      Variable::Create(absl::StrCat(name, "/kernel"), k));
  MT_ASSIGN_OR_RETURN(Variable bias,
                      Variable::Create(absl::StrCat(name, "/bias"), b));
  return std::unique_ptr<DenseLayer>(new DenseLayer(
      std::move(name), std::move(kernel), std::move(bias), activation));
}

absl::StatusOr<Tensor> DenseLayer::Call(const Tensor& x,
                                        const ForwardContext&) {
  MT_ASSIGN_OR_RETURN(Tensor h, ops::MatMul(x, kernel_.value()));
  return BiasActivate(activation_, h, bias_.value());
}

absl::StatusOr<Shape> DenseLayer::OutputShape(const Shape& input) const {
  if (input.size() != 2 || input[1] != kernel_.shape()[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": expects input [batch, ", kernel_.shape()[0],
                     "], got ", ShapeToString(input)));
  }
  return Shape{input[0], kernel_.shape()[1]};
}

}  // namespace mirrortrain::models
