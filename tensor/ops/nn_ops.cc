#include "tensor/ops/nn_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "tensor/cuda/cuda_kernels.h"
#include "tensor/dropout_mask.h"
#include "tensor/gradient_tape.h"
#include "tensor/lane_reduce.h"
#include "tensor/op.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/op_util.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"
#include "tensor/vector_clones.h"
#include "tensor/vector_math.h"

namespace mirrortrain::ops {
namespace {
MT_DECLARE_OP(kBiasAddOp);
MT_DECLARE_OP(kSoftmaxOp);
MT_DECLARE_OP(kLogSoftmaxOp);
MT_DECLARE_OP(kSparseSoftmaxCrossEntropyWithLogitsOp);
MT_DECLARE_OP(kDropoutOp);
}  // namespace
namespace {

using internal::CheckFloatingSame;
using internal::CheckHost;
using internal::CheckSameDevice;
using internal::KernelError;
using internal::OpError;

struct XentAttrs {
  Tensor softmax;  // Saved forward softmax; the gradient is softmax - onehot.
};
struct DropoutAttrs {
  Tensor scaled_mask;  // 0 or 1/(1-rate) per element.
};

// Rows of the last axis: (outer, inner) sizes.
void Rows(const Tensor& x, int64_t* rows, int64_t* cols) {
  *cols = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  *rows = *cols == 0 ? 0 : x.num_elements() / *cols;
}

// exp(d) for d <= 0. Float uses vector_math.h's ExpF (within 2.5e-7
// relative, 0 below -87.3) so the row loop vectorises, as TensorFlow's
// Eigen softmax does; double calls std::exp except where the result is
// exactly 0 (masked attention logits of -1e9).
template <typename T>
T ExpOfNonPositive(T d) {
  if constexpr (std::is_same_v<T, float>) {
    return vmath::ExpF(d);
  } else {
    return d < T(-746) ? T(0) : std::exp(d);
  }
}

// Writes exp(x - max) of one row to e; returns the max and the sum (both
// over lanes, lane_reduce.h).
template <typename T>
MT_VECTOR_CLONES std::pair<T, T> ExpRow(const T* x, T* e, int64_t cols) {
  const T mx = LaneReduce<T>(
      cols, -std::numeric_limits<T>::infinity(),
      [&](int64_t c) { return x[c]; }, [](T a, T b) { return std::max(a, b); });
  for (int64_t c = 0; c < cols; ++c) e[c] = ExpOfNonPositive(x[c] - mx);
  return {mx, LaneSum<T>(cols, [&](int64_t c) { return e[c]; })};
}

// Rows per ParallelFor chunk for row-wise kernels of `cols` columns.
int64_t RowGrain(int64_t cols) { return RowsPerChunk(cols, 1 << 15); }

template <typename T>
void CpuSoftmax(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const auto [mx, sum] = ExpRow(xr, yr, cols);
      if (log) {
        // (x - max) - log(sum), as TensorFlow: x - (max + log(sum)) loses
        // log(sum) against a large max (logits of 1e8 gave 0, not -0.69).
        const T log_sum = std::log(sum);
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mx) - log_sum;
      } else {
        const T inv = T(1) / sum;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
      }
    }
  });
}

absl::StatusOr<Tensor> SoftmaxImpl(const OpDef& def, const Tensor& logits,
                                   bool log) {
  const char* op = def.name;
  MT_RETURN_IF_ERROR(CheckFloatingSame(op, {&logits}));
  if (logits.rank() < 1)
    return OpError(op, "logits must have rank >= 1", {&logits});
  MT_ASSIGN_OR_RETURN(
      Tensor y, Tensor::Empty(logits.dtype(), logits.shape(), logits.device()));
  int64_t rows, cols;
  Rows(logits, &rows, &cols);
  if (logits.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        op,
        cuda::Softmax(logits.dtype(), logits.raw_data(), y.raw_data(), rows,
                      cols, log, logits.device().index),
        {&logits}));
  } else {
    MT_DISPATCH_FLOAT(
        logits.dtype(), T,
        CpuSoftmax<T>(logits.data<T>(), y.data<T>(), rows, cols, log));
  }
  tape::RecordOperation(def, {logits}, {y});
  return y;
}

}  // namespace

absl::StatusOr<Tensor> BiasAdd(const Tensor& x, const Tensor& bias) {
  constexpr const char* kOp = "BiasAdd";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&x, &bias}));
  if (bias.rank() != 1 || x.rank() < 1 || x.dim(x.rank() - 1) != bias.dim(0)) {
    return OpError(kOp, "bias must be 1-D and match x's last dimension",
                   {&x, &bias});
  }
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  int64_t rows, cols;
  Rows(x, &rows, &cols);
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(
        KernelError(kOp,
                    cuda::BiasAdd(x.dtype(), x.raw_data(), bias.raw_data(),
                                  y.raw_data(), rows, cols, x.device().index),
                    {&x, &bias}));
    tape::RecordOperation(kBiasAddOp, {x, bias}, {y});
    return y;
  }
  MT_DISPATCH_FLOAT(x.dtype(), T, {
    const T* px = x.data<T>();
    const T* pb = bias.data<T>();
    T* py = y.data<T>();
    ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          py[r * cols + c] = px[r * cols + c] + pb[c];
        }
      }
    });
  });
  tape::RecordOperation(kBiasAddOp, {x, bias}, {y});
  return y;
}

namespace internal {

absl::StatusOr<Tensor> BiasGradient(const Tensor& dy, const Shape& bias_shape) {
  // The column-sum kernel is not recorded: while an outer tape records
  // (higher-order gradients) the recorded SumToShape runs instead.
  if (!dy.device().is_cuda() || tape::AnyTapeRecording()) {
    return SumToShape(dy, bias_shape);
  }
  int64_t rows, cols;
  Rows(dy, &rows, &cols);
  MT_ASSIGN_OR_RETURN(Tensor db,
                      Tensor::Empty(dy.dtype(), bias_shape, dy.device()));
  MT_RETURN_IF_ERROR(
      KernelError("BiasAddGrad",
                  cuda::ColumnSum(dy.dtype(), dy.raw_data(), rows, cols,
                                  db.raw_data(), dy.device().index),
                  {&dy}));
  return db;
}

}  // namespace internal

absl::StatusOr<Tensor> Softmax(const Tensor& logits) {
  return SoftmaxImpl(kSoftmaxOp, logits, /*log=*/false);
}

absl::StatusOr<Tensor> LogSoftmax(const Tensor& logits) {
  return SoftmaxImpl(kLogSoftmaxOp, logits, /*log=*/true);
}

absl::StatusOr<Tensor> SparseSoftmaxCrossEntropyWithLogits(
    const Tensor& logits, const Tensor& labels) {
  constexpr const char* kOp = "SparseSoftmaxCrossEntropyWithLogits";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&logits}));
  MT_RETURN_IF_ERROR(internal::CheckDefined(kOp, {&labels}));
  MT_RETURN_IF_ERROR(CheckSameDevice(kOp, {&logits, &labels}));
  MT_RETURN_IF_ERROR(internal::CheckInteger(kOp, labels, "labels"));
  if (logits.rank() != 2 || labels.rank() != 1 ||
      labels.dim(0) != logits.dim(0)) {
    return OpError(kOp, "need logits [batch, classes] and labels [batch]",
                   {&logits, &labels});
  }
  const int64_t batch = logits.dim(0), classes = logits.dim(1);
  if (logits.device().is_cuda()) {
    const Device device = logits.device();
    MT_ASSIGN_OR_RETURN(Tensor loss,
                        Tensor::Empty(logits.dtype(), {batch}, device));
    MT_ASSIGN_OR_RETURN(Tensor softmax,
                        Tensor::Empty(logits.dtype(), logits.shape(), device));
    MT_RETURN_IF_ERROR(
        KernelError(kOp,
                    cuda::SparseSoftmaxXent(logits.dtype(), logits.raw_data(),
                                            labels.dtype(), labels.raw_data(),
                                            batch, classes, loss.raw_data(),
                                            softmax.raw_data(), device.index),
                    {&logits, &labels}));
    tape::RecordOperation(kSparseSoftmaxCrossEntropyWithLogitsOp,
                          {logits, labels}, {loss},
                          XentAttrs{std::move(softmax)});
    return loss;
  }
  Tensor loss = Tensor::HostEmpty(logits.dtype(), {batch});
  Tensor softmax = Tensor::HostEmpty(logits.dtype(), logits.shape());
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t label = internal::IndexAt(labels, r);
    if (label < 0 || label >= classes) {
      return OpError(kOp,
                     absl::StrCat("label ", label, " in row ", r,
                                  " is outside [0, ", classes, ")"),
                     {&logits, &labels});
    }
  }
  MT_DISPATCH_FLOAT(logits.dtype(), T, {
    const T* x = logits.data<T>();
    T* sm = softmax.data<T>();
    T* pl = loss.data<T>();
    ParallelFor(batch, RowGrain(classes), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * classes;
        T* sr = sm + r * classes;
        const auto [mx, sum] = ExpRow(xr, sr, classes);
        const T inv = T(1) / sum;
        for (int64_t c = 0; c < classes; ++c) sr[c] *= inv;
        pl[r] = std::log(sum) - (xr[internal::IndexAt(labels, r)] - mx);
      }
    });
  });
  tape::RecordOperation(kSparseSoftmaxCrossEntropyWithLogitsOp,
                        {logits, labels}, {loss},
                        XentAttrs{std::move(softmax)});
  return loss;
}

namespace {

// A step seed (when given) is one i64 element on x's device: a replayed
// CUDA graph's, read by the kernel.
absl::Status CheckStepSeed(const char* op, const Tensor* step_seed,
                           const Tensor& x) {
  if (step_seed == nullptr ||
      (step_seed->defined() && step_seed->dtype() == DType::kI64 &&
       step_seed->num_elements() == 1 && step_seed->device() == x.device())) {
    return absl::OkStatus();
  }
  return OpError(op,
                 absl::StrCat("step seed must be one i64 element on ",
                              x.device().ToString(), ", got ",
                              step_seed->defined() ? step_seed->DebugString()
                                                   : "undefined"),
                 {&x});
}

// The host loops' salt: of `seed`, or of DropoutStepSeed(*step_seed, seed,
// step_salt) when a (host) step seed is given, as the kernels form it.
uint64_t HostSalt(const Tensor* step_seed, uint64_t seed, uint64_t step_salt) {
  return DropoutSalt(
      step_seed == nullptr
          ? seed
          : DropoutStepSeed(static_cast<uint64_t>(*step_seed->data<int64_t>()),
                            seed, step_salt));
}

// Dropout with seed `seed`, or DropoutStepSeed(*step_seed, seed, step_salt)
// when step_seed is given.
absl::StatusOr<Tensor> SeededDropout(const Tensor& x, double rate,
                                     const Tensor* step_seed, uint64_t seed,
                                     uint64_t step_salt,
                                     int64_t element_offset) {
  constexpr const char* kOp = "Dropout";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&x}));
  if (!(rate >= 0.0 && rate < 1.0)) {
    return OpError(kOp, absl::StrCat("rate ", rate, " is outside [0, 1)"),
                   {&x});
  }
  MT_RETURN_IF_ERROR(CheckStepSeed(kOp, step_seed, x));
  MT_ASSIGN_OR_RETURN(Tensor mask,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  MT_ASSIGN_OR_RETURN(Tensor y,
                      Tensor::Empty(x.dtype(), x.shape(), x.device()));
  const double keep_scale = 1.0 / (1.0 - rate);
  if (x.device().is_cuda()) {
    MT_RETURN_IF_ERROR(KernelError(
        kOp,
        cuda::Dropout(x.dtype(), x.raw_data(), rate, keep_scale,
                      step_seed != nullptr ? step_seed->raw_data() : nullptr,
                      seed, step_salt, element_offset, mask.raw_data(),
                      y.raw_data(), x.num_elements(), x.device().index),
        {&x}));
  } else {
    const uint64_t salt = HostSalt(step_seed, seed, step_salt);
    MT_DISPATCH_FLOAT(x.dtype(), T, {
      const T scale = static_cast<T>(keep_scale);
      const T* px = x.data<T>();
      T* pm = mask.data<T>();
      T* py = y.data<T>();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        pm[i] = DropoutKeep(salt, i + element_offset, rate) ? scale : T(0);
        py[i] = px[i] * pm[i];
      }
    });
  }
  tape::RecordOperation(kDropoutOp, {x}, {y}, DropoutAttrs{std::move(mask)});
  return y;
}

}  // namespace

absl::StatusOr<Tensor> Dropout(const Tensor& x, double rate, uint64_t seed,
                               int64_t element_offset) {
  return SeededDropout(x, rate, nullptr, seed, 0, element_offset);
}

absl::StatusOr<Tensor> Dropout(const Tensor& x, double rate,
                               const Tensor& step_seed, uint64_t stream,
                               uint64_t salt, int64_t element_offset) {
  return SeededDropout(x, rate, &step_seed, stream, salt, element_offset);
}

namespace {

absl::StatusOr<Tensor> SeededNormal(const Tensor& like, const Tensor* step_seed,
                                    uint64_t seed, uint64_t step_salt,
                                    int64_t element_offset) {
  constexpr const char* kOp = "StandardNormal";
  MT_RETURN_IF_ERROR(CheckFloatingSame(kOp, {&like}));
  MT_RETURN_IF_ERROR(CheckStepSeed(kOp, step_seed, like));
  MT_ASSIGN_OR_RETURN(Tensor out,
                      Tensor::Empty(like.dtype(), like.shape(), like.device()));
  if (like.device().is_cuda()) {
    MT_RETURN_IF_ERROR(
        KernelError(kOp,
                    cuda::StandardNormal(
                        like.dtype(),
                        step_seed != nullptr ? step_seed->raw_data() : nullptr,
                        seed, step_salt, element_offset, out.raw_data(),
                        like.num_elements(), like.device().index),
                    {&like}));
    return out;
  }
  const uint64_t salt = HostSalt(step_seed, seed, step_salt);
  MT_DISPATCH_FLOAT(like.dtype(), T, {
    T* po = out.data<T>();
    for (int64_t i = 0; i < like.num_elements(); ++i) {
      po[i] = static_cast<T>(DropoutNormal(salt, i + element_offset));
    }
  });
  return out;
}

}  // namespace

absl::StatusOr<Tensor> StandardNormal(const Tensor& like, uint64_t seed,
                                      int64_t element_offset) {
  return SeededNormal(like, nullptr, seed, 0, element_offset);
}

absl::StatusOr<Tensor> StandardNormal(const Tensor& like,
                                      const Tensor& step_seed, uint64_t stream,
                                      uint64_t salt, int64_t element_offset) {
  return SeededNormal(like, &step_seed, stream, salt, element_offset);
}

// ---------------------------------------------------------------- gradients

namespace {

// The bias gradient sums g over every row; on GPUs with the column-sum
// kernel (coalesced, many blocks) rather than the generic reduction.
MT_OP_RECORDED_GRADIENT(kBiasAddOp, "BiasAdd",
                        [](const OpRecord& op, auto g, auto needs,
                           Grads* grads) -> absl::Status {
                          if (needs[0]) (*grads)[0] = g[0];
                          if (!needs[1]) return absl::OkStatus();
                          MT_ASSIGN_OR_RETURN((*grads)[1],
                                              internal::BiasGradient(
                                                  g[0], op.inputs[1].shape()));
                          return absl::OkStatus();
                        });

// d softmax: (g - sum(g * y)) * y, per row.
MT_OP_RECORDED_GRADIENT(kSoftmaxOp, "Softmax",
                        [](const OpRecord& op, auto g, auto,
                           Grads* grads) -> absl::Status {
                          const Tensor& y = op.outputs[0];
                          MT_ASSIGN_OR_RETURN(Tensor gy, Mul(g[0], y));
                          MT_ASSIGN_OR_RETURN(
                              Tensor s, ReduceSum(gy, {-1}, /*keepdims=*/true));
                          MT_ASSIGN_OR_RETURN(Tensor d, Sub(g[0], s));
                          MT_ASSIGN_OR_RETURN((*grads)[0], Mul(d, y));
                          return absl::OkStatus();
                        });

// d log_softmax: g - exp(y) * sum(g), per row.
MT_OP_RECORDED_GRADIENT(
    kLogSoftmaxOp, "LogSoftmax",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      MT_ASSIGN_OR_RETURN(Tensor p, Exp(op.outputs[0]));
      MT_ASSIGN_OR_RETURN(Tensor s, ReduceSum(g[0], {-1}, /*keepdims=*/true));
      MT_ASSIGN_OR_RETURN(Tensor ps, Mul(p, s));
      MT_ASSIGN_OR_RETURN((*grads)[0], Sub(g[0], ps));
      return absl::OkStatus();
    });

MT_OP(kSparseSoftmaxCrossEntropyWithLogitsOp,
      "SparseSoftmaxCrossEntropyWithLogits",
      [](const OpRecord& op, auto g, auto needs, Grads* grads) -> absl::Status {
        if (!needs[0]) return absl::OkStatus();
        const Tensor& sm = std::any_cast<const XentAttrs&>(op.attrs).softmax;
        const Tensor& labels = op.inputs[1];
        const Tensor& gl = g[0];
        const int64_t batch = sm.dim(0), classes = sm.dim(1);
        if (gl.device().is_cuda()) {
          MT_ASSIGN_OR_RETURN(
              Tensor d, Tensor::Empty(sm.dtype(), sm.shape(), gl.device()));
          MT_RETURN_IF_ERROR(KernelError(
              "SparseSoftmaxCrossEntropyGrad",
              cuda::SparseSoftmaxXentGrad(sm.dtype(), sm.raw_data(),
                                          labels.dtype(), labels.raw_data(),
                                          gl.raw_data(), batch, classes,
                                          d.raw_data(), gl.device().index),
              {&gl}));
          (*grads)[0] = std::move(d);
          return absl::OkStatus();
        }
        MT_RETURN_IF_ERROR(CheckHost("SparseSoftmaxCrossEntropyGrad", {&gl}));
        Tensor d = Tensor::HostEmpty(sm.dtype(), sm.shape());
        MT_DISPATCH_FLOAT(sm.dtype(), T, {
          const T* ps = sm.data<T>();
          const T* pg = gl.data<T>();
          T* pd = d.data<T>();
          for (int64_t r = 0; r < batch; ++r) {
            for (int64_t c = 0; c < classes; ++c) {
              pd[r * classes + c] = pg[r] * ps[r * classes + c];
            }
            pd[r * classes + internal::IndexAt(labels, r)] -= pg[r];
          }
        });
        (*grads)[0] = std::move(d);
        return absl::OkStatus();
      });

MT_OP_RECORDED_GRADIENT(
    kDropoutOp, "Dropout",
    [](const OpRecord& op, auto g, auto, Grads* grads) -> absl::Status {
      const Tensor& mask =
          std::any_cast<const DropoutAttrs&>(op.attrs).scaled_mask;
      MT_ASSIGN_OR_RETURN((*grads)[0], Mul(g[0], mask));
      return absl::OkStatus();
    });

}  // namespace
}  // namespace mirrortrain::ops
