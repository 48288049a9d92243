// Layers that move or repeat values without variables (Keras names and
// defaults): `permute` (Keras Permute: the example's axes reordered) and
// `repeat_vector` (Keras RepeatVector: [batch, features] -> [batch, n,
// features], an encoder's summary fed to every step of a decoder). Built
// from recorded ops (Transpose; a broadcast), so their gradients and GPU
// paths are those ops'.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

class PermuteLayer final : public Layer {
 public:
  // `perm` over every axis, the batch's (0) first.
  PermuteLayer(std::string name, std::vector<int> perm)
      : Layer(std::move(name)), perm_(std::move(perm)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    return ops::Transpose(x, perm_);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() != perm_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": permutes ", perm_.size() - 1,
                       " example axes, got input ", ShapeToString(input)));
    }
    Shape out(input.size());
    for (size_t i = 0; i < perm_.size(); ++i) out[i] = input[perm_[i]];
    return out;
  }

 private:
  std::vector<int> perm_;
};

class RepeatVectorLayer final : public Layer {
 public:
  RepeatVectorLayer(std::string name, int64_t n)
      : Layer(std::move(name)), n_(n) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    MT_ASSIGN_OR_RETURN(const Tensor column,
                        ops::Reshape(x, {x.dim(0), 1, x.dim(1)}));
    return ops::BroadcastTo(column, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    if (input.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects [batch, features] input, got ",
                       ShapeToString(input)));
    }
    return Shape{input[0], n_, input[1]};
  }

 private:
  int64_t n_;
};

}  // namespace

MT_REGISTER(LayerType,
            {.name = "permute",
             .doc = "reorders an example's axes (Keras Permute)",
             .params = {{Param::IntList("dims").MinLength(1).Doc(
                 "the example's axes in their new order, numbered from 1 (the "
                 "batch axis stays first): [2, 1] swaps a sequence's steps and "
                 "features")}},
             .passes_values_on = true,
             .create = [](const LayerSpec& spec, LayerBuilder& b)
                 -> absl::StatusOr<std::unique_ptr<Layer>> {
               const std::vector<int64_t> dims = spec.params.IntList("dims");
               const int64_t axes =
                   static_cast<int64_t>(b.input_shape().size()) - 1;
               std::vector<int64_t> sorted = dims;
               std::sort(sorted.begin(), sorted.end());
               bool permutation = static_cast<int64_t>(dims.size()) == axes;
               for (int64_t i = 0; permutation && i < axes; ++i) {
                 permutation = sorted[i] == i + 1;
               }
               if (!permutation) {
                 return absl::InvalidArgumentError(absl::StrCat(
                     "dims: [", absl::StrJoin(dims, ", "),
                     "] is not an order of the ", axes, " example axes 1..",
                     axes, " of input ", ShapeToString(b.input_shape())));
               }
               std::vector<int> perm = {0};
               for (const int64_t d : dims) perm.push_back(static_cast<int>(d));
               return std::unique_ptr<Layer>(
                   std::make_unique<PermuteLayer>(b.name(), std::move(perm)));
             }});

MT_REGISTER(
    LayerType,
    {.name = "repeat_vector",
     .doc = "[batch, features] -> [batch, n, features], the features at every "
            "step (Keras RepeatVector)",
     .params = {{Param::Int("n")
                     .Min(1)
                     .Max(kMaxDimension)
                     .Doc("the steps the vector is repeated over")}},
     .passes_values_on = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       if (b.input_shape().size() != 2) {
         return absl::InvalidArgumentError(
             absl::StrCat("expects [batch, features] input, got ",
                          ShapeToString(b.input_shape())));
       }
       return std::unique_ptr<Layer>(
           std::make_unique<RepeatVectorLayer>(b.name(), spec.params.Int("n")));
     }});

}  // namespace mirrortrain::models
