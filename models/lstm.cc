// `lstm` (Keras LSTM): a long short-term memory layer over sequences
// [batch, steps, features], its cell's variables under Keras's names
// (`<name>/lstm_cell/kernel` [features, 4 units], `recurrent_kernel`
// [units, 4 units], `bias` [4 units]; gates in Keras's order i, f, c, o).
// Each step, as Keras's LSTMCell: z = x_t kernel + h recurrent_kernel +
// bias; i, f, o = recurrent_activation(z's parts), c = f c + i
// activation(z_c), h = o activation(c), from zero states. The output is the
// last h [batch, units], or every step's [batch, steps, units]
// (return_sequences); go_backwards reads the steps last to first.
//
// Built from recorded ops (the input's products for every step at once,
// then per step a Slice, the recurrent product, Split and elementwise
// ops), so its gradient through time and its GPU path are those ops'; no
// fused cuDNN kernel. The steps are a host loop: a CUDA graph records
// them all.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/activation.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

struct LstmOptions {
  int64_t units = 0;
  const ActivationDef* activation = nullptr;
  const ActivationDef* recurrent_activation = nullptr;
  bool return_sequences = false;
  bool go_backwards = false;
};

class LstmLayer final : public Layer {
 public:
  LstmLayer(std::string name, Variable kernel, Variable recurrent,
            std::optional<Variable> bias, LstmOptions options)
      : Layer(std::move(name)),
        kernel_(std::move(kernel)),
        recurrent_(std::move(recurrent)),
        bias_(std::move(bias)),
        options_(options) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    const int64_t b = x.dim(0), steps = x.dim(1), u = options_.units;
    // Every step's input product in one.
    MT_ASSIGN_OR_RETURN(const Tensor flat,
                        ops::Reshape(x, {b * steps, x.dim(2)}));
    MT_ASSIGN_OR_RETURN(Tensor xk, ops::MatMul(flat, kernel_.value()));
    MT_ASSIGN_OR_RETURN(xk, ops::Reshape(xk, {b, steps, 4 * u}));
    MT_ASSIGN_OR_RETURN(Tensor h, Tensor::Zeros(x.dtype(), {b, u}, x.device()));
    Tensor c = h;
    std::vector<Tensor> outputs;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = options_.go_backwards ? steps - 1 - s : s;
      MT_ASSIGN_OR_RETURN(Tensor z, ops::Slice(xk, 1, t, 1));
      MT_ASSIGN_OR_RETURN(z, ops::Reshape(z, {b, 4 * u}));
      MT_ASSIGN_OR_RETURN(const Tensor hr, ops::MatMul(h, recurrent_.value()));
      MT_ASSIGN_OR_RETURN(z, ops::Add(z, hr));
      if (bias_.has_value()) {
        MT_ASSIGN_OR_RETURN(z, ops::Add(z, bias_->value()));
      }
      MT_ASSIGN_OR_RETURN(const std::vector<Tensor> gates, ops::Split(z, 4, 1));
      MT_ASSIGN_OR_RETURN(const Tensor i,
                          Activate(*options_.recurrent_activation, gates[0]));
      MT_ASSIGN_OR_RETURN(const Tensor f,
                          Activate(*options_.recurrent_activation, gates[1]));
      MT_ASSIGN_OR_RETURN(const Tensor candidate,
                          Activate(*options_.activation, gates[2]));
      MT_ASSIGN_OR_RETURN(const Tensor o,
                          Activate(*options_.recurrent_activation, gates[3]));
      MT_ASSIGN_OR_RETURN(const Tensor kept, ops::Mul(f, c));
      MT_ASSIGN_OR_RETURN(const Tensor written, ops::Mul(i, candidate));
      MT_ASSIGN_OR_RETURN(c, ops::Add(kept, written));
      MT_ASSIGN_OR_RETURN(const Tensor squashed,
                          Activate(*options_.activation, c));
      MT_ASSIGN_OR_RETURN(h, ops::Mul(o, squashed));
      if (options_.return_sequences) {
        MT_ASSIGN_OR_RETURN(Tensor step, ops::Reshape(h, {b, 1, u}));
        outputs.push_back(std::move(step));
      }
    }
    if (!options_.return_sequences) return h;
    return ops::Concat(outputs, 1);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    const int64_t features = kernel_.shape()[0];
    if (input.size() != 3 || input[2] != features) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects [batch, steps, ", features,
                       "] input, got ", ShapeToString(input)));
    }
    if (options_.return_sequences) {
      return Shape{input[0], input[1], options_.units};
    }
    return Shape{input[0], options_.units};
  }

  std::vector<Variable*> variables() override {
    if (!bias_.has_value()) return {&kernel_, &recurrent_};
    return {&kernel_, &recurrent_, &*bias_};
  }

 private:
  Variable kernel_;
  Variable recurrent_;
  std::optional<Variable> bias_;
  LstmOptions options_;
};

// Keras's unit_forget_bias: the bias initializer's values with the forget
// gate's part ones.
absl::StatusOr<Tensor> LstmBias(const std::string& initializer, int64_t units,
                                bool unit_forget_bias, uint64_t seed) {
  if (!unit_forget_bias) return Initialize(initializer, {4 * units}, seed);
  MT_ASSIGN_OR_RETURN(const Tensor input,
                      Initialize(initializer, {units}, seed));
  MT_ASSIGN_OR_RETURN(const Tensor rest,
                      Initialize(initializer, {2 * units}, seed + 1));
  const Tensor forget = Tensor::HostFull(DType::kF32, {units}, 1.0);
  return ops::Concat({input, forget, rest}, 0);
}

// Keras's keys, its initializers' with the recurrent kernel's.
std::vector<Param> LstmParams() {
  std::vector<Param> params = WithInitializerParams(
      {Param::Int("units").Min(1).Max(kMaxDimension).Doc("the state's width"),
       Param::String("activation")
           .Default("tanh")
           .OneOf(ActivationNames())
           .Doc("of the candidate and the state's output"),
       Param::String("recurrent_activation")
           .Default("sigmoid")
           .OneOf(ActivationNames())
           .Doc("of the input, forget and output gates"),
       UseBiasParam(),
       Param::Bool("return_sequences")
           .Default(false)
           .Doc("every step's h [batch, steps, units]; false: the last "
                "one's [batch, units]"),
       Param::Bool("go_backwards")
           .Default(false)
           .Doc("read the steps last to first (the outputs in that order, "
                "as Keras)"),
       Param::Bool("unit_forget_bias")
           .Default(true)
           .Doc("the forget gate's bias starts at 1 (Jozefowicz et al.)")},
      "kernel_initializer");
  params.push_back(Param::String("recurrent_initializer")
                       .Default("orthogonal")
                       .OneOf(InitializerNames())
                       .Doc("the recurrent kernel's initial values"));
  return params;
}

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "lstm",
     .doc = "a long short-term memory layer over [batch, steps, features] "
            "(Keras LSTM; no dropout, masking or state across batches)",
     .params = {LstmParams()},
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(b.CheckSequences());
       const Shape& in = b.input_shape();
       LstmOptions o;
       o.units = spec.params.Int("units");
       if (o.units > kMaxDimension / 4) {
         return absl::InvalidArgumentError(
             absl::StrCat("units: ", o.units, " gates of 4 are more than ",
                          kMaxDimension, " columns"));
       }
       MT_ASSIGN_OR_RETURN(o.activation,
                           FindActivation(spec.params.String("activation")));
       MT_ASSIGN_OR_RETURN(
           o.recurrent_activation,
           FindActivation(spec.params.String("recurrent_activation")));
       o.return_sequences = spec.params.Bool("return_sequences");
       o.go_backwards = spec.params.Bool("go_backwards");
       const WeightInitializers init =
           ReadInitializers(spec.params, "kernel_initializer");
       const std::string cell = absl::StrCat(b.name(), "/lstm_cell/");
       const int64_t u = o.units;
       MT_ASSIGN_OR_RETURN(
           const Tensor kernel,
           Initialize(init.kernel, {in[2], 4 * u}, b.NextSeed()));
       MT_ASSIGN_OR_RETURN(
           const Tensor recurrent,
           Initialize(spec.params.String("recurrent_initializer"), {u, 4 * u},
                      b.NextSeed()));
       MT_ASSIGN_OR_RETURN(Variable k,
                           VariableOn(cell + "kernel", kernel, b.device()));
       MT_ASSIGN_OR_RETURN(Variable r, VariableOn(cell + "recurrent_kernel",
                                                  recurrent, b.device()));
       std::optional<Variable> bias;
       if (spec.params.Bool("use_bias")) {
         MT_ASSIGN_OR_RETURN(
             const Tensor initial,
             LstmBias(init.bias, u, spec.params.Bool("unit_forget_bias"),
                      b.NextSeed()));
         MT_ASSIGN_OR_RETURN(bias,
                             VariableOn(cell + "bias", initial, b.device()));
       }
       return std::unique_ptr<Layer>(new LstmLayer(
           b.name(), std::move(k), std::move(r), std::move(bias), o));
     }});

}  // namespace mirrortrain::models
