// `up_sampling2d` (Keras UpSampling2D: nearest, each pixel repeated size[0]
// x size[1] times, or bilinear), NHWC, without variables.
//
// Built from recorded ops, so its gradient and GPU path are those ops':
// nearest multiplies x [n, h, 1, w, 1, c] by ones [sh, 1, sw, 1]
// (broadcasting; the gradient sums each block). Bilinear is
// tf.image.resize's (half-pixel centers, no antialiasing), one axis after
// the other, columns first as TensorFlow's kernel: with an integer factor s
// each output phase r (cells s * i + r) is a + (b - a) * lerp of x and x
// shifted by one cell (the edge cell repeated), on the side of cell i where
// TensorFlow's float32 position puts it (the middle phase of an odd factor
// can fall on both sides, cell by cell: the two sides' values then
// selected by 0/1 masks), with TensorFlow's float32 lerps (the same bits),
// and the s phases are interleaved (Concat, Reshape): O(output) work,
// about 4 s + 10 ops per axis (a few more for mixed phases).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layer.h"
#include "models/layer_registry.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::models {
namespace {

// The cells of one output phase that TensorFlow interpolates on one side
// of their cell i (between i - 1 and i, or i and i + 1), at its float32
// lerp for each: one scalar where all of them share it (factors that are
// powers of two), else a tensor along the axis (0 at cells of the other
// side).
struct BilinearSide {
  bool used = false;
  double lerp = 0;
  Tensor lerps;
};

// One output phase r of bilinear up-sampling by s along an axis: the cells
// s * i + r, each on the side of cell i TensorFlow's float32 position puts
// it (the middle phase of an odd factor lies on cell i, and rounding puts
// some cells just before it, some just after); where both sides occur,
// masks (1 on a side's cells) select each cell's.
struct BilinearPhase {
  BilinearSide before, after;
  Tensor before_mask, after_mask;
};

// Where every cell of `lerps` shares one value, that scalar, else the
// tensor of them along `axis` of NHWC on `device`.
absl::Status SetLerps(const std::vector<float>& lerps, int axis, Device device,
                      double& scalar, Tensor& tensor) {
  if (std::all_of(lerps.begin(), lerps.end(),
                  [&](float l) { return l == lerps[0]; })) {
    scalar = lerps[0];
    return absl::OkStatus();
  }
  Shape shape{1, 1, 1, 1};
  shape[axis] = static_cast<int64_t>(lerps.size());
  MT_ASSIGN_OR_RETURN(tensor,
                      Tensor::FromVector<float>(lerps, shape).To(device));
  return absl::OkStatus();
}

// The phases of up-sampling n cells along `axis` (1 or 2 of NHWC) by s,
// their tensors on `device`, from TensorFlow's HalfPixelScaler and
// compute_interpolation_weights (the absolute output index, in float32).
absl::StatusOr<std::vector<BilinearPhase>> BilinearPhases(int64_t n, int64_t s,
                                                          int axis,
                                                          Device device) {
  std::vector<BilinearPhase> phases(s);
  const float scale = static_cast<float>(n) / static_cast<float>(n * s);
  for (int64_t r = 0; r < s; ++r) {
    std::vector<float> before(n, 0.0f), after(n, 0.0f), is_before(n, 0.0f);
    BilinearPhase& p = phases[r];
    bool first_before = false;
    float first_lerp = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float at = (static_cast<float>(s * i + r) + 0.5f) * scale - 0.5f;
      const float floor = std::floor(at);
      const float lerp = at - floor;
      if (floor >= static_cast<float>(i)) {
        after[i] = lerp;
        p.after.used = true;
      } else if (i > 0) {
        before[i] = lerp;
        is_before[i] = 1.0f;
        p.before.used = true;
      } else {
        first_before = true;
        first_lerp = lerp;
      }
    }
    // Cell 0 before its cell reads cell 0 alone (TensorFlow clamps): the
    // after side gives it too at lerp 0, so it joins the other cells' side.
    if (first_before) {
      if (p.after.used && !p.before.used) {
        after[0] = 0.0f;
      } else {
        before[0] = first_lerp;
        is_before[0] = 1.0f;
        p.before.used = true;
      }
    }
    if (p.before.used) {
      MT_RETURN_IF_ERROR(
          SetLerps(before, axis, device, p.before.lerp, p.before.lerps));
    }
    if (p.after.used) {
      MT_RETURN_IF_ERROR(
          SetLerps(after, axis, device, p.after.lerp, p.after.lerps));
    }
    if (p.before.used && p.after.used) {
      std::vector<float> is_after(n);
      for (int64_t i = 0; i < n; ++i) is_after[i] = 1.0f - is_before[i];
      Shape shape{1, 1, 1, 1};
      shape[axis] = n;
      MT_ASSIGN_OR_RETURN(
          p.before_mask,
          Tensor::FromVector<float>(is_before, shape).To(device));
      MT_ASSIGN_OR_RETURN(
          p.after_mask, Tensor::FromVector<float>(is_after, shape).To(device));
    }
  }
  return phases;
}

// `t` in x's dtype and on its device.
absl::StatusOr<Tensor> Like(const Tensor& t, const Tensor& x) {
  if (t.dtype() == x.dtype() && t.device() == x.device()) return t;
  MT_ASSIGN_OR_RETURN(const Tensor cast, ops::Cast(t, x.dtype()));
  return cast.To(x.device());
}

// from + diff * lerp for one side's cells (TensorFlow's a + (b - a) *
// lerp); `from` itself where every cell's lerp is 0, where TensorFlow
// reads the one cell (an infinite neighbour gives no NaN; an infinite
// cell stays infinite, where TensorFlow's x + (x - x) * 0 is NaN).
absl::StatusOr<Tensor> Lerp(const BilinearSide& side, const Tensor& from,
                            const Tensor& diff) {
  if (!side.lerps.defined() && side.lerp == 0) return from;
  Tensor step;
  if (side.lerps.defined()) {
    MT_ASSIGN_OR_RETURN(const Tensor lerps, Like(side.lerps, diff));
    MT_ASSIGN_OR_RETURN(step, ops::Mul(diff, lerps));
  } else {
    MT_ASSIGN_OR_RETURN(step, ops::Scale(diff, side.lerp));
  }
  return ops::Add(from, step);
}

// x up-sampled along `axis` (1 or 2 of NHWC) by bilinear interpolation in
// `phases` (BilinearPhases of x's cells there), as tf.image.resize
// computes it: each phase a + (b - a) * lerp of x and x shifted by a cell
// (the edge cell repeated, as TensorFlow clamps to the image), the phases
// interleaved.
absl::StatusOr<Tensor> BilinearAlong(const Tensor& x, int axis,
                                     const std::vector<BilinearPhase>& phases) {
  const int64_t s = static_cast<int64_t>(phases.size());
  if (s == 1) return x;
  const int64_t n = x.dim(axis);
  Tensor prev = x, next = x;
  if (n > 1) {
    MT_ASSIGN_OR_RETURN(const Tensor first, ops::Slice(x, axis, 0, 1));
    MT_ASSIGN_OR_RETURN(const Tensor last, ops::Slice(x, axis, n - 1, 1));
    MT_ASSIGN_OR_RETURN(const Tensor head, ops::Slice(x, axis, 0, n - 1));
    MT_ASSIGN_OR_RETURN(const Tensor tail, ops::Slice(x, axis, 1, n - 1));
    MT_ASSIGN_OR_RETURN(prev, ops::Concat({first, head}, axis));
    MT_ASSIGN_OR_RETURN(next, ops::Concat({tail, last}, axis));
  }
  MT_ASSIGN_OR_RETURN(const Tensor to_prev, ops::Sub(x, prev));
  MT_ASSIGN_OR_RETURN(const Tensor to_next, ops::Sub(next, x));
  Shape phase_shape = x.shape();
  phase_shape.insert(phase_shape.begin() + axis + 1, 1);
  std::vector<Tensor> out_phases;
  for (const BilinearPhase& p : phases) {
    Tensor phase;
    if (p.before.used) {
      MT_ASSIGN_OR_RETURN(phase, Lerp(p.before, prev, to_prev));
    }
    if (p.after.used) {
      MT_ASSIGN_OR_RETURN(const Tensor after, Lerp(p.after, x, to_next));
      if (!p.before.used) {
        phase = after;
      } else {
        // Each cell its side's value (times 1, plus the other's times 0).
        MT_ASSIGN_OR_RETURN(const Tensor bm, Like(p.before_mask, x));
        MT_ASSIGN_OR_RETURN(const Tensor am, Like(p.after_mask, x));
        MT_ASSIGN_OR_RETURN(const Tensor b, ops::Mul(phase, bm));
        MT_ASSIGN_OR_RETURN(const Tensor a, ops::Mul(after, am));
        MT_ASSIGN_OR_RETURN(phase, ops::Add(b, a));
      }
    }
    MT_ASSIGN_OR_RETURN(phase, ops::Reshape(phase, phase_shape));
    out_phases.push_back(std::move(phase));
  }
  MT_ASSIGN_OR_RETURN(const Tensor interleaved,
                      ops::Concat(out_phases, axis + 1));
  Shape out = x.shape();
  out[axis] *= s;
  return ops::Reshape(interleaved, out);
}

class UpSampling2DLayer final : public Layer {
 public:
  // `ones` (nearest only): [sh, 1, sw, 1] of ones.
  UpSampling2DLayer(std::string name, std::array<int64_t, 2> size, Tensor ones)
      : Layer(std::move(name)), size_(size), ones_(std::move(ones)) {}
  // Bilinear, for images of `in` [height, width].
  UpSampling2DLayer(std::string name, std::array<int64_t, 2> size,
                    std::array<int64_t, 2> in,
                    std::array<std::vector<BilinearPhase>, 2> phases)
      : Layer(std::move(name)),
        size_(size),
        in_(in),
        phases_(std::move(phases)) {}

  absl::StatusOr<Tensor> Call(const Tensor& x, const ForwardContext&) override {
    MT_ASSIGN_OR_RETURN(const Shape out, OutputShape(x.shape()));
    if (bilinear()) {
      // Columns first, as TensorFlow's kernel.
      MT_ASSIGN_OR_RETURN(const Tensor wide, BilinearAlong(x, 2, phases_[1]));
      return BilinearAlong(wide, 1, phases_[0]);
    }
    MT_ASSIGN_OR_RETURN(
        const Tensor spread,
        ops::Reshape(x, {x.dim(0), x.dim(1), 1, x.dim(2), 1, x.dim(3)}));
    MT_ASSIGN_OR_RETURN(const Tensor ones, Like(ones_, x));
    MT_ASSIGN_OR_RETURN(const Tensor repeated, ops::Mul(spread, ones));
    return ops::Reshape(repeated, out);
  }

  absl::StatusOr<Shape> OutputShape(const Shape& input) const override {
    MT_RETURN_IF_ERROR(CheckImageShape(input, name()));
    // Bilinear weights are the built size's.
    if (bilinear() && (input[1] != in_[0] || input[2] != in_[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": expects images of ", in_[0], "x", in_[1],
                       ", got ", ShapeToString(input)));
    }
    return Shape{input[0], input[1] * size_[0], input[2] * size_[1], input[3]};
  }

 private:
  bool bilinear() const { return !ones_.defined(); }

  std::array<int64_t, 2> size_;
  Tensor ones_;  // Nearest: [sh, 1, sw, 1] of ones, on the layer's device.
  std::array<int64_t, 2> in_ = {0, 0};
  std::array<std::vector<BilinearPhase>, 2> phases_;  // Rows', columns'.
};

}  // namespace

MT_REGISTER(
    LayerType,
    {.name = "up_sampling2d",
     .doc = "each pixel becomes size[0] x size[1] pixels, NHWC (Keras "
            "UpSampling2D): repeated (nearest) or interpolated (bilinear)",
     .params = {{Param::IntPair("size").Default(2).Min(1).Max(1024).Doc(
                     "[rows, columns] each pixel becomes; an integer: both"),
                 Param::String("interpolation")
                     .Default("nearest")
                     .OneOf({"nearest", "bilinear"})
                     .Doc("nearest: each pixel repeated (Keras's default); "
                          "bilinear: tf.image.resize's, half-pixel centers")}},
     // Its output holds its input's values (repeated, or mixed: a
     // probability's still): looked past for the output layer, so an
     // output softmax before it is refused as before a reshape.
     .passes_values_on = true,
     .create = [](const LayerSpec& spec,
                  LayerBuilder& b) -> absl::StatusOr<std::unique_ptr<Layer>> {
       MT_RETURN_IF_ERROR(CheckImageShape(b.input_shape(), ""));
       const std::array<int64_t, 2> size = spec.params.IntPair("size");
       const Shape& in = b.input_shape();
       if (in[1] > kMaxDimension / size[0] || in[2] > kMaxDimension / size[1]) {
         return absl::InvalidArgumentError(absl::StrCat(
             "size: ", in[1], "x", in[2], " up-sampled by ", size[0], "x",
             size[1], " is more than ", kMaxDimension, " in a dimension"));
       }
       if (spec.params.String("interpolation") == "bilinear") {
         std::array<std::vector<BilinearPhase>, 2> phases;
         for (int axis = 1; axis <= 2; ++axis) {
           MT_ASSIGN_OR_RETURN(
               phases[axis - 1],
               BilinearPhases(in[axis], size[axis - 1], axis, b.device()));
         }
         return std::unique_ptr<Layer>(new UpSampling2DLayer(
             b.name(), size, {in[1], in[2]}, std::move(phases)));
       }
       MT_ASSIGN_OR_RETURN(
           Tensor ones,
           Tensor::HostFull(DType::kF32, {size[0], 1, size[1], 1}, 1.0)
               .To(b.device()));
       return std::unique_ptr<Layer>(
           new UpSampling2DLayer(b.name(), size, std::move(ones)));
     }});

}  // namespace mirrortrain::models
