// Recurrent layers over sequences [batch, steps, features], Keras's names,
// defaults and variables (`<name>/<type>_cell/kernel` [features, G units],
// `recurrent_kernel` [units, G units], `bias`), from zero states; the
// output is the last h [batch, units], or every step's [batch, steps,
// units] (return_sequences); go_backwards reads the steps last to first
// (the outputs in that order, as Keras).
//  * `lstm` (Keras LSTM, G = 4, gates i, f, c, o): z = x_t kernel + h
//    recurrent_kernel + bias; i, f, o = recurrent_activation(z's parts),
//    c = f c + i activation(z_c), h = o activation(c).
//  * `gru` (Keras GRU, G = 3, gates z, r, h): with reset_after (Keras's
//    default; bias [2, 3 units], input and recurrent) x = x_t kernel +
//    b_in, inner = h recurrent_kernel + b_rec, z, r =
//    recurrent_activation(x + inner parts), hh = activation(x_h + r
//    inner_h); without (bias [3 units]) hh = activation(x_h + (r h)
//    recurrent_kernel_h); h = z h + (1 - z) hh.
//  * `simple_rnn` (Keras SimpleRNN, G = 1): h = activation(x_t kernel +
//    bias + h recurrent_kernel), in that order.
//
// Built from recorded ops (the input's products for every step at once,
// split into steps, then per step the recurrent product, Split and
// elementwise ops), so their gradients through time and GPU paths are those
// ops'; no fused cuDNN kernel. The steps are a host loop: a CUDA graph records
// them all. While training, `dropout` and `recurrent_dropout` multiply the
// inputs (before their product) and h (before the recurrent one) by masks
// drawn once per call (Keras's variational dropout; per gate under
// recurrent_dropout, Keras's implementation 1); Keras masking keeps a
// masked step's states.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/activation.h"
#include "models/initializers.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "models/masking.h"
#include "tensor/dropout_mask.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// Salts the recurrent layers' dropout masks apart from other layers'.
constexpr uint64_t kRecurrentDropoutSalt = 0x726e6e64726f7030ULL;

struct RecurrentOptions {
  int64_t units = 0;
  const ActivationDef* activation = nullptr;
  const ActivationDef* recurrent_activation = nullptr;
  bool return_sequences = false;
  bool go_backwards = false;
  // Keras's dropout of the inputs and recurrent_dropout of h, while
  // training; `index` tells layers of a kind apart (their masks differ).
  double dropout = 0;
  double recurrent_dropout = 0;
  int index = 0;
};

// The states a step carries: h (every layer's output) and an LSTM's c.
struct States {
  Tensor h, c;
};

// What every step reads, taken once per call (a part of a variable is a
// copy: taken per step, the tape would keep one each).
struct StepWeights {
  Tensor recurrent;       // The recurrent kernel, or (GRU without
  Tensor recurrent_tail;  // reset_after) its z, r columns and its h ones.
  Tensor bias;            // Added after the recurrent product; may be empty.
  // Under recurrent dropout: each gate's mask of h [batch, units] (Keras's
  // implementation 1: one per gate, the same every step), and `recurrent`
  // split into those gates' column blocks.
  std::vector<Tensor> recurrent_masks;
  std::vector<Tensor> recurrent_blocks;
};

// Keras's dropped products: block g of a kernel (a gate's columns) times x
// times mask g, the blocks' products side by side (one mask and block: one
// product). x [..., in] broadcasts against each mask and is multiplied as
// rows [n, in].
absl::StatusOr<Tensor> MaskedProducts(const Tensor& x,
                                      const std::vector<Tensor>& masks,
                                      const std::vector<Tensor>& blocks) {
  std::vector<Tensor> parts;
  for (size_t g = 0; g < blocks.size(); ++g) {
    MT_ASSIGN_OR_RETURN(Tensor dropped, ops::Mul(x, masks[g]));
    if (dropped.rank() > 2) {
      const int64_t in = dropped.dim(dropped.rank() - 1);
      MT_ASSIGN_OR_RETURN(
          dropped, ops::Reshape(dropped, {dropped.num_elements() / in, in}));
    }
    MT_ASSIGN_OR_RETURN(Tensor part, ops::MatMul(dropped, blocks[g]));
    parts.push_back(std::move(part));
  }
  if (parts.size() == 1) return parts[0];
  return ops::Concat(parts, 1);
}

// h times the recurrent kernel `w.recurrent` ([units, gates' columns]);
// under recurrent dropout each gate's block from h times that gate's mask
// (the first ones: GRU's h gate's mask is its tail's).
absl::StatusOr<Tensor> RecurrentProduct(const Tensor& h, const StepWeights& w) {
  if (w.recurrent_masks.empty()) return ops::MatMul(h, w.recurrent);
  return MaskedProducts(h, w.recurrent_masks, w.recurrent_blocks);
}

// The loop over the steps; a subclass computes one step from its input
// product x_t [batch, gates * units] (Step).
class RecurrentLayer : public Layer {
 public:
  absl::StatusOr<Tensor> Call(const Tensor& x,
                              const ForwardContext& ctx) final {
    MT_RETURN_IF_ERROR(OutputShape(x.shape()).status());
    // A masked step keeps the states (and so the output) of the step
    // before it (Keras's rnn with a mask).
    std::vector<Tensor> step_masks;
    if (ctx.mask.defined()) {
      MT_RETURN_IF_ERROR(CheckMask(x, ctx.mask, name()));
      MT_ASSIGN_OR_RETURN(step_masks, ops::Split(ctx.mask, x.dim(1), 1));
    }
    const int64_t b = x.dim(0), steps = x.dim(1), u = options_.units;
    const int64_t width = gates_ * u;
    // Every step's input product in one.
    MT_ASSIGN_OR_RETURN(Tensor xk, InputProducts(x, ctx));
    MT_ASSIGN_OR_RETURN(xk, InputBias(xk));
    MT_ASSIGN_OR_RETURN(xk, ops::Reshape(xk, {b, steps, width}));
    // One piece per step in one op: its gradient is one Concat (a Slice
    // per step would put each step's gradient into a zero tensor of all
    // the steps: quadratic in them).
    MT_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, ops::Split(xk, steps, 1));
    MT_ASSIGN_OR_RETURN(StepWeights weights, Weights());
    if (ctx.training && options_.recurrent_dropout > 0) {
      MT_ASSIGN_OR_RETURN(weights.recurrent_masks,
                          DropoutMasks(ctx, b, u, x.dtype(), x.device(),
                                       /*recurrent=*/true));
      MT_ASSIGN_OR_RETURN(
          weights.recurrent_blocks,
          ops::Split(weights.recurrent, weights.recurrent.dim(1) / u, 1));
    }
    States states;
    MT_ASSIGN_OR_RETURN(states.h, Tensor::Zeros(x.dtype(), {b, u}, x.device()));
    states.c = states.h;
    std::vector<Tensor> outputs;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = options_.go_backwards ? steps - 1 - s : s;
      MT_ASSIGN_OR_RETURN(const Tensor xt, ops::Reshape(inputs[t], {b, width}));
      inputs[t] = Tensor();  // Freed as the steps go (kept by a tape).
      if (step_masks.empty()) {
        MT_RETURN_IF_ERROR(Step(xt, weights, states));
      } else {
        const States before = states;
        MT_RETURN_IF_ERROR(Step(xt, weights, states));
        MT_RETURN_IF_ERROR(
            KeepMasked(step_masks[t], before, /*cell=*/gates_ == 4, states));
      }
      if (options_.return_sequences) {
        MT_ASSIGN_OR_RETURN(Tensor out, ops::Reshape(states.h, {b, 1, u}));
        outputs.push_back(std::move(out));
      }
    }
    if (!options_.return_sequences) return states.h;
    return ops::Concat(outputs, 1);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const final {
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

  std::vector<Variable*> variables() final {
    if (!bias_.has_value()) return {&kernel_, &recurrent_};
    return {&kernel_, &recurrent_, &*bias_};
  }

  // Keras's: every step's output keeps the mask; the last one does not.
  bool SupportsMasking() const final { return true; }
  bool OutputMasked(bool input_masked) const final {
    return input_masked && options_.return_sequences;
  }

 protected:
  // Keras's dropout masks of a call (its cell's get_dropout_mask and
  // get_recurrent_dropout_mask): [batch, width] of 0 and 1 / (1 - rate),
  // the same for every step; one per gate under recurrent dropout (Keras's
  // implementation 1), else one for the input. Drawn for the rows of the
  // global batch (ctx.row_offset), so a shard draws the whole batch's.
  absl::StatusOr<std::vector<Tensor>> DropoutMasks(const ForwardContext& ctx,
                                                   int64_t batch, int64_t width,
                                                   DType dtype, Device device,
                                                   bool recurrent) const {
    const int64_t count = options_.recurrent_dropout > 0 ? gates_ : 1;
    const double rate =
        recurrent ? options_.recurrent_dropout : options_.dropout;
    MT_ASSIGN_OR_RETURN(const Tensor ones,
                        ops::Fill(dtype, {batch, width}, 1.0, device));
    std::vector<Tensor> masks;
    for (int64_t g = 0; g < count; ++g) {
      // Apart from every other kind's, per gate, input or recurrent.
      const uint64_t salt = DropoutMix(
          kRecurrentDropoutSalt ^ static_cast<uint64_t>(gates_ << 8) ^
          (recurrent ? 0x80 : 0) ^ static_cast<uint64_t>(g));
      MT_ASSIGN_OR_RETURN(
          Tensor mask,
          ctx.Dropout(ones, rate, static_cast<uint64_t>(options_.index), salt,
                      ctx.row_offset * width));
      masks.push_back(std::move(mask));
    }
    return masks;
  }

  // x [batch, steps, features] times the kernel for every step at once, as
  // [batch * steps, gates * units]; under input dropout x times its mask
  // first (under recurrent dropout each gate's own, with its block of the
  // kernel).
  absl::StatusOr<Tensor> InputProducts(const Tensor& x,
                                       const ForwardContext& ctx) const {
    const int64_t b = x.dim(0), steps = x.dim(1), f = x.dim(2);
    if (!ctx.training || options_.dropout == 0) {
      MT_ASSIGN_OR_RETURN(const Tensor flat, ops::Reshape(x, {b * steps, f}));
      return ops::MatMul(flat, kernel_.value());
    }
    MT_ASSIGN_OR_RETURN(
        const std::vector<Tensor> masks,
        DropoutMasks(ctx, b, f, x.dtype(), x.device(), /*recurrent=*/false));
    std::vector<Tensor> blocks = {kernel_.value()};
    if (masks.size() > 1) {
      MT_ASSIGN_OR_RETURN(
          blocks,
          ops::Split(kernel_.value(), static_cast<int64_t>(masks.size()), 1));
    }
    // Each mask over every step: [b, 1, f].
    std::vector<Tensor> per_step;
    for (const Tensor& mask : masks) {
      MT_ASSIGN_OR_RETURN(Tensor m, ops::Reshape(mask, {b, 1, f}));
      per_step.push_back(std::move(m));
    }
    return MaskedProducts(x, per_step, blocks);
  }

  // `after` where the step's mask [batch, 1] is 1, `before` where it is 0:
  // m after + (1 - m) before, exact as Keras's where (one term is 0). Only
  // an LSTM (`cell`) carries c.
  static absl::Status KeepMasked(const Tensor& mask, const States& before,
                                 bool cell, States& after) {
    MT_ASSIGN_OR_RETURN(after.h, MaskSelect(mask, after.h, before.h));
    if (!cell) return absl::OkStatus();
    MT_ASSIGN_OR_RETURN(after.c, MaskSelect(mask, after.c, before.c));
    return absl::OkStatus();
  }

  RecurrentLayer(std::string name, int64_t gates, Variable kernel,
                 Variable recurrent, std::optional<Variable> bias,
                 RecurrentOptions options)
      : Layer(std::move(name)),
        gates_(gates),
        kernel_(std::move(kernel)),
        recurrent_(std::move(recurrent)),
        bias_(std::move(bias)),
        options_(options) {}

  // The input products with what of the bias goes there (GRU's), as the
  // cell adds it.
  virtual absl::StatusOr<Tensor> InputBias(const Tensor& xk) { return xk; }
  // The recurrent kernel and the bias whole (LSTM's).
  virtual absl::StatusOr<StepWeights> Weights() const {
    StepWeights w{.recurrent = recurrent_.value()};
    if (bias_.has_value()) w.bias = bias_->value();
    return w;
  }
  // One step: the states after it, from x_t [batch, gates * units].
  virtual absl::Status Step(const Tensor& xt, const StepWeights& w,
                            States& states) = 0;

  const int64_t gates_;
  Variable kernel_;
  Variable recurrent_;
  std::optional<Variable> bias_;
  const RecurrentOptions options_;
};

class LstmLayer final : public RecurrentLayer {
 public:
  LstmLayer(std::string name, Variable kernel, Variable recurrent,
            std::optional<Variable> bias, RecurrentOptions options)
      : RecurrentLayer(std::move(name), 4, std::move(kernel),
                       std::move(recurrent), std::move(bias), options) {}

 private:
  // Keras's LSTMCell: z = x_t kernel + h recurrent_kernel + bias.
  absl::Status Step(const Tensor& xt, const StepWeights& w,
                    States& states) override {
    MT_ASSIGN_OR_RETURN(const Tensor hr, RecurrentProduct(states.h, w));
    MT_ASSIGN_OR_RETURN(Tensor z, ops::Add(xt, hr));
    if (w.bias.defined()) {
      MT_ASSIGN_OR_RETURN(z, ops::Add(z, w.bias));
    }
    MT_ASSIGN_OR_RETURN(const std::vector<Tensor> g, ops::Split(z, 4, 1));
    const ActivationDef* gate = options_.recurrent_activation;
    MT_ASSIGN_OR_RETURN(const Tensor i, Activate(*gate, g[0]));
    MT_ASSIGN_OR_RETURN(const Tensor f, Activate(*gate, g[1]));
    MT_ASSIGN_OR_RETURN(const Tensor candidate,
                        Activate(*options_.activation, g[2]));
    MT_ASSIGN_OR_RETURN(const Tensor o, Activate(*gate, g[3]));
    MT_ASSIGN_OR_RETURN(const Tensor kept, ops::Mul(f, states.c));
    MT_ASSIGN_OR_RETURN(const Tensor written, ops::Mul(i, candidate));
    MT_ASSIGN_OR_RETURN(states.c, ops::Add(kept, written));
    MT_ASSIGN_OR_RETURN(const Tensor squashed,
                        Activate(*options_.activation, states.c));
    MT_ASSIGN_OR_RETURN(states.h, ops::Mul(o, squashed));
    return absl::OkStatus();
  }
};

class GruLayer final : public RecurrentLayer {
 public:
  GruLayer(std::string name, Variable kernel, Variable recurrent,
           std::optional<Variable> bias, RecurrentOptions options,
           bool reset_after)
      : RecurrentLayer(std::move(name), 3, std::move(kernel),
                       std::move(recurrent), std::move(bias), options),
        reset_after_(reset_after) {}

 private:
  // The bias's row `row` of [2, 3 units] (reset_after), or all of [3
  // units].
  absl::StatusOr<Tensor> BiasRow(int64_t row) const {
    if (!reset_after_) return bias_->value();
    MT_ASSIGN_OR_RETURN(const Tensor part,
                        ops::Slice(bias_->value(), 0, row, 1));
    return ops::Reshape(part, {part.dim(1)});
  }

  absl::StatusOr<Tensor> InputBias(const Tensor& xk) override {
    if (!bias_.has_value()) return xk;
    MT_ASSIGN_OR_RETURN(const Tensor b, BiasRow(0));
    return ops::Add(xk, b);
  }

  // With reset_after the recurrent bias row; without, the kernel's z, r
  // columns and its h ones.
  absl::StatusOr<StepWeights> Weights() const override {
    StepWeights w;
    if (reset_after_) {
      w.recurrent = recurrent_.value();
      if (bias_.has_value()) {
        MT_ASSIGN_OR_RETURN(w.bias, BiasRow(1));
      }
      return w;
    }
    const int64_t u = options_.units;
    MT_ASSIGN_OR_RETURN(w.recurrent,
                        ops::Slice(recurrent_.value(), 1, 0, 2 * u));
    MT_ASSIGN_OR_RETURN(w.recurrent_tail,
                        ops::Slice(recurrent_.value(), 1, 2 * u, u));
    return w;
  }

  // Keras's GRUCell (implementation 2).
  absl::Status Step(const Tensor& xt, const StepWeights& w,
                    States& states) override {
    const Tensor& h = states.h;
    MT_ASSIGN_OR_RETURN(const std::vector<Tensor> x, ops::Split(xt, 3, 1));
    MT_ASSIGN_OR_RETURN(Tensor inner, RecurrentProduct(h, w));
    if (w.bias.defined()) {
      MT_ASSIGN_OR_RETURN(inner, ops::Add(inner, w.bias));
    }
    MT_ASSIGN_OR_RETURN(const std::vector<Tensor> rec,
                        ops::Split(inner, reset_after_ ? 3 : 2, 1));
    const ActivationDef* gate = options_.recurrent_activation;
    MT_ASSIGN_OR_RETURN(Tensor sum, ops::Add(x[0], rec[0]));
    MT_ASSIGN_OR_RETURN(const Tensor z, Activate(*gate, sum));
    MT_ASSIGN_OR_RETURN(sum, ops::Add(x[1], rec[1]));
    MT_ASSIGN_OR_RETURN(const Tensor r, Activate(*gate, sum));
    Tensor recurrent_h;
    if (reset_after_) {
      MT_ASSIGN_OR_RETURN(recurrent_h, ops::Mul(r, rec[2]));
    } else {
      // Keras: r times h (times the h gate's recurrent mask).
      Tensor h_h = h;
      if (!w.recurrent_masks.empty()) {
        MT_ASSIGN_OR_RETURN(h_h, ops::Mul(h, w.recurrent_masks[2]));
      }
      MT_ASSIGN_OR_RETURN(const Tensor reset, ops::Mul(r, h_h));
      MT_ASSIGN_OR_RETURN(recurrent_h, ops::MatMul(reset, w.recurrent_tail));
    }
    MT_ASSIGN_OR_RETURN(sum, ops::Add(x[2], recurrent_h));
    MT_ASSIGN_OR_RETURN(const Tensor hh, Activate(*options_.activation, sum));
    // z h + (1 - z) hh, Keras's order.
    MT_ASSIGN_OR_RETURN(const Tensor kept, ops::Mul(z, h));
    MT_ASSIGN_OR_RETURN(const Tensor one, ops::internal::ScalarLike(z, 1.0));
    MT_ASSIGN_OR_RETURN(const Tensor open, ops::Sub(one, z));
    MT_ASSIGN_OR_RETURN(const Tensor written, ops::Mul(open, hh));
    MT_ASSIGN_OR_RETURN(states.h, ops::Add(kept, written));
    return absl::OkStatus();
  }

  const bool reset_after_;
};

class SimpleRnnLayer final : public RecurrentLayer {
 public:
  SimpleRnnLayer(std::string name, Variable kernel, Variable recurrent,
                 std::optional<Variable> bias, RecurrentOptions options)
      : RecurrentLayer(std::move(name), 1, std::move(kernel),
                       std::move(recurrent), std::move(bias), options) {}

 private:
  // Keras's SimpleRNNCell adds the bias to the input's product.
  absl::StatusOr<Tensor> InputBias(const Tensor& xk) override {
    if (!bias_.has_value()) return xk;
    return ops::Add(xk, bias_->value());
  }
  absl::StatusOr<StepWeights> Weights() const override {
    return StepWeights{.recurrent = recurrent_.value()};
  }
  absl::Status Step(const Tensor& xt, const StepWeights& w,
                    States& states) override {
    MT_ASSIGN_OR_RETURN(const Tensor hr, RecurrentProduct(states.h, w));
    MT_ASSIGN_OR_RETURN(const Tensor z, ops::Add(xt, hr));
    MT_ASSIGN_OR_RETURN(states.h, Activate(*options_.activation, z));
    return absl::OkStatus();
  }
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

// The keys the layers take (Keras's), `extra` (each one's own) before the
// initializers'; `gated` ones (lstm, gru) have a recurrent_activation.
std::vector<Param> RecurrentParams(std::vector<Param> extra,
                                   bool gated = true) {
  std::vector<Param> params = {
      Param::Int("units").Min(1).Max(kMaxDimension).Doc("the state's width"),
      Param::String("activation")
          .Default("tanh")
          .OneOf(ActivationNames())
          .Doc(gated ? "of the candidate and the state's output"
                     : "of the state")};
  if (gated) {
    params.push_back(Param::String("recurrent_activation")
                         .Default("sigmoid")
                         .OneOf(ActivationNames())
                         .Doc("of the gates"));
  }
  params.push_back(UseBiasParam());
  params.push_back(Param::Bool("return_sequences")
                       .Default(false)
                       .Doc("every step's h [batch, steps, units]; false: the "
                            "last one's [batch, units]"));
  params.push_back(Param::Bool("go_backwards")
                       .Default(false)
                       .Doc("read the steps last to first (the outputs in that "
                            "order, as Keras)"));
  params.push_back(Param::Float("dropout").Default(0).Min(0).Max(1, false).Doc(
      "while training, the inputs' dropout rate: one mask per sequence, the "
      "same every step (Keras's; per gate under recurrent_dropout)"));
  params.push_back(
      Param::Float("recurrent_dropout")
          .Default(0)
          .Min(0)
          .Max(1, false)
          .Doc("while training, h's dropout rate before the recurrent "
               "product: one mask per sequence and gate, the same every "
               "step (Keras's)"));
  for (Param& p : extra) params.push_back(std::move(p));
  params = WithInitializerParams(std::move(params), "kernel_initializer");
  params.push_back(Param::String("recurrent_initializer")
                       .Default("orthogonal")
                       .OneOf(InitializerNames())
                       .Doc("the recurrent kernel's initial values"));
  return params;
}

// What the recurrent layers' factories read and build alike: the options, and
// the kernel and recurrent kernel [*, gates * units] under `cell`, and where
// use_bias the bias of `initial_bias(initializer, units, seed)`'s values.
struct RecurrentParts {
  RecurrentOptions options;
  std::optional<Variable> kernel, recurrent;  // Set by ReadRecurrent.
  std::optional<Variable> bias;
};
using BiasValues = std::function<absl::StatusOr<Tensor>(
    const std::string& initializer, int64_t units, uint64_t seed)>;
absl::StatusOr<RecurrentParts> ReadRecurrent(const LayerSpec& spec,
                                             LayerBuilder& b, int64_t gates,
                                             const std::string& cell_name,
                                             const BiasValues& initial_bias) {
  MT_RETURN_IF_ERROR(b.CheckSequences());
  RecurrentParts p;
  RecurrentOptions& o = p.options;
  o.units = spec.params.Int("units");
  if (o.units > kMaxDimension / gates) {
    return absl::InvalidArgumentError(
        absl::StrCat("units: ", o.units, " times ", gates,
                     " gates is more than ", kMaxDimension, " columns"));
  }
  MT_ASSIGN_OR_RETURN(o.activation,
                      FindActivation(spec.params.String("activation")));
  if (spec.params.Has("recurrent_activation")) {  // Gated cells'.
    MT_ASSIGN_OR_RETURN(
        o.recurrent_activation,
        FindActivation(spec.params.String("recurrent_activation")));
  }
  o.return_sequences = spec.params.Bool("return_sequences");
  o.go_backwards = spec.params.Bool("go_backwards");
  o.dropout = spec.params.Float("dropout");
  o.recurrent_dropout = spec.params.Float("recurrent_dropout");
  o.index = b.type_index();
  const WeightInitializers init =
      ReadInitializers(spec.params, "kernel_initializer");
  const std::string cell = absl::StrCat(b.name(), "/", cell_name, "/");
  const int64_t width = gates * o.units;
  MT_ASSIGN_OR_RETURN(
      const Tensor kernel,
      Initialize(init.kernel, {b.input_shape()[2], width}, b.NextSeed()));
  MT_ASSIGN_OR_RETURN(const Tensor recurrent,
                      Initialize(spec.params.String("recurrent_initializer"),
                                 {o.units, width}, b.NextSeed()));
  MT_ASSIGN_OR_RETURN(p.kernel,
                      VariableOn(cell + "kernel", kernel, b.device()));
  MT_ASSIGN_OR_RETURN(p.recurrent, VariableOn(cell + "recurrent_kernel",
                                              recurrent, b.device()));
  if (spec.params.Bool("use_bias")) {
    MT_ASSIGN_OR_RETURN(const Tensor bias,
                        initial_bias(init.bias, o.units, b.NextSeed()));
    MT_ASSIGN_OR_RETURN(p.bias, VariableOn(cell + "bias", bias, b.device()));
  }
  return p;
}

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "lstm",
     .doc = "a long short-term memory layer over [batch, steps, features] "
            "(Keras LSTM; no state across batches)",
     .params = {RecurrentParams(
         {Param::Bool("unit_forget_bias")
              .Default(true)
              .Doc("the forget gate's bias starts at 1 (Jozefowicz et "
                   "al.)")})},
     // The cell's, not applied to the layer's output.
     .inner_activation = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const bool unit_forget_bias = spec.params.Bool("unit_forget_bias");
       MT_ASSIGN_OR_RETURN(RecurrentParts p,
                           ReadRecurrent(spec, b, 4, "lstm_cell",
                                         [&](const std::string& initializer,
                                             int64_t units, uint64_t seed) {
                                           return LstmBias(initializer, units,
                                                           unit_forget_bias,
                                                           seed);
                                         }));
       return std::unique_ptr<Layer>(new LstmLayer(
           b.name(), *std::move(p.kernel), *std::move(p.recurrent),
           std::move(p.bias), p.options));
     }});

MT_REGISTER(
    LayerType,
    {.name = "gru",
     .doc = "a gated recurrent unit layer over [batch, steps, features] "
            "(Keras GRU; no state across batches)",
     .params = {RecurrentParams(
         {Param::Bool("reset_after")
              .Default(true)
              .Doc("the reset gate after the recurrent product, with a "
                   "separate recurrent bias (Keras's default, cuDNN's); "
                   "false: before it")})},
     .inner_activation = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       const bool reset_after = spec.params.Bool("reset_after");
       MT_ASSIGN_OR_RETURN(RecurrentParts p,
                           ReadRecurrent(spec, b, 3, "gru_cell",
                                         [&](const std::string& initializer,
                                             int64_t units, uint64_t seed) {
                                           // Input and recurrent rows with
                                           // reset_after.
                                           return Initialize(
                                               initializer,
                                               reset_after ? Shape{2, 3 * units}
                                                           : Shape{3 * units},
                                               seed);
                                         }));
       return std::unique_ptr<Layer>(
           new GruLayer(b.name(), *std::move(p.kernel), *std::move(p.recurrent),
                        std::move(p.bias), p.options, reset_after));
     }});

MT_REGISTER(
    LayerType,
    {.name = "simple_rnn",
     .doc = "a fully-connected recurrent layer over [batch, steps, features] "
            "(Keras SimpleRNN; no state across batches)",
     .params = {RecurrentParams({}, /*gated=*/false)},
     .inner_activation = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_ASSIGN_OR_RETURN(RecurrentParts p,
                           ReadRecurrent(spec, b, 1, "simple_rnn_cell",
                                         [](const std::string& initializer,
                                            int64_t units, uint64_t seed) {
                                           return Initialize(initializer,
                                                             {units}, seed);
                                         }));
       return std::unique_ptr<Layer>(new SimpleRnnLayer(
           b.name(), *std::move(p.kernel), *std::move(p.recurrent),
           std::move(p.bias), p.options));
     }});

}  // namespace mirrortrain::models
