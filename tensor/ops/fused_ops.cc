#include "tensor/ops/fused_ops.h"

#include <algorithm>
#include <any>
#include <atomic>
#include <optional>
#include <utility>
#include <vector>

#include "tensor/cuda/cuda_backend.h"
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
                                      const Tensor& bias,
                                      OutputRounding rounding) {
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
  // The epilogue keeps the relu mask when a gradient may be taken, for the
  // next product's gradient to apply (ReluProductHandOff).
  MT_ASSIGN_OR_RETURN(
      const bool fused,
      internal::FusedGemmBias(p.a, p.b, false, false, bias,
                              /*relu=*/true, y, rounding,
                              tape::AnyTapeActive() ? &p.relu_mask : nullptr));
  if (!fused) {
    // The product, then bias and relu in one pass over it, in place: the
    // numbers of MatMul then BiasAddRelu.
    MT_RETURN_IF_ERROR(internal::Gemm(p.a, p.b, false, false, 1.0, 0.0, y));
    MT_RETURN_IF_ERROR(internal::BiasRelu(y, bias, y));
  }
  MT_RETURN_IF_ERROR(RoundOutput(y, rounding));
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

// What a MatMulBiasRelu's gradient starts from: dz, its output's gradient
// masked by y > 0, in the form its products read, and the bias gradient.
struct ReluGradient {
  internal::GemmOperand dz;
  Tensor db;
};

std::atomic<int64_t> relu_hand_offs{0}, fused_relu_hand_offs{0};

// relu's masked pass of the MatMulBiasRelu record `op` for its output's
// gradient dy; the bias gradient only with `need_db` (not for a frozen
// bias).
absl::StatusOr<ReluGradient> MaskedGradient(const OpRecord& op,
                                            const Tensor& dy, bool need_db) {
  const auto& p = std::any_cast<const internal::SavedProduct&>(op.attrs);
  const Tensor& y = op.outputs[0];
  const Shape& bias_shape = op.inputs[2].shape();
  ReluGradient out;
  if (p.a.bf16() && y.device().is_cuda() && !tape::AnyTapeRecording()) {
    // dz only feeds the two bf16 products: the masked pass writes it as
    // their operand, not as f32 values converted in a second pass.
    MT_ASSIGN_OR_RETURN(
        out.dz, internal::GemmOperand::Bf16Storage(y.shape(), y.device()));
    MT_RETURN_IF_ERROR(GpuBiasReluGrads(y, dy, bias_shape, need_db,
                                        out.dz.bf16_storage(),
                                        /*dz_bf16=*/true, &out.db));
    return out;
  }
  Tensor dz;
  MT_RETURN_IF_ERROR(
      internal::BiasReluGrads(y, dy, bias_shape, need_db, &dz, &out.db));
  MT_ASSIGN_OR_RETURN(out.dz, internal::GemmOperand::Of(dz, p.a.bf16()));
  return out;
}

// The masked pass in the product's epilogue (cuBLASLt's DRELU_BGRAD with
// the mask the forward's epilogue kept); nullopt when cuBLASLt has no
// algorithm for it.
absl::StatusOr<std::optional<ReluGradient>> FusedMaskedProduct(
    const OpRecord& op, const internal::GemmOperand& g,
    const internal::GemmOperand& w, bool transpose_w) {
  const auto& p = std::any_cast<const internal::SavedProduct&>(op.attrs);
  const Tensor& y = op.outputs[0];
  const int64_t m = y.dim(0), n = y.dim(1), k = g.dim(1);
  // An empty product writes nothing (not even the bias gradient's zeros):
  // the unfused path's.
  if (m == 0 || n == 0 || k == 0) return std::nullopt;
  ReluGradient out;
  MT_ASSIGN_OR_RETURN(out.db, Tensor::Empty(DType::kF32, {n}, y.device()));
  Tensor dz;
  void* c = nullptr;
  if (p.a.bf16()) {
    MT_ASSIGN_OR_RETURN(
        out.dz, internal::GemmOperand::Bf16Storage(y.shape(), y.device()));
    c = out.dz.bf16_storage();
  } else {
    MT_ASSIGN_OR_RETURN(dz, Tensor::Empty(DType::kF32, y.shape(), y.device()));
    c = dz.raw_data();
  }
  const absl::Status s = cuda::GemmReluGrad(
      false, transpose_w, m, n, k, g.data(), g.leading_dim(), w.data(),
      w.leading_dim(), p.relu_mask->data(), out.db.raw_data(), c, p.a.bf16(),
      y.device().index, internal::PrecisionFor(g));
  if (absl::IsNotFound(s)) return std::nullopt;
  MT_RETURN_IF_ERROR(internal::KernelError("MatMulBiasRelu", s, {&y}));
  if (!p.a.bf16()) {
    MT_ASSIGN_OR_RETURN(out.dz, internal::GemmOperand::Of(dz, false));
  }
  fused_relu_hand_offs.fetch_add(1, std::memory_order_relaxed);
  return out;
}

MT_HANDING_OFF_OP(
    kMatMulBiasReluOp, "MatMulBiasRelu",
    [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
      const auto& p = std::any_cast<const internal::SavedProduct&>(op.attrs);
      // Handed over by the product that reads y, or the masked pass here.
      ReluGradient r;
      if (op.links != nullptr && op.links->received != nullptr) {
        r = std::any_cast<const ReluGradient&>(*op.links->received);
      } else if (tape::AnyTapeRecording()) {
        // An outer tape differentiates this backward pass: recorded ops.
        Tensor dz;
        MT_RETURN_IF_ERROR(internal::BiasReluGrads(
            op.outputs[0], g[0], op.inputs[2].shape(), needs[2], &dz, &r.db));
        MT_RETURN_IF_ERROR(internal::MatMulGrads(p, dz, needs, grads, nullptr));
        if (needs[2]) (*grads)[2] = std::move(r.db);
        return absl::OkStatus();
      } else {
        MT_ASSIGN_OR_RETURN(r, MaskedGradient(op, g[0], needs[2]));
      }
      MT_RETURN_IF_ERROR(
          internal::ProductGrads(p, r.dz, needs, grads, op.links));
      if (needs[2]) (*grads)[2] = std::move(r.db);
      return absl::OkStatus();
    });

}  // namespace

namespace internal {

absl::StatusOr<std::any> ReluProductHandOff(const OpRecord& producer,
                                            const GemmOperand& g,
                                            const GemmOperand& w,
                                            bool transpose_w) {
  if (producer.op != &kMatMulBiasReluOp || tape::AnyTapeRecording()) {
    return std::any();
  }
  const auto& p = std::any_cast<const SavedProduct&>(producer.attrs);
  // The product reads what the producer's products read: g in that form.
  if (g.bf16() != p.a.bf16()) return std::any();
  std::optional<ReluGradient> r;
  if (p.relu_mask != nullptr) {
    MT_ASSIGN_OR_RETURN(r, FusedMaskedProduct(producer, g, w, transpose_w));
  }
  if (!r.has_value()) {
    // The product, then the masked pass: the numbers without the hand-off.
    MT_ASSIGN_OR_RETURN(const Tensor dy, Product(g, w, false, transpose_w));
    // Whether the producer's bias needs a gradient is not known here.
    MT_ASSIGN_OR_RETURN(r, MaskedGradient(producer, dy, /*need_db=*/true));
  }
  relu_hand_offs.fetch_add(1, std::memory_order_relaxed);
  return std::any(*std::move(r));
}

int64_t ReluHandOffs() {
  return relu_hand_offs.load(std::memory_order_relaxed);
}

int64_t FusedReluHandOffs() {
  return fused_relu_hand_offs.load(std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace mirrortrain::ops
