// Reverse-mode automatic differentiation, after tf.GradientTape.
//
// While a tape is alive it records every op whose inputs it watches: the
// tensors passed to Watch(), trainable Variables read in its scope
// (automatically), and outputs of recorded ops. Gradient() walks the records
// backwards.
//
// Thread contract: tapes are thread-local. A tape records ops run on the
// thread that created it, and must be used and destroyed on that thread;
// nested tapes all record. Replica threads each have their own tapes.
#ifndef MIRRORTRAIN_TENSOR_GRADIENT_TAPE_H_
#define MIRRORTRAIN_TENSOR_GRADIENT_TAPE_H_

#include <any>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/op.h"
#include "tensor/tensor.h"

namespace mirrortrain {

// What a source the target does not depend on gets (TF's
// UnconnectedGradients).
enum class UnconnectedGradients { kNone, kZero };

struct GradientOptions {
  // Gradient of the final result with respect to the target (TF's
  // output_gradients / grad_ys); ones when absent.
  std::optional<Tensor> output_gradient;
  UnconnectedGradients unconnected = UnconnectedGradients::kNone;
  // Tensors treated as constants: no gradient flows through them to what
  // produced them (tf.gradients' stop_gradients).
  std::vector<Tensor> stop_gradients;
  // Called once per source, during the backward walk, as soon as that
  // source's gradient is final (no op left to process uses it), with the
  // source's index and its gradient (absent when unconnected: then at the
  // end). Lets a caller start communicating early gradients while backward
  // goes on (gradient buckets). Runs on the calling thread. The gradient is
  // handed over (Gradient() returns no value for a reported source) and
  // the tape keeps no reference to it, except for a source some record
  // outputs (a watched intermediate) and the sources reported at the end
  // (the target itself), whose gradients it holds until Gradient()
  // returns. So when nothing else holds it either (Tensor::IsExclusive;
  // not so when it is also another tensor's gradient, as an Add passes one
  // gradient to both inputs) the callback may overwrite it in place, e.g.
  // all-reduce it without a copy.
  std::function<void(size_t source, std::optional<Tensor> grad)>
      on_gradient_ready;
};

class GradientTape {
 public:
  // A non-persistent tape allows one Gradient() call and frees its records
  // after it; a persistent one allows any number.
  explicit GradientTape(bool persistent = false);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void Watch(const Tensor& tensor);
  bool IsWatched(const Tensor& tensor) const;

  // One entry per source: its gradient, or empty (kNone) / zeros (kZero)
  // when the target does not depend on it; empty for every source when
  // options.on_gradient_ready was given (the listener got the gradients).
  absl::StatusOr<std::vector<std::optional<Tensor>>> Gradient(
      const Tensor& target, absl::Span<const Tensor> sources,
      const GradientOptions& options = {});

  // Called by ops (through RecordOperation); not for users.
  void Record(OpRecord record);
  // False while it computes a gradient (ops then run unrecorded by it).
  bool recording() const { return recording_; }

 private:
  bool persistent_;
  bool used_ = false;
  bool recording_ = true;
  absl::flat_hash_set<int64_t> watched_;
  std::vector<OpRecord> records_;
};

namespace tape {

// True when any tape on this thread is alive (the fast path for ops).
bool AnyTapeActive();
// True when a tape on this thread records ops run now: false inside the
// only tape's Gradient(), true there when an outer tape watches (how
// higher-order gradients work).
bool AnyTapeRecording();
// True when a tape on this thread that records ops run now watches `tensor`
// (watched, a trainable variable read in its scope, or a recorded op's
// output): whether a gradient with respect to it can be asked for later.
// Lets an op keep what only that gradient reads (a convolution's columns
// for its filter's) only where it can be used: a frozen layer's kernel is
// not watched. An op that did not keep it must still compute that gradient
// if asked (a tensor watched after the op ran).
bool AnyRecordingTapeWatches(const Tensor& tensor);
// Records the op on every active tape that watches one of its inputs
// (nothing for an op that is not differentiable).
void RecordOperation(const OpDef& op, absl::Span<const Tensor> inputs,
                     absl::Span<const Tensor> outputs, std::any attrs = {});
// Watches `tensor` on every active tape (how Variables are auto-watched).
void WatchOnActiveTapes(const Tensor& tensor);

}  // namespace tape
}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_GRADIENT_TAPE_H_
