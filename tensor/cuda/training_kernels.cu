// CUDA kernels of the training ops: the shared per-element arithmetic
// (tensor/update_rules.h) over many tensors per launch. This file is
// compiled with --fmad=false (tensor/CMakeLists.txt), so no multiply-add
// is fused and every rounding matches the CPU loop's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/bf16_pack.cuh"
#include "tensor/cuda/chunked_batch.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_training.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

// Tensors per launch: their pointers travel as a kernel parameter, which
// must stay under the classic 4 KiB limit (about 2.8 KiB for updates with
// their gradients' further terms, 1.5 KiB for the others and for moving
// averages).
constexpr int kMaxTensors = 24;
constexpr int kMaxMore = kMaxGradientTerms - 1;
// Elements per block; a block updates a chunk of one tensor.
constexpr int64_t kChunk = 16 * kLaunchThreads;
// Blocks per launch stay in int range (a tensor of more than 2^30 chunks
// would need 4e12 elements).
constexpr int64_t kMaxBlocks = int64_t{1} << 30;

// Up to kMaxTensors tensors of one launch: their pointers (what each is
// depends on the kernel, see the launchers) and where each one's blocks
// begin, so a block finds its tensor by a short scan.
struct TensorBatch {
  const void* scalars[kMaxTensors];
  const void* in[kMaxTensors];
  void* out[kMaxTensors];
  void* s0[kMaxTensors];
  void* s1[kMaxTensors];
  // ApplyUpdates: the variable's bfloat16 copy, or null.
  void* bf16[kMaxTensors];
  int64_t n[kMaxTensors];
  int first_block[kMaxTensors + 1];
  // Every pointer of the tensor 16-byte aligned (the bfloat16 copy 8-byte):
  // moved 16 bytes at a time.
  bool wide[kMaxTensors];
  int count;
};

// Whether `p` (null: no operand) allows 16-byte accesses.
bool Wide16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// Whether `p` (null: none) allows 8-byte accesses: four bfloat16 values.
bool Wide8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

// The bfloat16 copy's elements of the updated f32 values (a variable's
// copy, Buffer::bf16_copy): one 8-byte store per Wide<float>, rounded as
// ToBFloat16 rounds. Other types never have a copy.
template <typename T>
__device__ inline void StoreBf16(void* copy, int64_t i, const Wide<T>& v) {
  if constexpr (std::is_same_v<T, float>) {
    reinterpret_cast<uint2*>(copy)[i / 4] =
        PackBf16x4(v.v[0], v.v[1], v.v[2], v.v[3]);
  }
}
template <typename T>
__device__ inline void StoreBf16(void* copy, int64_t i, T v) {
  if constexpr (std::is_same_v<T, float>) {
    static_cast<__nv_bfloat16*>(copy)[i] = __float2bfloat16_rn(v);
  }
}

// The tensor of this block, and its chunk [begin, end).
__device__ inline int BlockTensor(const TensorBatch& batch, int64_t& begin,
                                  int64_t& end) {
  return BlockChunk(batch.first_block, batch.n, kChunk, begin, end);
}

// ApplyUpdates' batch: further terms of each gradient `in`, null past the
// last (kept out of the moving averages' parameters, which need none).
struct UpdateBatch : TensorBatch {
  const void* more[kMaxMore][kMaxTensors];
};
static_assert(sizeof(UpdateBatch) <= 4096, "kernel parameters over 4 KiB");

// The gradient of element(s) i: `in`, plus the further terms in order (the
// additions OrderedSum and the slice-sum kernel make). The term loop is
// unrolled to constant indices, so the pointers are read from parameter
// space.
template <typename T>
__device__ inline Wide<T> LoadGradient(const UpdateBatch& batch, int t,
                                       int64_t i, Wide<T> g) {
#pragma unroll
  for (int k = 0; k < kMaxMore; ++k) {
    const T* term = static_cast<const T*>(batch.more[k][t]);
    if (term == nullptr) break;
    const Wide<T> v = LoadWide(term, i);
#pragma unroll
    for (int l = 0; l < Wide<T>::kLanes; ++l) g.v[l] += v.v[l];
  }
  return g;
}
template <typename T>
__device__ inline T LoadGradient(const UpdateBatch& batch, int t, int64_t i,
                                 T g) {
#pragma unroll
  for (int k = 0; k < kMaxMore; ++k) {
    const T* term = static_cast<const T*>(batch.more[k][t]);
    if (term == nullptr) break;
    g += term[i];
  }
  return g;
}

// The gradient as it is: a batch without further terms.
template <typename V>
__device__ inline V LoadGradient(const TensorBatch&, int, int64_t, V g) {
  return g;
}

// Batch: UpdateBatch where some gradient has further terms, else the
// TensorBatch the update took before terms existed (half the parameters,
// no test per element).
template <UpdateRule R, typename T, typename Batch>
__global__ void UpdatesKernel(const __grid_constant__ Batch batch) {
  int64_t begin, end;
  const int t = BlockTensor(batch, begin, end);
  const UpdateParams<T> p =
      *static_cast<const UpdateParams<T>*>(batch.scalars[t]);
  const T* __restrict__ g = static_cast<const T*>(batch.in[t]);
  T* __restrict__ w = static_cast<T*>(batch.out[t]);
  T* __restrict__ s0 = static_cast<T*>(batch.s0[t]);
  T* __restrict__ s1 = static_cast<T*>(batch.s1[t]);
  void* __restrict__ copy = batch.bf16[t];
  // Rules with fewer slots get null pointers and use zeros.
  VisitChunk<T>(
      batch.wide[t], begin, end,
      [&](int64_t i) {
        const Wide<T> gv = LoadGradient(batch, t, i, LoadWide(g, i));
        Wide<T> wv = LoadWide(w, i), a{}, b{};
        if (s0 != nullptr) a = LoadWide(s0, i);
        if (s1 != nullptr) b = LoadWide(s1, i);
#pragma unroll
        for (int l = 0; l < Wide<T>::kLanes; ++l) {
          UpdateElement<R, T>(p, gv.v[l], wv.v[l], a.v[l], b.v[l]);
        }
        StoreWide(w, i, wv);
        if (s0 != nullptr) StoreWide(s0, i, a);
        if (s1 != nullptr) StoreWide(s1, i, b);
        if (copy != nullptr) StoreBf16(copy, i, wv);
      },
      [&](int64_t i) {
        T unused0 = T(0), unused1 = T(0);
        T& slot0 = s0 != nullptr ? s0[i] : unused0;
        T& slot1 = s1 != nullptr ? s1[i] : unused1;
        UpdateElement<R, T>(p, LoadGradient(batch, t, i, g[i]), w[i], slot0,
                            slot1);
        if (copy != nullptr) StoreBf16(copy, i, w[i]);
      });
}

template <typename T>
__global__ void MovingAveragesKernel(
    const __grid_constant__ TensorBatch batch) {
  int64_t begin, end;
  const int t = BlockTensor(batch, begin, end);
  const T one_minus_decay = *static_cast<const T*>(batch.scalars[t]);
  const T* __restrict__ value = static_cast<const T*>(batch.in[t]);
  T* __restrict__ shadow = static_cast<T*>(batch.out[t]);
  VisitChunk<T>(
      batch.wide[t], begin, end,
      [&](int64_t i) {
        const Wide<T> v = LoadWide(value, i);
        Wide<T> s = LoadWide(shadow, i);
#pragma unroll
        for (int l = 0; l < Wide<T>::kLanes; ++l) {
          MovingAverageElement(one_minus_decay, v.v[l], s.v[l]);
        }
        StoreWide(shadow, i, s);
      },
      [&](int64_t i) {
        MovingAverageElement(one_minus_decay, value[i], shadow[i]);
      });
}

// Packs the non-empty tensors into batches (a TensorBatch or one derived
// from it) and calls launch(batch, blocks) for each; `fill(batch, slot,
// tensor)` sets one tensor's pointers.
template <typename Batch, typename Operands, typename Fill, typename Launch>
void ForEachBatch(absl::Span<const Operands> tensors, Fill fill,
                  Launch launch) {
  Batch batch{};
  int64_t blocks = 0;
  auto flush = [&] {
    if (batch.count == 0) return;
    batch.first_block[batch.count] = static_cast<int>(blocks);
    launch(batch, static_cast<int>(blocks));
    batch = Batch{};
    blocks = 0;
  };
  for (const Operands& t : tensors) {
    if (t.n == 0) continue;
    const int64_t chunks = (t.n + kChunk - 1) / kChunk;
    if (batch.count == kMaxTensors || blocks + chunks > kMaxBlocks) flush();
    const int k = batch.count++;
    fill(batch, k, t);
    batch.n[k] = t.n;
    batch.first_block[k] = static_cast<int>(blocks);
    blocks += chunks;
  }
  flush();
}

// Whether every tensor fits a launch; *any: whether one has elements (a
// list of empty ones launches nothing, so no error of an earlier kernel is
// reported under this one's name).
template <typename Operands>
absl::Status CheckSizes(const char* what, absl::Span<const Operands> tensors,
                        bool* any) {
  *any = false;
  for (const Operands& t : tensors) {
    if (t.n > kChunk * kMaxBlocks) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", t.n, " elements in one tensor"));
    }
    *any = *any || t.n > 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyUpdatesOnGpu(UpdateRule rule, DType dtype,
                               absl::Span<const UpdateOperands> tensors,
                               int device) {
  bool any = false;
  MT_RETURN_IF_ERROR(CheckSizes("ApplyUpdates", tensors, &any));
  if (!any) return absl::OkStatus();
  return LaunchFloatOn(
      "ApplyUpdates", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        const auto launch = [&](auto r, auto batch_type) {
          using Batch = decltype(batch_type);
          ForEachBatch<Batch>(
              tensors,
              [](Batch& b, int k, const UpdateOperands& t) {
                b.scalars[k] = t.params;
                b.in[k] = t.grad;
                b.out[k] = t.var;
                b.s0[k] = t.s0;
                b.s1[k] = t.s1;
                b.bf16[k] = t.bf16;
                b.wide[k] = Wide16(t.grad) && Wide16(t.var) && Wide16(t.s0) &&
                            Wide16(t.s1) && Wide8(t.bf16);
                if constexpr (std::is_same_v<Batch, UpdateBatch>) {
                  for (int m = 0; m < kMaxMore; ++m) {
                    b.more[m][k] = t.more_grads[m];
                    b.wide[k] = b.wide[k] && Wide16(t.more_grads[m]);
                  }
                }
              },
              [&](const Batch& b, int blocks) {
                UpdatesKernel<decltype(r)::value, T, Batch>
                    <<<blocks, kLaunchThreads, 0, stream>>>(b);
              });
        };
        const bool terms = std::any_of(
            tensors.begin(), tensors.end(),
            [](const UpdateOperands& t) { return t.more_grads[0] != nullptr; });
        DispatchUpdateRule(rule, [&](auto r) {
          if (terms) {
            launch(r, UpdateBatch{});
          } else {
            launch(r, TensorBatch{});
          }
        });
      });
}

absl::Status MovingAveragesOnGpu(
    DType dtype, absl::Span<const MovingAverageOperands> tensors, int device) {
  bool any = false;
  MT_RETURN_IF_ERROR(CheckSizes("MovingAverages", tensors, &any));
  if (!any) return absl::OkStatus();
  return LaunchFloatOn(
      "MovingAverages", dtype, device, [&](auto zero, cudaStream_t stream) {
        using T = decltype(zero);
        ForEachBatch<TensorBatch>(
            tensors,
            [](TensorBatch& b, int k, const MovingAverageOperands& t) {
              b.scalars[k] = t.one_minus_decay;
              b.in[k] = t.value;
              b.out[k] = t.shadow;
              b.wide[k] = Wide16(t.value) && Wide16(t.shadow);
            },
            [&](const TensorBatch& b, int blocks) {
              MovingAveragesKernel<T><<<blocks, kLaunchThreads, 0, stream>>>(b);
            });
      });
}

MT_DEFINE_CUDA_KERNEL(ApplyUpdates, ApplyUpdatesOnGpu);
MT_DEFINE_CUDA_KERNEL(MovingAverages, MovingAveragesOnGpu);

}  // namespace mirrortrain::cuda
