#include "tensor/ops/precision_ops.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/allocator.h"
#include "tensor/bfloat16.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/internal_switches.h"
#include "tensor/ops/gemm_operand.h"
#include "tensor/ops/op_util.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {

std::atomic<bool> bf16_copies{true};
std::atomic<bool> halves_only_outputs{true};
std::atomic<int64_t> halves_only_requests{0};

// y = x rounded, and recorded as rounded; y has x's shape, dtype f32 and
// device; y may be x. With `halves` on a GPU the pass also writes y's
// 2-byte copy.
absl::Status Round(const Tensor& x, const Tensor& y, bool halves) {
  const int64_t n = x.num_elements();
  std::shared_ptr<Buffer> copy;  // Stays null on CPUs.
  if (!x.device().is_cuda()) {
    const float* in = x.data<float>();
    float* out = y.data<float>();
    ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
      RoundToBFloat16(in + begin, out + begin, end - begin);
    });
  } else {
    if (halves) {
      MT_ASSIGN_OR_RETURN(copy, internal::AllocateBf16(n, x.device()));
    }
    MT_RETURN_IF_ERROR(internal::KernelError(
        "RoundToBFloat16",
        cuda::RoundToBFloat16(x.raw_data(), y.raw_data(),
                              copy != nullptr ? copy->data() : nullptr, n,
                              x.device().index),
        {&x}));
  }
  y.set_bf16_rendering(std::move(copy));
  return absl::OkStatus();
}

// Writes the halves of the GPU f32 tensor `t` by the conversion alone,
// not the rounding again: `t` holds rounded values already (a view of a
// layer output, flatten's, that now feeds a product), or, without
// `values_rounded`, keeps its values as they are and the halves alone hold
// the rounded ones (an output that only products read).
absl::Status AddHalves(const Tensor& t, bool values_rounded) {
  const int64_t n = t.num_elements();
  MT_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> copy,
                      internal::AllocateBf16(n, t.device()));
  MT_RETURN_IF_ERROR(internal::KernelError(
      "ToBFloat16",
      cuda::ToBFloat16(t.raw_data(), copy->data(), n, t.device().index), {&t}));
  t.set_bf16_rendering(std::move(copy), values_rounded);
  return absl::OkStatus();
}

}  // namespace

absl::Status RoundToBFloat16InPlace(Tensor& t, bool halves) {
  if (t.dtype() != DType::kF32) return absl::OkStatus();
  const Bf16Rendering* r = t.bf16_rendering();
  if (r == nullptr) return Round(t, t, halves);
  if (!r->values_rounded) {
    // Halves alone, now read as f32 values too: the whole rendering's (t
    // may be a view into it) are rounded in place; the halves hold the
    // same values already.
    return internal::KernelError("RoundToBFloat16", t.RoundRenderedValues(),
                                 {&t});
  }
  // CPU products read f32 storage: they need no halves.
  if (!halves || !t.device().is_cuda() || r->halves != nullptr) {
    return absl::OkStatus();
  }
  return AddHalves(t, /*values_rounded=*/true);
}

absl::StatusOr<Tensor> RoundedToBFloat16(const Tensor& x, bool halves) {
  if (x.dtype() != DType::kF32) return x;
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  MT_RETURN_IF_ERROR(Round(x, y, halves));
  return y;
}

absl::Status RoundOutput(Tensor& t, OutputRounding rounding) {
  if (rounding == OutputRounding::kNone) return absl::OkStatus();
  if (rounding == OutputRounding::kBf16HalvesOnly) {
    halves_only_requests.fetch_add(1, std::memory_order_relaxed);
    if (t.dtype() == DType::kF32 && t.device().is_cuda() &&
        halves_only_outputs.load(std::memory_order_relaxed)) {
      const Bf16Rendering* r = t.bf16_rendering();
      if (r == nullptr) return AddHalves(t, /*values_rounded=*/false);
      // Its halves are there (a nested sequence's output, stored so by
      // the sequence already): nothing more.
      if (r->halves != nullptr) return absl::OkStatus();
    }
  }
  return RoundToBFloat16InPlace(t, rounding != OutputRounding::kBf16);
}

absl::StatusOr<bool> KeepBf16Copy(const Tensor& value) {
  if (!bf16_copies.load(std::memory_order_relaxed) ||
      !internal::ProductsReadBf16(value) || !value.device().is_cuda() ||
      value.bf16_copy() != nullptr) {
    return false;
  }
  if (value.byte_offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KeepBf16Copy: ", value.DebugString(), " is a view into its buffer"));
  }
  MT_ASSIGN_OR_RETURN(
      std::shared_ptr<Buffer> copy,
      internal::AllocateBf16(value.num_elements(), value.device()));
  MT_RETURN_IF_ERROR(value.SetBf16Copy(std::move(copy)));
  return true;
}

namespace internal {

void SetBf16Copies(bool enabled) { bf16_copies.store(enabled); }

void SetBf16HalvesOnlyOutputs(bool enabled) {
  halves_only_outputs.store(enabled);
}

int64_t HalvesOnlyOutputRequests() {
  return halves_only_requests.load(std::memory_order_relaxed);
}

MT_REGISTER(InternalSwitch,
            {.name = "bf16_copies",
             .doc = "bf16 on GPUs: the optimizer's update writes each "
                    "variable's bfloat16 copy, which products read; off: "
                    "products convert the weights every step",
             .set = &SetBf16Copies});
MT_REGISTER(InternalSwitch,
            {.name = "bf16_halves_only_outputs",
             .doc = "bf16 on GPUs: hidden outputs only products read are "
                    "stored as their 2-byte halves alone; off: f32 rounded "
                    "values and halves",
             .set = &SetBf16HalvesOnlyOutputs});

void* Bf16Halves(const Tensor& t) {
  const Bf16Rendering* r = t.bf16_rendering();
  if (r == nullptr || r->halves == nullptr) return nullptr;
  return static_cast<char*>(r->halves->data()) +
         (t.byte_offset() - r->begin) / 2;
}

absl::StatusOr<std::shared_ptr<Buffer>> AllocateBf16(int64_t n, Device device) {
  constexpr size_t kBf16Bytes = 2;
  MT_ASSIGN_OR_RETURN(Allocator * allocator, AllocatorFor(device));
  return Buffer::Allocate(
      allocator, static_cast<size_t>(std::max<int64_t>(n, 1)) * kBf16Bytes);
}

}  // namespace internal
}  // namespace mirrortrain::ops
