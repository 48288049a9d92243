#include "tensor/ops/fused_ops.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/gradient_tape.h"
#include "tensor/op.h"
#include "tensor/ops/matmul.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/precision_ops.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kBiasAddReluOp);
MT_DECLARE_OP(kMatMulBiasReluOp);
}  // namespace
namespace {

// Rows of about this many elements form one unit of parallel work and one
// bias partial sum.
constexpr int64_t kBlockElements = 1 << 14;

int64_t BlockRows(int64_t cols) {
  return std::max<int64_t>(1, kBlockElements / std::max<int64_t>(cols, 1));
}

template <typename T>
void BiasReluForward(const T* x, const T* b, T* y, int64_t rows, int64_t cols) {
  ParallelFor(rows, BlockRows(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const T v = xr[c] + b[c];
        yr[c] = v > T(0) ? v : T(0);  // Relu's own formula.
      }
    }
  });
}

// dz = dy where y > 0 else 0; db = sum of dz over rows, block by block.
template <typename T>
void BiasReluBackward(const T* y, const T* dy, T* dz, T* db, int64_t rows,
                      int64_t cols) {
  const int64_t block = BlockRows(cols);
  const int64_t blocks = (rows + block - 1) / block;
  std::vector<T> partials(db != nullptr ? blocks * cols : 0, T(0));
  ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      T* part = db != nullptr ? partials.data() + blk * cols : nullptr;
      for (int64_t r = blk * block; r < std::min(rows, (blk + 1) * block);
           ++r) {
        const T* yr = y + r * cols;
        const T* gr = dy + r * cols;
        T* zr = dz + r * cols;
        for (int64_t c = 0; c < cols; ++c) zr[c] = yr[c] > T(0) ? gr[c] : T(0);
        if (part != nullptr) {
          for (int64_t c = 0; c < cols; ++c) part[c] += zr[c];
        }
      }
    }
  });
  if (db == nullptr) return;
  std::fill_n(db, cols, T(0));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t c = 0; c < cols; ++c) db[c] += partials[blk * cols + c];
  }
}

}  // namespace

namespace internal {

absl::Status BiasRelu(const Tensor& x, const Tensor& bias, Tensor& y) {
  const int64_t cols = bias.dim(0);
  const int64_t rows = cols == 0 ? 0 : x.num_elements() / cols;
  if (x.device().is_cuda()) {
    return internal::KernelError(
        "BiasAddRelu",
        cuda::BiasAddRelu(x.dtype(), x.raw_data(), bias.raw_data(),
                          y.raw_data(), rows, cols, x.device().index),
        {&x, &bias});
  }
  MT_DISPATCH_FLOAT(
      x.dtype(), T,
      BiasReluForward<T>(x.data<T>(), bias.data<T>(), y.data<T>(), rows, cols));
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<Tensor> BiasAddRelu(const Tensor& x, const Tensor& bias) {
  constexpr const char* kOp = "BiasAddRelu";
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x, &bias}));
  if (bias.rank() != 1 || x.rank() < 1 || x.dim(x.rank() - 1) != bias.dim(0)) {
    return internal::OpError(
        kOp, "bias must be 1-D and match x's last dimension", {&x, &bias});
  }
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  MT_RETURN_IF_ERROR(internal::BiasRelu(x, bias, y));
  tape::RecordOperation(kBiasAddReluOp, {x, bias}, {y});
  return y;
}

absl::StatusOr<Tensor> MatMulBiasRelu(const Tensor& x, const Tensor& kernel,
                                      const Tensor& bias) {
  constexpr const char* kOp = "MatMulBiasRelu";
  MT_RETURN_IF_ERROR(internal::CheckFloatingSame(kOp, {&x, &kernel, &bias}));
  if (x.rank() != 2 || kernel.rank() != 2 || bias.rank() != 1 ||
      x.dim(1) != kernel.dim(0) || bias.dim(0) != kernel.dim(1)) {
    return internal::OpError(kOp, "need x [m, k], kernel [k, n] and bias [n]",
                             {&x, &kernel, &bias});
  }
  const Shape shape = {x.dim(0), kernel.dim(1)};
  MT_ASSIGN_OR_RETURN(
      Tensor y, x.dim(1) == 0 ? Tensor::Zeros(x.dtype(), shape, x.device())
                              : Tensor::Empty(x.dtype(), shape, x.device()));
  MT_ASSIGN_OR_RETURN(internal::SavedProduct p,
                      internal::SaveProduct(x, kernel, false, false));
  MT_ASSIGN_OR_RETURN(const bool fused,
                      internal::FusedGemmBias(p.a, p.b, false, false, bias,
                                              /*relu=*/true, y));
  if (!fused) {
    // The product, then bias and relu in one pass over it, in place: the
    // numbers of MatMul then BiasAddRelu.
    MT_RETURN_IF_ERROR(internal::Gemm(p.a, p.b, false, false, 1.0, 0.0, y));
    MT_RETURN_IF_ERROR(internal::BiasRelu(y, bias, y));
  }
  tape::RecordOperation(kMatMulBiasReluOp, {x, kernel, bias}, {y},
                        std::move(p));
  return y;
}

namespace {

// The rows of relu(z + bias)'s output y: bias_shape[0] columns each.
int64_t BiasRows(const Tensor& y, const Shape& bias_shape) {
  return bias_shape[0] == 0 ? 0 : y.num_elements() / bias_shape[0];
}

// The masked pass on a GPU, into dz (f32 storage, or bfloat16 with
// `dz_bf16`), and db (allocated here) when `need_db`. It reads y's halves
// when y was rounded with them (a layer output that feeds a product).
absl::Status GpuBiasReluGrads(const Tensor& y, const Tensor& dy,
                              const Shape& bias_shape, bool need_db, void* dz,
                              bool dz_bf16, Tensor* db) {
  if (need_db) {
    MT_ASSIGN_OR_RETURN(*db, Tensor::Empty(y.dtype(), bias_shape, dy.device()));
  }
  const void* y_halves = internal::Bf16Halves(y);
  return internal::KernelError(
      "BiasAddReluGrad",
      cuda::BiasAddReluGrad(
          y.dtype(), y_halves != nullptr ? y_halves : y.raw_data(),
          y_halves != nullptr, dy.raw_data(), dz, dz_bf16,
          need_db ? db->raw_data() : nullptr, BiasRows(y, bias_shape),
          bias_shape[0], dy.device().index),
      {&dy});
}

}  // namespace

namespace internal {

absl::Status BiasReluGrads(const Tensor& y, const Tensor& dy,
                           const Shape& bias_shape, bool need_db, Tensor* dz,
                           Tensor* db) {
  const int64_t cols = bias_shape[0];
  const int64_t rows = BiasRows(y, bias_shape);
  MT_ASSIGN_OR_RETURN(*dz, Tensor::Empty(y.dtype(), y.shape(), dy.device()));
  if (dy.device().is_cuda()) {
    return GpuBiasReluGrads(y, dy, bias_shape, need_db, dz->raw_data(),
                            /*dz_bf16=*/false, db);
  }
  if (need_db) {
    MT_ASSIGN_OR_RETURN(*db, Tensor::Empty(y.dtype(), bias_shape, dy.device()));
  }
  MT_RETURN_IF_ERROR(internal::CheckHost("BiasAddReluGrad", {&dy}));
  MT_DISPATCH_FLOAT(
      y.dtype(), T,
      BiasReluBackward<T>(y.data<T>(), dy.data<T>(), dz->data<T>(),
                          need_db ? db->data<T>() : nullptr, rows, cols));
  return absl::OkStatus();
}

}  // namespace internal

namespace {

MT_OP(kBiasAddReluOp, "BiasAddRelu",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        Tensor dz, db;
        MT_RETURN_IF_ERROR(internal::BiasReluGrads(
            op.outputs[0], g[0], op.inputs[1].shape(), needs[1], &dz, &db));
        if (needs[0]) (*grads)[0] = std::move(dz);
        if (needs[1]) (*grads)[1] = std::move(db);
        return absl::OkStatus();
      });

MT_OP(kMatMulBiasReluOp, "MatMulBiasRelu",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        const auto& p = std::any_cast<const internal::SavedProduct&>(op.attrs);
        const Tensor& y = op.outputs[0];
        const Shape& bias_shape = op.inputs[2].shape();
        Tensor db;
        if (p.a.bf16() && y.device().is_cuda() && (needs[0] || needs[1]) &&
            !tape::AnyTapeRecording()) {
          // dz only feeds the two bf16 products: the masked pass writes it
          // as their operand, not as f32 values converted in a second pass.
          MT_ASSIGN_OR_RETURN(
              internal::GemmOperand dz,
              internal::GemmOperand::Bf16Storage(y.shape(), y.device()));
          MT_RETURN_IF_ERROR(GpuBiasReluGrads(y, g[0], bias_shape, needs[2],
                                              dz.bf16_storage(),
                                              /*dz_bf16=*/true, &db));
          MT_RETURN_IF_ERROR(internal::ProductGrads(p, dz, needs, grads));
        } else {
          Tensor dz;
          MT_RETURN_IF_ERROR(
              internal::BiasReluGrads(y, g[0], bias_shape, needs[2], &dz, &db));
          MT_RETURN_IF_ERROR(internal::MatMulGrads(p, dz, needs, grads));
        }
        if (needs[2]) (*grads)[2] = std::move(db);
        return absl::OkStatus();
      });

}  // namespace
}  // namespace mirrortrain::ops
