#include "trainer/data/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/data/counter_hash.h"

namespace mirrortrain::trainer {
namespace {

// The hash streams of augmentation draws (synthetic data uses 1..3).
constexpr uint64_t kAugmentStream = 0x61756720;  // "aug "
constexpr uint64_t kEraseStream = 0x65726173;    // "eras"

// Uniform in [0, range) from 31 random bits (range <= 2^31), by
// multiply-shift; its bias (range / 2^31) is negligible for crop offsets.
int64_t Below(uint64_t bits31, int64_t range) {
  return static_cast<int64_t>((bits31 * static_cast<uint64_t>(range)) >> 31);
}

// Random erasing as torchvision draws it: whether to erase, then up to 10
// tries of (area, aspect ratio) until the rectangle fits, then its corner.
// The draws come from one hash chain per (seed, epoch, index).
void DrawErase(const AugmentOptions& options, int64_t h, int64_t w,
               uint64_t bits, AugmentDraw* draw) {
  const auto uniform = [&bits] {
    bits = Mix64(bits);
    return static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
  };
  const auto below = [&bits](int64_t range) {
    bits = Mix64(bits);
    return Below(bits & 0x7fffffff, range);
  };
  if (uniform() >= options.random_erasing) return;
  const auto [scale_lo, scale_hi] = options.erasing_scale;
  const double log_lo = std::log(options.erasing_ratio[0]);
  const double log_hi = std::log(options.erasing_ratio[1]);
  constexpr int kTries = 10;
  for (int t = 0; t < kTries; ++t) {
    const double area = static_cast<double>(h * w) *
                        (scale_lo + (scale_hi - scale_lo) * uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform());
    // Fitted in double first: lround of a side past int64 (an extreme
    // erasing_ratio) is undefined.
    const double side_h = std::round(std::sqrt(area * aspect));
    const double side_w = std::round(std::sqrt(area / aspect));
    if (!(side_h < static_cast<double>(h) && side_w < static_cast<double>(w))) {
      continue;
    }
    const auto eh = static_cast<int64_t>(side_h);
    const auto ew = static_cast<int64_t>(side_w);
    draw->erase_h = eh;
    draw->erase_w = ew;
    draw->erase_y = below(h - eh + 1);
    draw->erase_x = below(w - ew + 1);
    return;
  }
}

// Example `index`'s random bits of `stream` in `epoch`.
uint64_t ExampleBits(uint64_t stream, uint64_t seed, int64_t epoch,
                     int64_t index) {
  return Mix64(CounterHash(seed, stream, static_cast<uint64_t>(epoch)) +
               static_cast<uint64_t>(index));
}

}  // namespace

AugmentDraw DrawAugment(const AugmentOptions& options, int64_t h, int64_t w,
                        uint64_t seed, int64_t epoch, int64_t index) {
  const uint64_t bits = ExampleBits(kAugmentStream, seed, epoch, index);
  AugmentDraw draw;
  const int64_t positions = 2 * options.random_crop_padding + 1;
  draw.offset_y = Below(bits & 0x7fffffff, positions);
  draw.offset_x = Below((bits >> 31) & 0x7fffffff, positions);
  draw.flip = options.horizontal_flip && (bits >> 63) != 0;
  if (options.random_erasing > 0) {
    DrawErase(options, h, w, ExampleBits(kEraseStream, seed, epoch, index),
              &draw);
  }
  return draw;
}

void AugmentImage(const AugmentDraw& draw, int64_t padding, const float* src,
                  int64_t h, int64_t w, int64_t c, float* dst) {
  // Output (y, x) reads source row y + dy, column x + dx (before the flip).
  const int64_t dy = draw.offset_y - padding, dx = draw.offset_x - padding;
  for (int64_t y = 0; y < h; ++y) {
    float* out_row = dst + y * w * c;
    const int64_t sy = y + dy;
    if (sy < 0 || sy >= h) {
      std::fill(out_row, out_row + w * c, 0.0f);
      continue;
    }
    const float* in_row = src + sy * w * c;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t sx = (draw.flip ? w - 1 - x : x) + dx;
      float* out = out_row + x * c;
      if (sx < 0 || sx >= w) {
        std::fill(out, out + c, 0.0f);
      } else {
        std::memcpy(out, in_row + sx * c, c * sizeof(float));
      }
    }
  }
  for (int64_t y = draw.erase_y; y < draw.erase_y + draw.erase_h; ++y) {
    float* row = dst + (y * w + draw.erase_x) * c;
    std::fill(row, row + draw.erase_w * c, 0.0f);
  }
}

absl::Status CheckAugmentable(const AugmentOptions& options,
                              const Shape& images) {
  if (!options.enabled() || images.size() == 4) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("data.augment: crops, flips and erasing need images [N, H, "
                   "W, C], the data is ",
                   ShapeToString(images)));
}

absl::Status AugmentBatch(const AugmentOptions& options, uint64_t seed,
                          int64_t epoch, absl::Span<const int64_t> indices,
                          Tensor& images) {
  if (!options.enabled()) return absl::OkStatus();
  MT_RETURN_IF_ERROR(CheckAugmentable(options, images.shape()));
  if (images.dtype() != DType::kF32 || !images.device().is_cpu() ||
      images.dim(0) != static_cast<int64_t>(indices.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("AugmentBatch: needs host f32 images with one row per "
                     "index (",
                     indices.size(), "), got ", images.DebugString()));
  }
  const int64_t h = images.dim(1), w = images.dim(2), c = images.dim(3);
  const int64_t pixels = h * w * c;
  std::vector<float> original(pixels);
  float* data = images.data<float>();
  for (size_t i = 0; i < indices.size(); ++i) {
    float* image = data + static_cast<int64_t>(i) * pixels;
    std::memcpy(original.data(), image, pixels * sizeof(float));
    AugmentImage(DrawAugment(options, h, w, seed, epoch, indices[i]),
                 options.random_crop_padding, original.data(), h, w, c, image);
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
