#include "tensor/ops/conv_ops.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/cpu_threads.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/device_byte_budget.h"
#include "tensor/gradient_tape.h"
#include "tensor/internal_switches.h"
#include "tensor/matmul_precision.h"
#include "tensor/op.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/pooling_ops.h"
#include "tensor/ops/winograd_conv.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kConv2DOp);
MT_DECLARE_OP(kConv2DBiasReluOp);
MT_DECLARE_OP(kConv2DMaxPoolOp);
MT_DECLARE_OP(kConv2DMaxPoolBiasReluOp);
MT_DECLARE_OP(kConv2DTransposeOp);
}  // namespace
namespace {

using internal::GemmOperand;
using internal::OpError;

// One geometry for the CPU kernels and the CUDA ones (cuda_kernels.h).
using ConvGeometry = cuda::Conv2DGeometry;

struct ConvAttrs {
  ConvGeometry geo;
  // On GPUs, when the batch fits one column chunk and the budget for kept
  // columns allows (KeptColumns): the columns the forward product read
  // (im2col of x, as f32 or bf16), which the filter gradient reads instead
  // of running im2col again (the same values). They live as long as the
  // record: the tape holds one column buffer per such conv until its
  // backward, and `columns_reserved` their bytes of the budget.
  GemmOperand columns;
  // On the Winograd path, likewise: the forward's transformed input, which
  // the filter gradient reads instead of transforming x again.
  Tensor winograd_input;
  DeviceByteBudget::Reservation columns_reserved;
};

// Images per im2col chunk: bounds the column buffer to ~4 MiB, so it is
// still in cache when the GEMM reads it (measured best of 2-16 MiB).
int64_t ChunkImages(const ConvGeometry& g, size_t elem) {
  const int64_t per_image = g.pixels() * g.patch() * static_cast<int64_t>(elem);
  return std::clamp<int64_t>((4 << 20) / std::max<int64_t>(per_image, 1), 1,
                             std::max<int64_t>(g.n, 1));
}

// cols[(i*OH + y)*OW + x][(ky*KW + kx)*C + c] =
//     x[i0 + i][y*sh - pt + ky*dh][x*sw - pl + kx*dw][c].
template <typename T>
void Im2Col(const ConvGeometry& g, const T* x, int64_t images, T* cols) {
  const int64_t patch = g.patch();
  for (int64_t i = 0; i < images; ++i) {
    const T* img = x + i * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T* row = cols + ((i * g.oh + oy) * g.ow + ox) * patch;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
          T* dst = row + ky * g.kw * g.c;
          if (iy < 0 || iy >= g.h) {
            std::fill_n(dst, g.kw * g.c, T(0));
            continue;
          }
          const int64_t ix0 = ox * g.sw - g.pl;
          // Fast path: the whole kernel row lies inside the image, its
          // cells adjacent.
          if (g.dw == 1 && ix0 >= 0 && ix0 + g.kw <= g.w) {
            std::memcpy(dst, img + (iy * g.w + ix0) * g.c,
                        g.kw * g.c * sizeof(T));
            continue;
          }
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ix0 + kx * g.dw;
            if (ix < 0 || ix >= g.w) {
              std::fill_n(dst + kx * g.c, g.c, T(0));
            } else {
              std::memcpy(dst + kx * g.c, img + (iy * g.w + ix) * g.c,
                          g.c * sizeof(T));
            }
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: scatter-adds columns back into images (dx must be
// zeroed by the caller).
template <typename T>
void Col2Im(const ConvGeometry& g, const T* cols, int64_t images, T* dx) {
  const int64_t patch = g.patch();
  for (int64_t i = 0; i < images; ++i) {
    T* img = dx + i * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const T* row = cols + ((i * g.oh + oy) * g.ow + ox) * patch;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.sw - g.pl + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const T* src = row + (ky * g.kw + kx) * g.c;
            T* dst = img + (iy * g.w + ix) * g.c;
            for (int64_t c = 0; c < g.c; ++c) dst[c] += src[c];
          }
        }
      }
    }
  }
}

// The groups of a grouped convolution (tf.nn.conv2d's: x's channels a
// multiple of the filter's input channels, the filters split evenly among
// the groups), 1 for a plain one or for shapes Geometry refuses.
absl::StatusOr<int64_t> ConvGroups(const Tensor& x, const Tensor& f) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame("Conv2D", {&x, &f}));
  if (x.rank() != 4 || f.rank() != 4 || x.dim(3) == f.dim(2)) return 1;
  const int64_t in = f.dim(2);
  if (in < 1 || x.dim(3) < 1 || x.dim(3) % in != 0) {
    return OpError("Conv2D",
                   absl::StrCat("input channels ", x.dim(3),
                                " are not a multiple of the filter's ", in),
                   {&x, &f});
  }
  const int64_t groups = x.dim(3) / in;
  if (f.dim(3) % groups != 0) {
    return OpError("Conv2D",
                   absl::StrCat(f.dim(3), " filters do not split into ", groups,
                                " groups"),
                   {&x, &f});
  }
  return groups;
}

// Each group of channels convolved with its own filters, the outputs
// concatenated in group order: recorded as Split, Conv2D and Concat ops,
// whose gradients make the grouped one.
absl::StatusOr<Tensor> GroupedConv2D(const Tensor& x, const Tensor& filter,
                                     const Conv2DOptions& options,
                                     int64_t groups) {
  MT_ASSIGN_OR_RETURN(const std::vector<Tensor> xs, Split(x, groups, 3));
  MT_ASSIGN_OR_RETURN(const std::vector<Tensor> fs, Split(filter, groups, 3));
  std::vector<Tensor> ys;
  ys.reserve(groups);
  for (int64_t g = 0; g < groups; ++g) {
    MT_ASSIGN_OR_RETURN(Tensor y, Conv2D(xs[g], fs[g], options));
    ys.push_back(std::move(y));
  }
  return Concat(ys, 3);
}

absl::StatusOr<ConvGeometry> Geometry(const Tensor& x, const Tensor& f,
                                      const Conv2DOptions& opt) {
  constexpr const char* kOp = "Conv2D";
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x, &f}));
  if (x.rank() != 4 || f.rank() != 4) {
    return OpError(kOp, "need input NHWC and filter HWIO (rank 4)", {&x, &f});
  }
  if (x.dim(3) != f.dim(2)) {
    return OpError(kOp, "input channels differ from filter in-channels",
                   {&x, &f});
  }
  if (opt.stride_h < 1 || opt.stride_w < 1) {
    return OpError(kOp, "strides must be >= 1", {&x, &f});
  }
  if (opt.dilation_h < 1 || opt.dilation_w < 1) {
    return OpError(kOp, "dilations must be >= 1", {&x, &f});
  }
  return ConvGeometry{
      MakeImageWindow(x.shape(), f.dim(0), f.dim(1), opt.stride_h, opt.stride_w,
                      opt.padding, opt.dilation_h, opt.dilation_w),
      f.dim(3)};
}

// Runs `body(chunk, i0, images, cols)` for every chunk of the batch, the
// chunks split over the kernel threads; each thread has its own column
// buffer (an [images * OH * OW, patch] view) and runs single-threaded
// GEMMs on it while it is in that core's cache. Chunks never write to the
// same memory: output rows, input-gradient images and per-chunk filter
// gradients are disjoint.
template <typename Body>
absl::Status ForEachChunk(const ConvGeometry& g, DType dtype, int64_t chunk,
                          Body body) {
  const int64_t chunks = (g.n + chunk - 1) / chunk;
  std::vector<absl::Status> status(chunks);
  ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
    // On a kernel thread: an allocation failure must be a status here.
    absl::StatusOr<Tensor> buffer =
        Tensor::Empty(dtype, {chunk * g.pixels(), g.patch()});
    for (int64_t c = begin; c < end; ++c) {
      const int64_t i0 = c * chunk;
      const int64_t images = std::min(chunk, g.n - i0);
      absl::StatusOr<Tensor> cols =
          buffer.ok() ? buffer->SliceRows(0, images * g.pixels())
                      : buffer.status();
      status[c] = cols.ok() ? body(c, i0, images, *cols) : cols.status();
    }
  });
  for (const absl::Status& s : status) MT_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// Images per chunk: the cache bound, but at least one chunk per thread.
int64_t ChunkFor(const ConvGeometry& g, DType dtype) {
  const int64_t threads = std::max(1, CpuMathThreads());
  return std::max<int64_t>(1, std::min(ChunkImages(g, DTypeSize(dtype)),
                                       (g.n + threads - 1) / threads));
}

// ---- GPU: im2col/col2im kernels around cuBLAS GEMMs (internal::Gemm on
// operands converted as GetMatMulPrecision says: GemmOperand::Of), chunk by
// chunk on the current stream.

// Column buffer bound on GPUs: large enough that the GEMMs of a typical
// batch run in one or a few chunks, small next to device memory.
constexpr int64_t kGpuColumnBytes = int64_t{256} << 20;
std::atomic<int64_t> gpu_column_bytes{kGpuColumnBytes};

// What the convs' kept columns (ConvAttrs) may hold at once per GPU, over
// every tape and thread: a deep net at a large batch would otherwise keep a
// buffer per conv (up to kGpuColumnBytes each) until its backward, memory
// that PyTorch and TensorFlow (cuDNN) never spend. Past it a filter
// gradient runs im2col again. The configs' models keep all theirs under it
// (the most: cifar10_resnet20's at batch 128, 0.77 GB in f32).
constexpr int64_t kGpuKeptColumnBytes = int64_t{1} << 30;
// Never destroyed: a record may still hold a reservation at exit.
DeviceByteBudget& KeptColumns() {
  static auto* const budget = new DeviceByteBudget(kGpuKeptColumnBytes);
  return *budget;
}

// Values between the starts of GPU column rows: the patch rounded up to
// 16 bytes of the column type (bf16 when products read bf16), so cuBLAS can
// run its vectorised kernels. A 5x5 single-channel patch, 25 wide, made it
// run align-1 kernels: the first conv's products took 45 + 50 us of a
// 1.09 ms CNN step (2026-11-26 trace) for 46 MB read and written each.
int64_t ColumnStride(const ConvGeometry& g, const Tensor& x) {
  const int64_t bytes = internal::ProductsReadBf16(x)
                            ? 2
                            : static_cast<int64_t>(DTypeSize(x.dtype()));
  const int64_t per_16 = std::max<int64_t>(1, 16 / bytes);
  return (g.patch() + per_16 - 1) / per_16 * per_16;
}

std::atomic<bool> gpu_direct{true};
std::atomic<int64_t> direct_calls{0};
std::atomic<int64_t> fused_pool_calls{0};
std::atomic<bool> gpu_implicit_input_grad{true};
std::atomic<int64_t> implicit_input_grad_calls{0};

// Whether x's convolution runs on the direct kernels (cuda_kernels.h):
// patches of a few taps, where im2col + GEMM is memory traffic.
bool GoesDirect(const ConvGeometry& g) {
  return gpu_direct.load(std::memory_order_relaxed) && cuda::DirectConvTakes(g);
}

absl::Status CountDirect(absl::Status s) {
  if (s.ok()) direct_calls.fetch_add(1, std::memory_order_relaxed);
  return s;
}

// Whether t's data starts at a multiple of four of its values' size.
bool QuadAligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) %
             (4 * DTypeSize(t.dtype())) ==
         0;
}

// Whether x's convolution runs as Winograd (winograd_conv.h), which leaves
// the direct kernels the few-tap convolutions they take.
bool GoesWinograd(const ConvGeometry& g, const Tensor& x) {
  return internal::WinogradConvTakes(g, x) &&
         !(x.device().is_cuda() && GoesDirect(g));
}

// Whether dx = conv's input gradient for dy2 runs as the implicit GEMM:
// where its FMAs are the products' own precision (full f32 or f64; tf32
// and bf16 go to tensor-core GEMMs) and it takes the shape.
bool GoesImplicit(const ConvGeometry& g, const Tensor& dy2, const Tensor& w2) {
  return gpu_implicit_input_grad.load(std::memory_order_relaxed) &&
         (dy2.dtype() == DType::kF64 ||
          GetMatMulPrecision() == MatMulPrecision::kFp32) &&
         cuda::ConvInputGradTakes(g) && QuadAligned(dy2) && QuadAligned(w2);
}

// Images whose column rows fit the column buffer's cap (at least one, at
// most the batch).
int64_t GpuChunkImages(const ConvGeometry& g, const Tensor& x) {
  const int64_t per_image = g.pixels() * ColumnStride(g, x) *
                            static_cast<int64_t>(DTypeSize(x.dtype()));
  return std::clamp<int64_t>(
      gpu_column_bytes.load() / std::max<int64_t>(per_image, 1), 1,
      std::max<int64_t>(g.n, 1));
}

// Image i0 of a GPU NHWC tensor.
void* ImageAt(const Tensor& t, const ConvGeometry& g, int64_t i0) {
  return static_cast<char*>(t.raw_data()) +
         i0 * g.h * g.w * g.c * static_cast<int64_t>(DTypeSize(t.dtype()));
}

// The columns of images i0.. of x as a product reads them: im2col into
// `cols`, or, when products read bf16, straight into a bf16 operand (no
// f32 columns written and converted; `cols` is then not used).
absl::StatusOr<GemmOperand> GpuColumns(const ConvGeometry& g, const Tensor& x,
                                       int64_t i0, int64_t images,
                                       const Tensor& cols) {
  const int64_t stride = ColumnStride(g, x);
  if (!internal::ProductsReadBf16(x)) {
    MT_RETURN_IF_ERROR(cuda::Im2Col(x.dtype(), ImageAt(x, g, i0), g, images,
                                    cols.raw_data(), stride,
                                    /*bf16_cols=*/false, x.device().index));
    return GemmOperand::Columns(cols, g.patch());
  }
  MT_ASSIGN_OR_RETURN(GemmOperand c,
                      GemmOperand::Bf16Storage({images * g.pixels(), g.patch()},
                                               x.device(), stride));
  MT_RETURN_IF_ERROR(cuda::Im2Col(x.dtype(), ImageAt(x, g, i0), g, images,
                                  c.bf16_storage(), stride, /*bf16_cols=*/true,
                                  x.device().index));
  return c;
}

// The first rows * g.patch() values of a chunk's column buffer as a dense
// [rows, patch] matrix: what dx's product writes and col2im reads.
absl::StatusOr<Tensor> DenseColumns(const ConvGeometry& g, const Tensor& cols) {
  const int64_t rows = cols.dim(0);
  MT_ASSIGN_OR_RETURN(Tensor flat, cols.Reshaped({cols.num_elements()}));
  MT_ASSIGN_OR_RETURN(flat, flat.SliceRows(0, rows * g.patch()));
  return flat.Reshaped({rows, g.patch()});
}

// Runs body(first_image, images, cols) over the batch in chunks
// (GpuChunkImages) sharing one device column buffer of x's dtype ([images *
// OH * OW, ColumnStride], or dense when products read bf16 columns of their
// own and this buffer only holds dx's product; cols is undefined without
// `dtype_cols`). Sequential: the kernels of one stream run in order anyway.
template <typename Body>
absl::Status ForEachGpuChunk(const ConvGeometry& g, const Tensor& x,
                             bool dtype_cols, Body body) {
  const int64_t chunk = GpuChunkImages(g, x);
  Tensor buffer;
  if (dtype_cols) {
    const int64_t width =
        internal::ProductsReadBf16(x) ? g.patch() : ColumnStride(g, x);
    MT_ASSIGN_OR_RETURN(
        buffer,
        Tensor::Empty(x.dtype(), {chunk * g.pixels(), width}, x.device()));
  }
  for (int64_t i0 = 0; i0 < g.n; i0 += chunk) {
    const int64_t images = std::min(chunk, g.n - i0);
    Tensor cols;
    if (dtype_cols) {
      MT_ASSIGN_OR_RETURN(cols, buffer.SliceRows(0, images * g.pixels()));
    }
    MT_RETURN_IF_ERROR(body(i0, images, cols));
  }
  return absl::OkStatus();
}

// y2 [N * OH * OW, O] = im2col(x) @ w2, every row written; with
// `relu_bias`, relu(... + bias): in the GEMM's cuBLASLt epilogue where it
// applies, else in one pass over the chunk's rows after it. When the batch
// is one chunk and `keep` is not null, keep->columns keeps the columns for
// the backward pass if the budget for kept columns grants their bytes.
absl::Status GpuForward(const ConvGeometry& g, const Tensor& x,
                        const Tensor& w2, const Tensor& y2,
                        const Tensor* relu_bias, ConvAttrs* keep) {
  if (GoesDirect(g)) {
    return CountDirect(cuda::DirectConv2D(
        x.dtype(), x.raw_data(), w2.raw_data(),
        relu_bias != nullptr ? relu_bias->raw_data() : nullptr, g,
        internal::ProductsReadBf16(x), y2.raw_data(), x.device().index));
  }
  MT_ASSIGN_OR_RETURN(const GemmOperand w, GemmOperand::Of(w2));
  return ForEachGpuChunk(
      g, x, !internal::ProductsReadBf16(x),
      [&](int64_t i0, int64_t images, Tensor& cols) -> absl::Status {
        MT_ASSIGN_OR_RETURN(const GemmOperand c,
                            GpuColumns(g, x, i0, images, cols));
        if (keep != nullptr && images == g.n) {
          const int64_t bytes =
              images * g.pixels() * ColumnStride(g, x) *
              (c.bf16() ? int64_t{2}
                        : static_cast<int64_t>(DTypeSize(x.dtype())));
          keep->columns_reserved =
              KeptColumns().TryReserve(x.device().index, bytes);
          if (keep->columns_reserved != nullptr) keep->columns = c;
        }
        MT_ASSIGN_OR_RETURN(Tensor out,
                            y2.SliceRows(i0 * g.pixels(), images * g.pixels()));
        if (relu_bias == nullptr) {
          return internal::Gemm(c, w, false, false, 1.0, 0.0, out);
        }
        MT_ASSIGN_OR_RETURN(
            const bool fused,
            internal::FusedGemmBias(c, w, false, false, *relu_bias, true, out));
        if (fused) return absl::OkStatus();
        MT_RETURN_IF_ERROR(internal::Gemm(c, w, false, false, 1.0, 0.0, out));
        return internal::BiasRelu(out, *relu_bias, out);
      });
}

// dw2 = sum over chunks of cols^T @ dy (accumulated by the GEMM, beta 1
// after the first chunk: a fixed order); dx = col2im(dy @ w2^T), every
// element of dx written. Either output may be undefined (not needed).
// x's values are read only for dw2; without it x may be any tensor of its
// dtype and device (Conv2DTranspose's forward passes the filter).
// `saved` (may be undefined): the forward's columns of the whole batch,
// read instead of im2col when the batch is one chunk here too and the
// products read the same type as when they were made.
absl::Status GpuBackward(const ConvGeometry& g, const Tensor& x,
                         const Tensor& w2, const Tensor& dy2, Tensor* dx,
                         Tensor* dw2, const GemmOperand& saved) {
  const int device = x.device().index;
  if (dw2 != nullptr && GoesDirect(g)) {
    MT_RETURN_IF_ERROR(CountDirect(cuda::DirectConv2DFilterGrad(
        x.dtype(), x.raw_data(), dy2.raw_data(), g,
        internal::ProductsReadBf16(x), dw2->raw_data(), device)));
    dw2 = nullptr;
    if (dx == nullptr) return absl::OkStatus();
  }
  if (dx != nullptr && GoesImplicit(g, dy2, w2)) {
    MT_RETURN_IF_ERROR(cuda::ConvInputGrad(
        x.dtype(), dy2.raw_data(), w2.raw_data(), g, dx->raw_data(), device));
    implicit_input_grad_calls.fetch_add(1, std::memory_order_relaxed);
    dx = nullptr;
    if (dw2 == nullptr) return absl::OkStatus();
  }
  GemmOperand w;
  if (dx != nullptr) {
    MT_ASSIGN_OR_RETURN(w, GemmOperand::Of(w2));
  }
  // Also only in the precision they were made in: a gradient taken after
  // the precision changed reads dy as that precision says.
  const bool reuse = saved.defined() && GpuChunkImages(g, x) >= g.n &&
                     saved.bf16() == internal::ProductsReadBf16(x);
  // f32 columns: im2col's (unless bf16 or saved) and dx's product before
  // col2im.
  const bool dtype_cols =
      dx != nullptr || (!internal::ProductsReadBf16(x) && !reuse);
  return ForEachGpuChunk(
      g, x, dtype_cols,
      [&](int64_t i0, int64_t images, Tensor& cols) -> absl::Status {
        MT_ASSIGN_OR_RETURN(Tensor dy_rows, dy2.SliceRows(i0 * g.pixels(),
                                                          images * g.pixels()));
        MT_ASSIGN_OR_RETURN(const GemmOperand dy, GemmOperand::Of(dy_rows));
        if (dw2 != nullptr) {
          GemmOperand c = saved;
          if (!reuse) {
            MT_ASSIGN_OR_RETURN(c, GpuColumns(g, x, i0, images, cols));
          }
          MT_RETURN_IF_ERROR(internal::Gemm(c, dy, true, false, 1.0,
                                            i0 == 0 ? 0.0 : 1.0, *dw2));
        }
        if (dx != nullptr) {
          MT_ASSIGN_OR_RETURN(Tensor dense, DenseColumns(g, cols));
          MT_RETURN_IF_ERROR(
              internal::Gemm(dy, w, false, true, 1.0, 0.0, dense));
          MT_RETURN_IF_ERROR(cuda::Col2Im(x.dtype(), dense.raw_data(), g,
                                          images, ImageAt(*dx, g, i0), device));
        }
        return absl::OkStatus();
      });
}

}  // namespace

namespace internal {

void SetConvGpuColumnBytes(int64_t bytes) {
  gpu_column_bytes.store(bytes > 0 ? bytes : kGpuColumnBytes);
}

void SetConvGpuKeptColumnBytes(int64_t bytes) {
  KeptColumns().set_limit(bytes > 0 ? bytes : kGpuKeptColumnBytes);
}

int64_t ConvGpuKeptColumnBytes(int gpu) { return KeptColumns().reserved(gpu); }

void SetConvGpuDirect(bool enabled) { gpu_direct.store(enabled); }

int64_t DirectConvCalls() {
  return direct_calls.load(std::memory_order_relaxed);
}

int64_t FusedConvMaxPoolCalls() {
  return fused_pool_calls.load(std::memory_order_relaxed);
}

void SetConvGpuImplicitInputGrad(bool enabled) {
  gpu_implicit_input_grad.store(enabled);
}

int64_t ImplicitInputGradCalls() {
  return implicit_input_grad_calls.load(std::memory_order_relaxed);
}

}  // namespace internal

MT_REGISTER(InternalSwitch,
            {.name = "conv_gpu_direct",
             .doc = "the direct conv kernels (first layers, fused max pool) "
                    "where they take a conv; off: im2col and GEMMs",
             .set = &internal::SetConvGpuDirect,
             .calls = &internal::DirectConvCalls});
MT_REGISTER(InternalSwitch,
            {.name = "conv_gpu_implicit_input_grad",
             .doc = "fp32 conv input gradients as an implicit GEMM; off: a "
                    "GEMM and col2im",
             .set = &internal::SetConvGpuImplicitInputGrad,
             .calls = &internal::ImplicitInputGradCalls});

namespace {

// Keeps the Winograd path's transform v of x in `attrs` for the filter
// gradient if the budget for kept columns grants its bytes (the CPU's path,
// which tests use, under a key of its own).
void KeepWinogradInput(const Tensor& x, const Tensor& v, ConvAttrs& attrs) {
  attrs.columns_reserved = KeptColumns().TryReserve(
      x.device().is_cuda() ? x.device().index : -1,
      v.num_elements() * static_cast<int64_t>(DTypeSize(v.dtype())));
  if (attrs.columns_reserved != nullptr) attrs.winograd_input = v;
}

// Conv2D's forward, unrecorded; with `relu_bias`, relu(conv + bias). When
// a recording tape watches the filter, *attrs gets what its gradient reads
// again (GpuForward's columns on GPUs, the Winograd transform of x).
absl::StatusOr<Tensor> ConvForward(const ConvGeometry& g, const Tensor& x,
                                   const Tensor& filter,
                                   const Tensor* relu_bias, ConvAttrs* attrs) {
  // The GEMMs (beta 0) write every output; zeros only for an empty patch.
  const bool gemm = g.n * g.pixels() * g.o > 0 && g.patch() > 0;
  const Shape y_shape{g.n, g.oh, g.ow, g.o};
  MT_ASSIGN_OR_RETURN(Tensor y,
                      gemm ? Tensor::Empty(x.dtype(), y_shape, x.device())
                           : Tensor::Zeros(x.dtype(), y_shape, x.device()));
  if (gemm && GoesWinograd(g, x)) {
    // Only the filter's gradient reads v.
    const bool keep = attrs != nullptr && tape::AnyRecordingTapeWatches(filter);
    Tensor v;
    MT_RETURN_IF_ERROR(internal::KernelError(
        relu_bias != nullptr ? "Conv2DBiasRelu" : "Conv2D",
        internal::WinogradConv2D(g, x, filter, relu_bias, y,
                                 keep ? &v : nullptr),
        {&x, &filter}));
    if (keep) KeepWinogradInput(x, v, *attrs);
    return y;
  }
  if (gemm && x.device().is_cuda()) {
    MT_ASSIGN_OR_RETURN(Tensor w2, filter.Reshaped({g.patch(), g.o}));
    MT_ASSIGN_OR_RETURN(Tensor y2, y.Reshaped({g.n * g.pixels(), g.o}));
    // Columns only for a filter gradient: none kept unrecorded (evaluation,
    // an inner tape's gradient) or for a frozen filter.
    MT_RETURN_IF_ERROR(internal::KernelError(
        relu_bias != nullptr ? "Conv2DBiasRelu" : "Conv2D",
        GpuForward(g, x, w2, y2, relu_bias,
                   tape::AnyRecordingTapeWatches(filter) ? attrs : nullptr),
        {&x, &filter}));
    return y;
  }
  if (gemm) {
    MT_ASSIGN_OR_RETURN(Tensor w2, filter.Reshaped({g.patch(), g.o}));
    MT_ASSIGN_OR_RETURN(Tensor y2, y.Reshaped({g.n * g.pixels(), g.o}));
    MT_ASSIGN_OR_RETURN(const GemmOperand w, GemmOperand::Of(w2));
    MT_RETURN_IF_ERROR(ForEachChunk(
        g, x.dtype(), ChunkFor(g, x.dtype()),
        [&](int64_t, int64_t i0, int64_t images, Tensor& cols) -> absl::Status {
          MT_DISPATCH_FLOAT(x.dtype(), T,
                            Im2Col<T>(g, x.data<T>() + i0 * g.h * g.w * g.c,
                                      images, cols.data<T>()));
          MT_ASSIGN_OR_RETURN(
              Tensor out, y2.SliceRows(i0 * g.pixels(), images * g.pixels()));
          MT_ASSIGN_OR_RETURN(const GemmOperand c, GemmOperand::Of(cols));
          return internal::Gemm(c, w, false, false, 1.0, 0.0, out,
                                /*parallel=*/false);
        }));
  }
  // The CPU (and an empty product): Conv2D then BiasAddRelu's pass, in
  // place, so the fused op's numbers are exactly its parts'.
  if (relu_bias != nullptr)
    MT_RETURN_IF_ERROR(internal::BiasRelu(y, *relu_bias, y));
  return y;
}

// A conv's bias for `op`: x's floating dtype and device, one value per
// filter.
absl::Status CheckConvBias(const char* op, const ConvGeometry& g,
                           const Tensor& x, const Tensor& filter,
                           const Tensor& bias) {
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(op, {&x, &filter, &bias}));
  if (bias.rank() != 1 || bias.dim(0) != g.o) {
    return OpError(op, "bias must be 1-D with one value per filter",
                   {&filter, &bias});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> Conv2D(const Tensor& x, const Tensor& filter,
                              const Conv2DOptions& options) {
  MT_ASSIGN_OR_RETURN(const int64_t groups, ConvGroups(x, filter));
  if (groups > 1) return GroupedConv2D(x, filter, options, groups);
  MT_ASSIGN_OR_RETURN(ConvGeometry g, Geometry(x, filter, options));
  ConvAttrs attrs{g};
  MT_ASSIGN_OR_RETURN(Tensor y, ConvForward(g, x, filter, nullptr, &attrs));
  tape::RecordOperation(kConv2DOp, {x, filter}, {y}, std::move(attrs));
  return y;
}

absl::StatusOr<Tensor> Conv2DBiasRelu(const Tensor& x, const Tensor& filter,
                                      const Tensor& bias,
                                      const Conv2DOptions& options) {
  MT_ASSIGN_OR_RETURN(const int64_t groups, ConvGroups(x, filter));
  if (groups > 1) {
    MT_ASSIGN_OR_RETURN(const Tensor y,
                        GroupedConv2D(x, filter, options, groups));
    return BiasAddRelu(y, bias);
  }
  MT_ASSIGN_OR_RETURN(ConvGeometry g, Geometry(x, filter, options));
  MT_RETURN_IF_ERROR(CheckConvBias("Conv2DBiasRelu", g, x, filter, bias));
  ConvAttrs attrs{g};
  MT_ASSIGN_OR_RETURN(Tensor y, ConvForward(g, x, filter, &bias, &attrs));
  tape::RecordOperation(kConv2DBiasReluOp, {x, filter, bias}, {y},
                        std::move(attrs));
  return y;
}

namespace {

// The fused Conv2DMaxPool's record: the pool's winners over the
// convolution's output, and the convolution's record (its geometry; on the
// Winograd path, `winograd`, the kept transform of x and its reservation).
struct ConvPoolAttrs {
  Tensor argmax;
  bool winograd = false;
  ConvAttrs conv;
};

// The pool Conv2DMaxPool fuses: 2x2, stride 2, VALID.
bool FusablePool(const Pool2DOptions& p) {
  return p.ksize_h == 2 && p.ksize_w == 2 && p.stride_h == 2 &&
         p.stride_w == 2 && p.padding == Padding::kValid;
}

// Conv2DMaxPool, and with `relu_bias` (non-null) relu(... + bias) after
// it: one op where the pooled direct kernel takes the convolution, else
// the ops in turn.
absl::StatusOr<Tensor> ConvMaxPool(const Tensor& x, const Tensor& filter,
                                   const Tensor* relu_bias,
                                   const Conv2DOptions& options,
                                   const Pool2DOptions& pool) {
  MT_ASSIGN_OR_RETURN(const int64_t groups, ConvGroups(x, filter));
  if (groups > 1) {
    MT_ASSIGN_OR_RETURN(const Tensor conv,
                        GroupedConv2D(x, filter, options, groups));
    MT_ASSIGN_OR_RETURN(Tensor y, MaxPool2D(conv, pool));
    if (relu_bias == nullptr) return y;
    return BiasAddRelu(y, *relu_bias);
  }
  MT_ASSIGN_OR_RETURN(const ConvGeometry g, Geometry(x, filter, options));
  if (relu_bias != nullptr) {
    MT_RETURN_IF_ERROR(
        CheckConvBias("Conv2DMaxPoolBiasRelu", g, x, filter, *relu_bias));
  }
  const bool fusable = FusablePool(pool) && g.n > 0 && g.oh >= 2 && g.ow >= 2 &&
                       g.o > 0 && g.patch() > 0;
  const bool direct = fusable && x.device().is_cuda() && GoesDirect(g);
  // The winners are int32 offsets within an image (MaxPool2D's).
  const bool winograd =
      fusable && !direct && GoesWinograd(g, x) &&
      g.oh * g.ow * g.o <= std::numeric_limits<int32_t>::max();
  if (!direct && !winograd) {
    MT_ASSIGN_OR_RETURN(Tensor conv, Conv2D(x, filter, options));
    MT_ASSIGN_OR_RETURN(Tensor y, MaxPool2D(conv, pool));
    if (relu_bias == nullptr) return y;
    return BiasAddRelu(y, *relu_bias);
  }
  const Shape shape{g.n, g.oh / 2, g.ow / 2, g.o};
  MT_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(x.dtype(), shape, x.device()));
  // The winners only for a gradient, as MaxPool2D.
  const bool record = tape::AnyTapeActive();
  Tensor argmax;
  if (record) {
    MT_ASSIGN_OR_RETURN(argmax, Tensor::Empty(DType::kI32, shape, x.device()));
  }
  const char* op =
      relu_bias != nullptr ? "Conv2DMaxPoolBiasRelu" : "Conv2DMaxPool";
  ConvPoolAttrs attrs{argmax, winograd, ConvAttrs{g}};
  if (direct) {
    MT_RETURN_IF_ERROR(internal::KernelError(
        op,
        CountDirect(cuda::DirectConv2DMaxPool(
            x.dtype(), x.raw_data(), filter.raw_data(),
            relu_bias != nullptr ? relu_bias->raw_data() : nullptr, g,
            internal::ProductsReadBf16(x), y.raw_data(),
            record ? argmax.data<int32_t>() : nullptr, x.device().index)),
        {&x, &filter}));
  } else {
    const bool keep = record && tape::AnyRecordingTapeWatches(filter);
    Tensor v;
    MT_RETURN_IF_ERROR(internal::KernelError(
        op,
        internal::WinogradConv2DMaxPool(g, x, filter, relu_bias, y,
                                        record ? &argmax : nullptr,
                                        keep ? &v : nullptr),
        {&x, &filter}));
    if (keep) KeepWinogradInput(x, v, attrs.conv);
  }
  fused_pool_calls.fetch_add(1, std::memory_order_relaxed);
  if (record && relu_bias == nullptr) {
    tape::RecordOperation(kConv2DMaxPoolOp, {x, filter}, {y}, std::move(attrs));
  } else if (record) {
    tape::RecordOperation(kConv2DMaxPoolBiasReluOp, {x, filter, *relu_bias},
                          {y}, std::move(attrs));
  }
  return y;
}

}  // namespace

absl::StatusOr<Tensor> Conv2DMaxPool(const Tensor& x, const Tensor& filter,
                                     const Conv2DOptions& options,
                                     const Pool2DOptions& pool) {
  return ConvMaxPool(x, filter, nullptr, options, pool);
}

absl::StatusOr<Tensor> Conv2DMaxPoolBiasRelu(const Tensor& x,
                                             const Tensor& filter,
                                             const Tensor& bias,
                                             const Conv2DOptions& options,
                                             const Pool2DOptions& pool) {
  return ConvMaxPool(x, filter, &bias, options, pool);
}

namespace {

// dfilter = cols^T @ dy and dx = col2im(dy @ filter^T), chunk by chunk:
// (*grads)[0] for x where needs[0], [1] for the filter where needs[1].
// x's values are read only for the filter's gradient: without needs[1] x
// may be undefined (Conv2DTranspose's forward has no x), the filter then
// giving the dtype and device and the geometry x's shape.
absl::Status ConvGrads(const ConvAttrs& attrs, const Tensor& x,
                       const Tensor& filter, const Tensor& dy,
                       absl::Span<const bool> needs, Grads* grads) {
  const ConvGeometry& geo = attrs.geo;
  const Tensor& operand = x.defined() ? x : filter;
  const DType dt = operand.dtype();
  const Shape x_shape{geo.n, geo.h, geo.w, geo.c};
  // Nothing empty here (WinogradConvTakes).
  if (GoesWinograd(geo, operand) && dy.device() == operand.device()) {
    if (needs[0]) {
      MT_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(dt, x_shape, dy.device()));
      MT_RETURN_IF_ERROR(internal::KernelError(
          "Conv2DBackpropInput",
          internal::WinogradConv2DInputGrad(geo, dy, filter, dx), {&dy}));
      (*grads)[0] = std::move(dx);
    }
    if (needs[1]) {
      MT_ASSIGN_OR_RETURN(Tensor dw,
                          Tensor::Empty(dt, filter.shape(), dy.device()));
      MT_RETURN_IF_ERROR(
          internal::KernelError("Conv2DBackpropFilter",
                                internal::WinogradConv2DFilterGrad(
                                    geo, x, dy, dw, attrs.winograd_input),
                                {&dy}));
      (*grads)[1] = std::move(dw);
    }
    return absl::OkStatus();
  }
  if (dy.device().is_cuda()) {
    // The GEMMs write all of dw and col2im all of dx; zeros otherwise.
    const bool gemm = dy.num_elements() > 0 && geo.patch() > 0;
    auto make = [&](const Shape& shape) {
      return gemm ? Tensor::Empty(dt, shape, dy.device())
                  : Tensor::Zeros(dt, shape, dy.device());
    };
    Tensor dx, dw, dw2;
    if (needs[0]) {
      MT_ASSIGN_OR_RETURN(dx, make(x_shape));
    }
    if (needs[1]) {
      MT_ASSIGN_OR_RETURN(dw, make(filter.shape()));
      MT_ASSIGN_OR_RETURN(dw2, dw.Reshaped({geo.patch(), geo.o}));
    }
    if (gemm) {
      MT_ASSIGN_OR_RETURN(Tensor w2, filter.Reshaped({geo.patch(), geo.o}));
      MT_ASSIGN_OR_RETURN(Tensor dy2,
                          dy.Reshaped({geo.n * geo.pixels(), geo.o}));
      MT_RETURN_IF_ERROR(internal::KernelError(
          "Conv2DBackprop",
          GpuBackward(geo, operand, w2, dy2, needs[0] ? &dx : nullptr,
                      needs[1] ? &dw2 : nullptr, attrs.columns),
          {&dy}));
    }
    if (needs[0]) (*grads)[0] = std::move(dx);
    if (needs[1]) (*grads)[1] = std::move(dw);
    return absl::OkStatus();
  }
  MT_RETURN_IF_ERROR(internal::CheckHost("Conv2DBackprop", {&dy}));
  Tensor dx, dw;
  if (needs[0]) dx = Tensor::HostZeros(dt, x_shape);
  if (needs[1]) dw = Tensor::HostZeros(dt, filter.shape());
  if (dy.num_elements() > 0 && geo.patch() > 0) {
    MT_ASSIGN_OR_RETURN(Tensor w2, filter.Reshaped({geo.patch(), geo.o}));
    MT_ASSIGN_OR_RETURN(Tensor dy2, dy.Reshaped({geo.n * geo.pixels(), geo.o}));
    GemmOperand w;
    if (needs[0]) {
      MT_ASSIGN_OR_RETURN(w, GemmOperand::Of(w2));
    }
    Tensor dw2;
    if (needs[1]) dw2 = *dw.Reshaped({geo.patch(), geo.o});
    const int64_t image_elems = geo.h * geo.w * geo.c;
    const int64_t chunk = ChunkFor(geo, dt);
    const int64_t chunks = (geo.n + chunk - 1) / chunk;
    // One filter-gradient partial per chunk, summed in chunk order
    // afterwards: the result does not depend on which thread ran which
    // chunk or when. The chunk size does depend on the thread count
    // (ChunkFor), so 1 and 2 CPU replicas may differ in the last bits.
    Tensor partials;
    if (needs[1])
      partials = Tensor::HostEmpty(dt, {chunks * geo.patch(), geo.o});
    MT_RETURN_IF_ERROR(ForEachChunk(
        geo, dt, chunk,
        [&](int64_t c, int64_t i0, int64_t images,
            Tensor& cols) -> absl::Status {
          MT_ASSIGN_OR_RETURN(
              Tensor dy_rows,
              dy2.SliceRows(i0 * geo.pixels(), images * geo.pixels()));
          MT_ASSIGN_OR_RETURN(const GemmOperand dyo, GemmOperand::Of(dy_rows));
          if (needs[1]) {
            MT_DISPATCH_FLOAT(dt, T,
                              Im2Col<T>(geo, x.data<T>() + i0 * image_elems,
                                        images, cols.data<T>()));
            MT_ASSIGN_OR_RETURN(
                Tensor part, partials.SliceRows(c * geo.patch(), geo.patch()));
            MT_ASSIGN_OR_RETURN(const GemmOperand co, GemmOperand::Of(cols));
            MT_RETURN_IF_ERROR(internal::Gemm(co, dyo, true, false, 1.0, 0.0,
                                              part, /*parallel=*/false));
          }
          if (needs[0]) {
            MT_RETURN_IF_ERROR(internal::Gemm(dyo, w, false, true, 1.0, 0.0,
                                              cols, /*parallel=*/false));
            MT_DISPATCH_FLOAT(dt, T,
                              Col2Im<T>(geo, cols.data<T>(), images,
                                        dx.data<T>() + i0 * image_elems));
          }
          return absl::OkStatus();
        }));
    if (needs[1]) {
      const int64_t size = geo.patch() * geo.o;
      MT_DISPATCH_FLOAT(dt, T, {
        const T* p = partials.data<T>();
        T* out = dw2.data<T>();
        ParallelFor(size, 1 << 14, [&](int64_t begin, int64_t end) {
          for (int64_t c = 0; c < chunks; ++c) {
            for (int64_t i = begin; i < end; ++i) out[i] += p[c * size + i];
          }
        });
      });
    }
  }
  if (needs[0]) (*grads)[0] = std::move(dx);
  if (needs[1]) (*grads)[1] = std::move(dw);
  return absl::OkStatus();
}

MT_OP(kConv2DOp, "Conv2D",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) {
        return ConvGrads(std::any_cast<const ConvAttrs&>(op.attrs),
                         op.inputs[0], op.inputs[1], g[0], needs, grads);
      });

// Conv2DTranspose's gradients from its output's gradient dy: x's is the
// convolution's forward of dy, the filter's that convolution's filter
// gradient with dy as its input and x as its output's gradient.
MT_OP(kConv2DTransposeOp, "Conv2DTranspose",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        const auto& attrs = std::any_cast<const ConvAttrs&>(op.attrs);
        const Tensor& x = op.inputs[0];
        const Tensor& filter = op.inputs[1];
        if (needs[0]) {
          MT_ASSIGN_OR_RETURN(Tensor dx, ConvForward(attrs.geo, g[0], filter,
                                                     nullptr, nullptr));
          (*grads)[0] = std::move(dx);
        }
        if (!needs[1]) return absl::OkStatus();
        const bool filter_only[] = {false, true};
        return ConvGrads(ConvAttrs{attrs.geo}, g[0], filter, x, filter_only,
                         grads);
      });

// The fused Conv2DMaxPool's gradients from the pool output's gradient dy:
// the filter's from dy and the pool's winners (one kernel), x's through
// the convolution's output gradient (the pool's backward) and Conv2D's.
// (*grads)[0] for x where needs[0], [1] for the filter where needs[1].
absl::Status ConvPoolGrads(const ConvPoolAttrs& attrs, const Tensor& x,
                           const Tensor& filter, const Tensor& dy,
                           absl::Span<const bool> needs, Grads* grads) {
  const ConvGeometry& geo = attrs.conv.geo;
  const int device = dy.device().index;
  const Shape conv_shape{geo.n, geo.oh, geo.ow, geo.o};
  const ImageWindow pool_window =
      MakeImageWindow(conv_shape, 2, 2, 2, 2, Padding::kValid);
  if (attrs.winograd) {
    if (!needs[0] && !needs[1]) return absl::OkStatus();  // The bias's alone.
    // The convolution's output gradient, then both gradients on the
    // Winograd path (the filter's from the kept transform of x).
    MT_ASSIGN_OR_RETURN(
        Tensor dconv,
        internal::MaxPool2DGrad(pool_window, attrs.argmax, dy, conv_shape));
    return ConvGrads(attrs.conv, x, filter, dconv, needs, grads);
  }
  if (needs[1]) {
    MT_ASSIGN_OR_RETURN(Tensor dw,
                        Tensor::Empty(x.dtype(), filter.shape(), dy.device()));
    MT_RETURN_IF_ERROR(internal::KernelError(
        "Conv2DMaxPoolBackprop",
        CountDirect(cuda::DirectConv2DMaxPoolFilterGrad(
            x.dtype(), x.raw_data(), dy.raw_data(),
            attrs.argmax.data<int32_t>(), geo, internal::ProductsReadBf16(x),
            dw.raw_data(), device)),
        {&dy}));
    fused_pool_calls.fetch_add(1, std::memory_order_relaxed);
    (*grads)[1] = std::move(dw);
  }
  if (!needs[0]) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(
      Tensor dconv,
      internal::MaxPool2DGrad(pool_window, attrs.argmax, dy, conv_shape));
  const bool input_only[] = {true, false};
  return ConvGrads(ConvAttrs{geo}, x, filter, dconv, input_only, grads);
}

MT_OP(kConv2DMaxPoolOp, "Conv2DMaxPool",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) {
        return ConvPoolGrads(std::any_cast<const ConvPoolAttrs&>(op.attrs),
                             op.inputs[0], op.inputs[1], g[0], needs, grads);
      });

// BiasAddRelu's masked pass (dz, and the bias sum with it), then the fused
// Conv2DMaxPool's.
MT_OP(kConv2DMaxPoolBiasReluOp, "Conv2DMaxPoolBiasRelu",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        Tensor dz, db;
        MT_RETURN_IF_ERROR(internal::BiasReluGrads(
            op.outputs[0], g[0], op.inputs[2].shape(), needs[2], &dz, &db));
        MT_RETURN_IF_ERROR(
            ConvPoolGrads(std::any_cast<const ConvPoolAttrs&>(op.attrs),
                          op.inputs[0], op.inputs[1], dz, needs, grads));
        if (needs[2]) (*grads)[2] = std::move(db);
        return absl::OkStatus();
      });

// BiasAddRelu's masked pass (dz, and the bias sum with it), then Conv2D's.
MT_OP(kConv2DBiasReluOp, "Conv2DBiasRelu",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        Tensor dz, db;
        MT_RETURN_IF_ERROR(internal::BiasReluGrads(
            op.outputs[0], g[0], op.inputs[2].shape(), needs[2], &dz, &db));
        MT_RETURN_IF_ERROR(ConvGrads(std::any_cast<const ConvAttrs&>(op.attrs),
                                     op.inputs[0], op.inputs[1], dz, needs,
                                     grads));
        if (needs[2]) (*grads)[2] = std::move(db);
        return absl::OkStatus();
      });

}  // namespace

absl::StatusOr<Tensor> Conv2DTranspose(const Tensor& x, const Tensor& filter,
                                       int64_t out_h, int64_t out_w,
                                       const Conv2DOptions& options) {
  constexpr const char* kOp = "Conv2DTranspose";
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x, &filter}));
  if (x.rank() != 4 || filter.rank() != 4) {
    return OpError(kOp, "need input NHWC and filter [KH,KW,out,in] (rank 4)",
                   {&x, &filter});
  }
  if (x.dim(3) != filter.dim(3)) {
    return OpError(kOp, "input channels differ from the filter's last axis",
                   {&x, &filter});
  }
  if (out_h < 0 || out_w < 0 || options.stride_h < 1 || options.stride_w < 1 ||
      options.dilation_h < 1 || options.dilation_w < 1) {
    return OpError(kOp, "output sizes must be >= 0, strides and dilations >= 1",
                   {&x, &filter});
  }
  // The convolution it is the adjoint of: [N,out_h,out_w,O] -> x's shape.
  const ConvGeometry g{
      MakeImageWindow({x.dim(0), out_h, out_w, filter.dim(2)}, filter.dim(0),
                      filter.dim(1), options.stride_h, options.stride_w,
                      options.padding, options.dilation_h, options.dilation_w),
      filter.dim(3)};
  if (g.oh != x.dim(1) || g.ow != x.dim(2)) {
    return OpError(
        kOp,
        absl::StrCat("a ", out_h, "x", out_w, " output convolves to ", g.oh,
                     "x", g.ow, ", not the input's ", x.dim(1), "x", x.dim(2)),
        {&x, &filter});
  }
  ConvAttrs attrs{g};
  Grads out(2);
  const bool input_only[] = {true, false};
  MT_RETURN_IF_ERROR(ConvGrads(attrs, Tensor(), filter, x, input_only, &out));
  Tensor y = std::move(*out[0]);
  tape::RecordOperation(kConv2DTransposeOp, {x, filter}, {y}, std::move(attrs));
  return y;
}

}  // namespace mirrortrain::ops
