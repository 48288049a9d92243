// MaxPool2D and AvgPool2D over NHWC images. Forward: one thread per output
// (max pooling: four channels of it when they can move as one access),
// walking its window in row-major order with the CPU rule (the first maximum
// wins; a NaN beats every number and the first NaN stays), recording the
// winner's offset within its image. Backward: one thread per input cell
// (four channels of it when they can move as one access, channels.cuh),
// gathering dy from the windows whose recorded winner it is. No atomics: the
// result is deterministic and adds the same terms in the same order as the CPU
// scatter, so CPU and GPU gradients agree bit for bit.
#include <cuda_runtime.h>

#include <algorithm>

#include "tensor/cuda/channels.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/cuda/image_window.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

template <typename I>
__device__ inline I Min(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
__device__ inline I Max(I a, I b) {
  return a > b ? a : b;
}

// The window of output (oy, ox): rows [y0, y1), columns [x0, x1).
template <typename I>
struct Window {
  I y0, y1, x0, x1;
  __device__ I cells() const { return (y1 - y0) * (x1 - x0); }
};
template <typename I>
__device__ Window<I> WindowOf(const ImageWindowOn<I>& g, I oy, I ox) {
  const I top = oy * g.sh.value() - g.pt;
  const I left = ox * g.sw.value() - g.pl;
  return {Max<I>(top, 0), Min<I>(top + g.kh, g.h.value()), Max<I>(left, 0),
          Min<I>(left + g.kw.value(), g.w.value())};
}

// Input cell idx of [n, h, w, c] and the outputs whose windows may cover
// it: rows [oy0, oy1] and columns [ox0, ox1] of image i (window oy covers
// rows [oy * stride - pad, + ksize); the ranges may include a window or two
// that misses the cell, which callers reject).
template <typename I>
struct InputCell {
  I i, yy, xx, ch;
  I oy0, oy1, ox0, ox1;
};
template <typename I>
__device__ InputCell<I> CellOf(const ImageWindowOn<I>& g, I idx) {
  const NhwcIndex<I> at = SplitNhwc(idx, g.h, g.w, g.c);
  InputCell<I> cell;
  cell.i = at.i;
  cell.yy = at.y;
  cell.xx = at.x;
  cell.ch = at.ch;
  const I kh = g.kh, kw = g.kw.value();
  const I ry = cell.yy + g.pt, rx = cell.xx + g.pl;
  cell.oy0 = ry >= kh ? g.sh.Div(ry - kh) : 0;
  cell.oy1 = Min<I>(g.sh.Div(ry), g.oh.value() - 1);
  cell.ox0 = rx >= kw ? g.sw.Div(rx - kw) : 0;
  cell.ox1 = Min<I>(g.sw.Div(rx), g.ow.value() - 1);
  return cell;
}

// Outputs o.. o + kVec - 1 of [n, oh, ow, c] (o a multiple of kVec, and c
// of kVec): each one's maximum into y and, when argmax is non-null, its
// winner's offset within the image into argmax.
template <typename T, typename I, int kVec>
__device__ void MaxPoolAt(const ImageWindowOn<I>& g, const T* x, I o, T* y,
                          int32_t* argmax) {
  const I h = g.h.value(), w = g.w.value(), c = g.c.value();
  const NhwcIndex<I> at = SplitNhwc(o, g.oh, g.ow, g.c);
  const I ch = at.ch;
  const Window<I> win = WindowOf(g, at.y, at.x);
  const T* img = x + at.i * h * w * c;
  // Windows always hold at least one real cell: start from the first.
  const I first = (win.y0 * w + win.x0) * c + ch;
  Channels<T, kVec> best = LoadChannels<kVec>(img + first);
  Channels<int32_t, kVec> arg;
#pragma unroll
  for (int j = 0; j < kVec; ++j) arg.v[j] = static_cast<int32_t>(first + j);
  for (I yy = win.y0; yy < win.y1; ++yy) {
    for (I xx = win.x0; xx < win.x1; ++xx) {
      const I off = (yy * w + xx) * c + ch;
      if (off == first) continue;
      const Channels<T, kVec> v = LoadChannels<kVec>(img + off);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if (v.v[j] > best.v[j] ||
            (v.v[j] != v.v[j] && best.v[j] == best.v[j])) {
          best.v[j] = v.v[j];
          arg.v[j] = static_cast<int32_t>(off + j);
        }
      }
    }
  }
  StoreChannels<T>(best, y + o);
  if (argmax != nullptr) StoreChannels<int32_t>(arg, argmax + o);
}

// dx at the kVec channels from input element idx of [n, h, w, c] (a
// multiple of kVec, and c of kVec): for each, the sum of dy over the outputs
// that recorded its cell as winner, in increasing output order.
template <typename T, typename I, int kVec>
__device__ Channels<T, kVec> MaxPoolGradAt(const ImageWindowOn<I>& g,
                                           const int32_t* argmax, const T* dy,
                                           I idx) {
  const I c = g.c.value(), oh = g.oh.value(), ow = g.ow.value();
  const InputCell<I> at = CellOf(g, idx);
  // A window that misses the cell has its winner elsewhere: the argmax
  // comparison rejects it.
  const I cell = (at.yy * g.w.value() + at.xx) * c + at.ch;
  Channels<T, kVec> acc{};
  auto add = [&](I o) {
    const Channels<int32_t, kVec> winner = LoadChannels<kVec>(argmax + o);
    const Channels<T, kVec> d = LoadChannels<kVec>(dy + o);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (winner.v[j] == cell + j) acc.v[j] += d.v[j];
    }
  };
  if (g.sh.value() >= g.kh && g.sw.value() >= g.kw.value()) {
    // Windows that do not overlap (the usual 2x2 stride 2): only the one
    // starting at or before the cell can hold it, so one argmax is read
    // instead of up to four.
    const I ry = at.yy + g.pt, rx = at.xx + g.pl;
    const I oy = g.sh.Div(ry), ox = g.sw.Div(rx);
    if (oy < oh && ox < ow && ry - oy * g.sh.value() < g.kh &&
        rx - ox * g.sw.value() < g.kw.value()) {
      add(((at.i * oh + oy) * ow + ox) * c + at.ch);
    }
    return acc;
  }
  for (I oy = at.oy0; oy <= at.oy1; ++oy) {
    for (I ox = at.ox0; ox <= at.ox1; ++ox) {
      add(((at.i * oh + oy) * ow + ox) * c + at.ch);
    }
  }
  return acc;
}

// One thread per kVec channels of an output cell.
template <typename T, typename I, int kVec>
__global__ void MaxPoolForwardKernel(ImageWindowOn<I> g, const T* x, T* y,
                                     int32_t* argmax, I outputs) {
  for (I o = GridStart<I>() * kVec; o < outputs; o += GridStep<I>() * kVec) {
    MaxPoolAt<T, I, kVec>(g, x, o, y, argmax);
  }
}

// One thread per kVec channels of an input cell.
template <typename T, typename I, int kVec>
__global__ void MaxPoolBackwardKernel(ImageWindowOn<I> g, const int32_t* argmax,
                                      const T* dy, T* dx, I inputs) {
  for (I idx = GridStart<I>() * kVec; idx < inputs;
       idx += GridStep<I>() * kVec) {
    StoreChannels<T>(MaxPoolGradAt<T, I, kVec>(g, argmax, dy, idx), dx + idx);
  }
}

template <typename T, typename I>
__global__ void AvgPoolForwardKernel(ImageWindowOn<I> g, const T* x, T* y,
                                     I outputs) {
  const I h = g.h.value(), w = g.w.value(), c = g.c.value();
  for (I o = GridStart<I>(); o < outputs; o += GridStep<I>()) {
    const NhwcIndex<I> at = SplitNhwc(o, g.oh, g.ow, g.c);
    const I ch = at.ch;
    const Window<I> win = WindowOf(g, at.y, at.x);
    const T* img = x + at.i * h * w * c;
    T sum = T(0);
    for (I yy = win.y0; yy < win.y1; ++yy) {
      for (I xx = win.x0; xx < win.x1; ++xx) sum += img[(yy * w + xx) * c + ch];
    }
    y[o] = sum / static_cast<T>(win.cells());
  }
}

template <typename T, typename I>
__global__ void AvgPoolBackwardKernel(ImageWindowOn<I> g, const T* dy, T* dx,
                                      I inputs) {
  const I c = g.c.value(), oh = g.oh.value(), ow = g.ow.value();
  for (I idx = GridStart<I>(); idx < inputs; idx += GridStep<I>()) {
    const InputCell<I> at = CellOf(g, idx);
    T acc = T(0);
    for (I oy = at.oy0; oy <= at.oy1; ++oy) {
      for (I ox = at.ox0; ox <= at.ox1; ++ox) {
        const Window<I> win = WindowOf(g, oy, ox);
        if (at.yy < win.y0 || at.yy >= win.y1 || at.xx < win.x0 ||
            at.xx >= win.x1) {
          continue;
        }
        const I o = ((at.i * oh + oy) * ow + ox) * c + at.ch;
        acc += dy[o] / static_cast<T>(win.cells());
      }
    }
    dx[idx] = acc;
  }
}

// Which elements a kernel's threads walk.
enum class Over { kOutputs, kInputs };

// Checks `g`, then launches kernel_of(T{}, I{}) (KernelLaunch) with
// arguments (g, buffers..., count): T the dtype's type, I an index type
// wide enough for the input and the output, `count` the elements walked;
// nothing when there are none.
// A thread walks `per_thread` consecutive elements (which divides count).
template <typename KernelOf, typename... Buffers>
absl::Status LaunchPoolVec(const char* what, DType dtype,
                           const Pool2DGeometry& g, Over over, int per_thread,
                           int device, KernelOf kernel_of, Buffers... buffers) {
  MT_RETURN_IF_ERROR(CheckImageWindow(what, g));
  const int64_t inputs = g.n * g.h * g.w * g.c;
  const int64_t outputs = g.n * g.oh * g.ow * g.c;
  const int64_t count = over == Over::kOutputs ? outputs : inputs;
  if (count == 0) return absl::OkStatus();
  return LaunchFloatIndexWidthOn(what, dtype, device, std::max(inputs, outputs),
                                 KernelLaunch(LaunchBlocks(count / per_thread),
                                              kernel_of, g, buffers..., count));
}

// LaunchPoolVec with one element per thread.
template <typename KernelOf, typename... Buffers>
absl::Status LaunchPool(const char* what, DType dtype, const Pool2DGeometry& g,
                        Over over, int device, KernelOf kernel_of,
                        Buffers... buffers) {
  return LaunchPoolVec(what, dtype, g, over, 1, device, kernel_of, buffers...);
}

}  // namespace

absl::Status MaxPool2DForwardOnGpu(DType dtype, const void* x,
                                   const Pool2DGeometry& g, void* y,
                                   int32_t* argmax, int device) {
  const bool four = FourChannelsAtOnce(dtype, g.c, {x, y, argmax});
  return LaunchPoolVec(
      "MaxPool2DForward", dtype, g, Over::kOutputs, four ? 4 : 1, device,
      [four](auto t, auto i) {
        using T = decltype(t);
        using I = decltype(i);
        return four ? MaxPoolForwardKernel<T, I, 4>
                    : MaxPoolForwardKernel<T, I, 1>;
      },
      x, y, argmax);
}

absl::Status MaxPool2DBackwardOnGpu(DType dtype, const int32_t* argmax,
                                    const void* dy, const Pool2DGeometry& g,
                                    void* dx, int device) {
  const bool four = FourChannelsAtOnce(dtype, g.c, {argmax, dy, dx});
  return LaunchPoolVec(
      "MaxPool2DBackward", dtype, g, Over::kInputs, four ? 4 : 1, device,
      [four](auto t, auto i) {
        using T = decltype(t);
        using I = decltype(i);
        return four ? MaxPoolBackwardKernel<T, I, 4>
                    : MaxPoolBackwardKernel<T, I, 1>;
      },
      argmax, dy, dx);
}

absl::Status AvgPool2DForwardOnGpu(DType dtype, const void* x,
                                   const Pool2DGeometry& g, void* y,
                                   int device) {
  return LaunchPool(
      "AvgPool2DForward", dtype, g, Over::kOutputs, device,
      [](auto t, auto i) {
        return AvgPoolForwardKernel<decltype(t), decltype(i)>;
      },
      x, y);
}

absl::Status AvgPool2DBackwardOnGpu(DType dtype, const void* dy,
                                    const Pool2DGeometry& g, void* dx,
                                    int device) {
  return LaunchPool(
      "AvgPool2DBackward", dtype, g, Over::kInputs, device,
      [](auto t, auto i) {
        return AvgPoolBackwardKernel<decltype(t), decltype(i)>;
      },
      dy, dx);
}

MT_DEFINE_CUDA_KERNEL(MaxPool2DForward, MaxPool2DForwardOnGpu);
MT_DEFINE_CUDA_KERNEL(MaxPool2DBackward, MaxPool2DBackwardOnGpu);
MT_DEFINE_CUDA_KERNEL(AvgPool2DForward, AvgPool2DForwardOnGpu);
MT_DEFINE_CUDA_KERNEL(AvgPool2DBackward, AvgPool2DBackwardOnGpu);

}  // namespace mirrortrain::cuda
