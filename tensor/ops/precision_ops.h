// Rounding to bfloat16 for mixed-precision training (`precision: bf16`):
// the values a bf16 tensor would hold, kept in f32 storage. Unrecorded: the
// tape sees no op, so a gradient flows through unchanged (as through
// TensorFlow's Cast pair, whose gradient is a cast of the gradient, which
// the next bf16 matrix product rounds in any case).
//
// A rounded tensor's buffer records it (Bf16Rendering, tensor/tensor.h):
// rounding it again is skipped, and a matrix product reads it as it is
// (ops/gemm_operand.h) instead of converting it once more. Asked for
// `halves`, the rounding pass on a GPU also writes the values as 2-byte
// bfloat16, the form the products read, in the same pass: a layer output
// that feeds a product is then read by it with no conversion pass. A layer
// output that nothing but products reads (OutputRounding::kBf16HalvesOnly)
// gets the halves alone on GPUs: its f32 bytes are not rewritten, and are
// rounded later only if something asks for them rounded.
//
// Only f32 tensors round; f64 and integer tensors are left as they are (the
// f64 gradient checks, token ids). Kernels run on the tensor's device, on
// the calling thread's stream.
#ifndef MIRRORTRAIN_TENSOR_OPS_PRECISION_OPS_H_
#define MIRRORTRAIN_TENSOR_OPS_PRECISION_OPS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::ops {

// Rounds `t`'s elements in place. For an op's output that the tape already
// holds: gradients that read the output (relu's, softmax's) then see the
// stored bf16 value, as they would with bf16 storage. Does nothing to a
// tensor already rounded (with its halves, if asked for them, on GPUs);
// rounds the f32 values of one that has only its halves (kBf16HalvesOnly).
absl::Status RoundToBFloat16InPlace(Tensor& t, bool halves = false);

// A rounded copy of `x` (`x` itself when it does not round).
absl::StatusOr<Tensor> RoundedToBFloat16(const Tensor& x, bool halves = false);

// How a layer's f32 output is stored under mixed bfloat16
// (models/containers.cc): as computed, or rounded as
// RoundToBFloat16InPlace(result, halves) rounds it, or (kBf16HalvesOnly:
// for an output that nothing but products reads, the relu mask of its own
// gradient aside, which reads the halves too) as its 2-byte halves alone on
// GPUs, one pass that reads 4 bytes and writes 2 per value instead of 4 and
// 6; kBf16 on CPUs, whose products read f32 storage.
enum class OutputRounding { kNone, kBf16, kBf16WithHalves, kBf16HalvesOnly };

// Stores `t` as `rounding` says; nothing for kNone.
absl::Status RoundOutput(Tensor& t, OutputRounding rounding);

// Gives `value`, a variable's value that the products read as bfloat16 (f32
// on a GPU under mixed bfloat16), a bfloat16 copy of its buffer
// (Buffer::bf16_copy, tensor/tensor.h): the products read it instead of
// converting the weights every step, and ApplyUpdates writes it in the
// update's own pass (what an optimizer calls it for). Returns whether it
// made one: false when `value` has one, or when its products do not read
// bfloat16 (CPUs, f64, fp32 and tf32). `value` must span its whole buffer.
// On the calling thread's stream.
absl::StatusOr<bool> KeepBf16Copy(const Tensor& value);

namespace internal {

// Whether RoundOutput stores kBf16HalvesOnly outputs as halves alone (on
// by default); off, as kBf16WithHalves. For tests comparing the two.
void SetBf16HalvesOnlyOutputs(bool enabled);
// How many times RoundOutput was asked for kBf16HalvesOnly (any device,
// either setting): which outputs the containers store so.
int64_t HalvesOnlyOutputRequests();

// Whether KeepBf16Copy makes copies (on by default). Off, no new copies:
// the products of tensors without one convert them again, as before the
// copies (copies made already are still read and written). For tests
// comparing the two.
void SetBf16Copies(bool enabled);

// `t`'s values as 2-byte bfloat16 when its rounding pass wrote them (GPUs:
// RoundToBFloat16InPlace with `halves`), else null. The pointer lives as
// long as `t`'s buffer keeps its rendering; hold `t` while using it. Only
// the rounding pass writes through it.
void* Bf16Halves(const Tensor& t);

// Device memory for `n` 2-byte bfloat16 values on the GPU `device`.
absl::StatusOr<std::shared_ptr<Buffer>> AllocateBf16(int64_t n, Device device);

}  // namespace internal
}  // namespace mirrortrain::ops

#endif  // MIRRORTRAIN_TENSOR_OPS_PRECISION_OPS_H_
