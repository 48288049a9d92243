#include "models/conv2d_layer.h"

#include "absl/strings/str_cat.h"
#include "models/initializers.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {

absl::StatusOr<std::unique_ptr<Conv2DLayer>> Conv2DLayer::Create(
    std::string name, int64_t in_channels, int64_t filters, int64_t kernel_size,
    ops::Padding padding, Activation activation, uint64_t seed, Device device,
    std::optional<ops::Pool2DOptions> pool) {
  MT_ASSIGN_OR_RETURN(
      Tensor k,
      GlorotUniform({kernel_size, kernel_size, in_channels, filters}, seed)
          .To(device));
  MT_ASSIGN_OR_RETURN(Tensor b, Tensor::Zeros(DType::kF32, {filters}, device));
  MT_ASSIGN_OR_RETURN(Variable kernel,
                      Variable::Create(absl::StrCat(name, "/kernel"), k));
  MT_ASSIGN_OR_RETURN(Variable bias,
                      Variable::Create(absl::StrCat(name, "/bias"), b));
  ops::Conv2DOptions options{1, 1, padding};
  return std::unique_ptr<Conv2DLayer>(
      new Conv2DLayer(std::move(name), std::move(kernel), std::move(bias),
                      options, activation, pool));
}

absl::StatusOr<Tensor> Conv2DLayer::Call(const Tensor& x,
                                         const ForwardContext&) {
  MT_ASSIGN_OR_RETURN(Tensor y, ops::Conv2D(x, kernel_.value(), options_));
  if (pool_.has_value()) {
    MT_ASSIGN_OR_RETURN(y, ops::MaxPool2D(y, *pool_));
  }
  return BiasActivate(activation_, y, bias_.value());
}

absl::StatusOr<Shape> Conv2DLayer::OutputShape(const Shape& input) const {
  const Shape& k = kernel_.shape();
  if (input.size() != 4 || input[3] != k[2]) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": expects NHWC input with ", k[2],
                     " channels, got ", ShapeToString(input)));
  }
  ops::Window1D wy =
      ops::ComputeWindow(input[1], k[0], options_.stride_h, options_.padding);
  ops::Window1D wx =
      ops::ComputeWindow(input[2], k[1], options_.stride_w, options_.padding);
  Shape out{input[0], wy.out, wx.out, k[3]};
  if (pool_.has_value()) {
    out[1] = ops::ComputeWindow(out[1], pool_->ksize_h, pool_->stride_h,
                                pool_->padding)
                 .out;
    out[2] = ops::ComputeWindow(out[2], pool_->ksize_w, pool_->stride_w,
                                pool_->padding)
                 .out;
  }
  return out;
}

}  // namespace mirrortrain::models
