// Layers: the building blocks of models, after Keras layers.
//
// Ownership: a layer owns its Variables. Thread contract: a layer instance
// belongs to one replica and is used from that replica's thread.
#ifndef MIRRORTRAIN_MODELS_LAYER_H_
#define MIRRORTRAIN_MODELS_LAYER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/ops/collective_ops.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/tensor.h"
#include "tensor/variable.h"

namespace mirrortrain::models {

// Per-call facts a layer may need.
struct ForwardContext {
  bool training = false;
  // Randomness of this step (dropout); the same on every replica.
  uint64_t step_seed = 0;
  // Index of the first row of this batch within the global batch, so a
  // replica's shard draws the same dropout mask as the unsharded batch.
  int64_t row_offset = 0;
  // Rows of the whole global batch (every replica's shard); 0 when unknown.
  int64_t global_batch = 0;
  // Sums tensors over the replicas of this step (ReplicaContext::AllReduce);
  // null with one replica. Layers that synchronize (batch norm) call it in
  // the same order on every replica, also for a shard of 0 rows.
  const ops::AllReduceSumFn* all_reduce_sum = nullptr;
  // Mixed bfloat16 (Model::SetMixedBFloat16): containers round each
  // layer's output to bfloat16 in place (tensor/ops/precision_ops.h), so a
  // layer computes in f32 from bf16 inputs and stores a bf16 result.
  bool bf16_activations = false;
  // How the caller stores this layer's output (a container under mixed
  // bfloat16 sets it per layer): a nested sequence rounds its last layer's
  // output so, with halves when its caller's next layer reads a product.
  ops::OutputRounding output_rounding = ops::OutputRounding::kNone;
  // Under mixed bfloat16: the input is the model's token ids, unrounded
  // (Model::Call); a container hands them as they are only to a layer or
  // branch that reads ids first (ReadsTokenIds), every other one a rounded
  // copy of its own (Keras's autocast), so nothing rounds them in place.
  bool raw_token_ids = false;
  // When defined: the step's seed as one i64 element on the replica's
  // device, which dropout reads where it draws its mask (a captured CUDA
  // graph replays with each step's seed); step_seed is then not used.
  Tensor step_seed_tensor;
  // Mixed into every dropout's salt where nonzero: a layer called more than
  // once in a step (time_distributed's, once per step) draws another mask
  // each call.
  uint64_t dropout_salt = 0;
  // Keras masking: the mask of this layer's input (Layer::SupportsMasking),
  // undefined where it has none. A container sets it per layer.
  Tensor mask;

  // The context of a layer inside a wrapper that reads its output itself
  // (bidirectional's merge, time_distributed's concatenation): under mixed
  // bfloat16 the output is rounded as a layer's, without the 2-byte copy a
  // product would read.
  ForwardContext ForWrappedLayer() const {
    ForwardContext inner = *this;
    if (inner.output_rounding != ops::OutputRounding::kNone) {
      inner.output_rounding = ops::OutputRounding::kBf16;
    }
    return inner;
  }

  // Dropout of this step: seed DropoutStepSeed(step seed, stream, salt)
  // (tensor/dropout_mask.h), `stream` the layer's index, `salt` its kind's
  // (with dropout_salt mixed in).
  absl::StatusOr<Tensor> Dropout(const Tensor& x, double rate, uint64_t stream,
                                 uint64_t salt, int64_t element_offset) const;
  // Standard normal noise of `like`'s shape for this step (Gaussian noise
  // and dropout layers), keyed as Dropout's masks: ops::StandardNormal.
  absl::StatusOr<Tensor> Normal(const Tensor& like, uint64_t stream,
                                uint64_t salt, int64_t element_offset) const;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual absl::StatusOr<Tensor> Call(const Tensor& x,
                                      const ForwardContext& ctx) = 0;

  // Keras masking (an embedding's mask_zero, the masking layer): a mask
  // marks which steps of a sequence hold data, 1 or 0 for each element of
  // the output's axes but the last ([batch, steps] for [batch, steps,
  // features]), f32 on the layer's device. A layer reads its input's in
  // ctx.mask.
  //
  // Keras's supports_masking: the layer takes a masked input, and its
  // output carries the input's mask unless OutputMask says otherwise. A
  // layer that does not drops the mask (Keras warns; the builder lists
  // them: LayerBuilder::mask_warnings).
  virtual bool SupportsMasking() const { return false; }
  // As the model is built: whether the output carries a mask, given
  // whether the input does. It agrees with OutputMask's definedness.
  virtual bool OutputMasked(bool input_masked) const {
    return input_masked && SupportsMasking();
  }
  // The output's mask, for input `x` under ctx.mask (Keras's
  // compute_mask); undefined for none. The default passes the input's on
  // where OutputMasked says the output carries one.
  virtual absl::StatusOr<Tensor> OutputMask(const Tensor& x,
                                            const ForwardContext& ctx) const {
    (void)x;
    return OutputMasked(ctx.mask.defined()) ? ctx.mask : Tensor();
  }
  // Call, with the output's mask in `mask`; containers override it to hand
  // each of their layers its input's mask.
  virtual absl::StatusOr<Tensor> CallMasked(const Tensor& x,
                                            const ForwardContext& ctx,
                                            Tensor& mask);
  // The output shape for an input shape (batch dimension included).
  virtual absl::StatusOr<Shape> OutputShape(const Shape& input) const = 0;
  virtual std::vector<Variable*> variables() { return {}; }
  // Keras's `trainable = False` (a layer entry's `trainable: false`), as the
  // layer is built: its variables become non-trainable, so they get no
  // gradients, optimizer slots or EMA, and a frozen batch normalization
  // normalises with its moving statistics also in training steps, leaving
  // them as they are (Keras 2.1+). LayerBuilder freezes each layer inside a
  // frozen container too, as it builds it.
  void Freeze() {
    for (Variable* v : variables()) v->set_trainable(false);
    frozen_ = true;
  }
  bool frozen() const { return frozen_; }
  // True when the layer reads its input first as a matrix product's operand
  // (dense, attention's projections): under mixed bfloat16 the pass that
  // rounds the input then also writes the 2-byte copy that the product
  // reads (tensor/ops/precision_ops.h), instead of the product converting
  // it again.
  virtual bool InputFeedsProduct() const { return false; }
  // True when the layer reads its input first as token ids (an embedding,
  // or a container whose first layer, or any branch, does).
  virtual bool ReadsTokenIds() const { return false; }
  // Stricter: true when the layer reads its input only as matrix products'
  // operands (dense). With OutputNeedsOnlyHalves of the layer before it,
  // that layer's output is then stored as its 2-byte copy alone on GPUs
  // (ops::OutputRounding::kBf16HalvesOnly); a wrong true would let f32
  // readers see unrounded values.
  virtual bool InputOnlyFeedsProducts() const { return false; }
  // True when nothing this layer records reads its output's f32 values:
  // its backward reads at most the output's 2-byte copy (relu's mask of a
  // dense layer) or nothing of it (a linear dense layer).
  virtual bool OutputNeedsOnlyHalves() const { return false; }
  // Offered the layer that follows this one in a sequence (so it reads only
  // this layer's output): returns true when this layer now computes `next`
  // itself, exactly, and the sequence then skips `next`. Conv2D absorbs a
  // following max pooling this way (conv2d_layer.h).
  virtual bool AbsorbNext(const Layer& next) {
    (void)next;
    return false;
  }

 private:
  std::string name_;
  bool frozen_ = false;
};

// OK for NHWC images [batch, h, w, c]; else InvalidArgument "<layer>:
// expects NHWC input, got [...]" (no prefix for an empty `layer`: a
// factory's error, which the builder prefixes with the path).
absl::Status CheckImageShape(const Shape& input, const std::string& layer);

}  // namespace mirrortrain::models

#endif  // MIRRORTRAIN_MODELS_LAYER_H_
