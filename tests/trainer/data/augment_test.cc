// Augmentation: crops, flips and erasing on hand-made images, draws that depend
// on (seed, epoch, example index) only, and the batch iterator applying them
// the same whatever the batch size or resume point.
#include "trainer/data/augment.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/batch_iterator.h"

namespace mirrortrain::trainer {
namespace {

using ::testing::HasSubstr;

// A 3x4 image with 2 channels: pixel (y, x, c) = 1 + 100y + 10x + c, so
// every value is non-zero and names where it came from.
constexpr int64_t kH = 3, kW = 4, kC = 2;
float Value(int64_t y, int64_t x, int64_t c) {
  return static_cast<float>(1 + 100 * y + 10 * x + c);
}
std::vector<float> TinyImage() {
  std::vector<float> image;
  for (int64_t y = 0; y < kH; ++y) {
    for (int64_t x = 0; x < kW; ++x) {
      for (int64_t c = 0; c < kC; ++c) image.push_back(Value(y, x, c));
    }
  }
  return image;
}

std::vector<float> Apply(const AugmentDraw& draw, int64_t padding) {
  const std::vector<float> src = TinyImage();
  std::vector<float> dst(src.size(), -1.0f);
  AugmentImage(draw, padding, src.data(), kH, kW, kC, dst.data());
  return dst;
}

float At(const std::vector<float>& image, int64_t y, int64_t x, int64_t c) {
  return image[(y * kW + x) * kC + c];
}

TEST(AugmentImageTest, CenteredCropIsTheIdentity) {
  EXPECT_EQ(Apply({.offset_y = 2, .offset_x = 2}, 2), TinyImage());
  EXPECT_EQ(Apply({}, 0), TinyImage());
}

TEST(AugmentImageTest, CropShiftsInZeroPadding) {
  // Corner (0, 0) of the image padded by 1: content moves down and right by
  // one, the first row and column are padding.
  const std::vector<float> out = Apply({.offset_y = 0, .offset_x = 0}, 1);
  for (int64_t c = 0; c < kC; ++c) {
    for (int64_t x = 0; x < kW; ++x) EXPECT_EQ(At(out, 0, x, c), 0.0f);
    for (int64_t y = 0; y < kH; ++y) EXPECT_EQ(At(out, y, 0, c), 0.0f);
    EXPECT_EQ(At(out, 1, 1, c), Value(0, 0, c));
    EXPECT_EQ(At(out, 2, 3, c), Value(1, 2, c));
  }
  // Corner (4, 4) of the image padded by 2 (the bottom-right extreme):
  // output (y, x) reads input (y + 2, x + 2).
  const std::vector<float> far = Apply({.offset_y = 4, .offset_x = 4}, 2);
  for (int64_t y = 0; y < kH; ++y) {
    for (int64_t x = 0; x < kW; ++x) {
      for (int64_t c = 0; c < kC; ++c) {
        const bool inside = y + 2 < kH && x + 2 < kW;
        EXPECT_EQ(At(far, y, x, c), inside ? Value(y + 2, x + 2, c) : 0.0f)
            << y << "," << x;
      }
    }
  }
}

TEST(AugmentImageTest, FlipMirrorsColumnsAndKeepsChannels) {
  const std::vector<float> out = Apply({.flip = true}, 0);
  for (int64_t y = 0; y < kH; ++y) {
    for (int64_t x = 0; x < kW; ++x) {
      for (int64_t c = 0; c < kC; ++c) {
        EXPECT_EQ(At(out, y, x, c), Value(y, kW - 1 - x, c));
      }
    }
  }
}

TEST(AugmentImageTest, FlipAppliesToTheCrop) {
  // Crop at (1, 2) of padding 1 (content shifted left by one), then flip:
  // output (y, x) = cropped (y, W-1-x) = input (y, W-1-x + 1).
  const std::vector<float> out =
      Apply({.offset_y = 1, .offset_x = 2, .flip = true}, 1);
  for (int64_t y = 0; y < kH; ++y) {
    EXPECT_EQ(At(out, y, 0, 1), 0.0f);  // Column W of the input: padding.
    for (int64_t x = 1; x < kW; ++x) {
      EXPECT_EQ(At(out, y, x, 1), Value(y, kW - x, 1)) << y << "," << x;
    }
  }
}

TEST(AugmentImageTest, ErasingZeroesTheRectangleOfTheOutput) {
  // Flip, then erase rows 1..2, column 2 of the flipped image.
  const std::vector<float> out = Apply(
      {.flip = true, .erase_y = 1, .erase_x = 2, .erase_h = 2, .erase_w = 1},
      0);
  for (int64_t y = 0; y < kH; ++y) {
    for (int64_t x = 0; x < kW; ++x) {
      for (int64_t c = 0; c < kC; ++c) {
        const bool erased = y >= 1 && x == 2;
        EXPECT_EQ(At(out, y, x, c), erased ? 0.0f : Value(y, kW - 1 - x, c))
            << y << "," << x << "," << c;
      }
    }
  }
}

TEST(DrawAugmentTest, ErasingFollowsItsProbabilityScaleAndRatio) {
  constexpr int64_t kSide = 28;
  constexpr int kDraws = 4000;
  const AugmentOptions always{.random_erasing = 1.0};
  const AugmentOptions half{.random_erasing = 0.5};
  int erased_half = 0;
  std::set<int64_t> corners;
  double min_area = 1, max_area = 0, min_ratio = 100, max_ratio = 0;
  for (int64_t i = 0; i < kDraws; ++i) {
    const AugmentDraw d = DrawAugment(always, kSide, kSide, 3, 1, i);
    ASSERT_GT(d.erase_h, 0) << i;  // Every draw at these defaults fits.
    ASSERT_GT(d.erase_w, 0) << i;
    ASSERT_GE(d.erase_y, 0);
    ASSERT_GE(d.erase_x, 0);
    ASSERT_LE(d.erase_y + d.erase_h, kSide);
    ASSERT_LE(d.erase_x + d.erase_w, kSide);
    corners.insert(d.erase_y * kSide + d.erase_x);
    const double area =
        static_cast<double>(d.erase_h * d.erase_w) / (kSide * kSide);
    const double ratio = static_cast<double>(d.erase_h) / d.erase_w;
    min_area = std::min(min_area, area);
    max_area = std::max(max_area, area);
    min_ratio = std::min(min_ratio, ratio);
    max_ratio = std::max(max_ratio, ratio);
    const AugmentDraw again = DrawAugment(always, kSide, kSide, 3, 1, i);
    EXPECT_EQ(again.erase_y, d.erase_y);
    EXPECT_EQ(again.erase_x, d.erase_x);
    EXPECT_EQ(again.erase_h, d.erase_h);
    EXPECT_EQ(again.erase_w, d.erase_w);
    erased_half += DrawAugment(half, kSide, kSide, 3, 1, i).erase_h > 0;
    EXPECT_EQ(DrawAugment({}, kSide, kSide, 3, 1, i).erase_h, 0);
  }
  // Defaults [0.02, 0.33] and [0.3, 3.3], widened by rounding the sides to
  // whole pixels (at most half a pixel each way).
  EXPECT_GT(min_area, 0.012);
  EXPECT_LT(min_area, 0.03);
  EXPECT_GT(max_area, 0.30);
  EXPECT_LT(max_area, 0.38);
  EXPECT_GT(min_ratio, 0.2);
  EXPECT_LT(min_ratio, 0.4);
  EXPECT_GT(max_ratio, 2.5);
  EXPECT_LT(max_ratio, 5.0);
  EXPECT_GT(corners.size(), 300u);
  // sd = sqrt(4000)/2 ~ 32; 5 of them.
  EXPECT_NEAR(erased_half, kDraws / 2, 160);

  // A rectangle that never fits (the whole image) erases nothing.
  const AugmentOptions whole{.random_erasing = 1.0,
                             .erasing_scale = {1.0, 1.0},
                             .erasing_ratio = {1.0, 1.0}};
  EXPECT_EQ(DrawAugment(whole, kSide, kSide, 3, 1, 0).erase_h, 0);
  // Ratios so extreme that one side passes int64 on most tries: those tries
  // are retried, as tries that do not fit are, and any rectangle drawn
  // lies inside the image.
  const AugmentOptions extreme{.random_erasing = 1.0,
                               .erasing_ratio = {1e-40, 1e40}};
  int fitted = 0;
  for (int64_t i = 0; i < kDraws; ++i) {
    const AugmentDraw d = DrawAugment(extreme, kSide, kSide, 3, 1, i);
    if (d.erase_h == 0) continue;
    ++fitted;
    ASSERT_GT(d.erase_h, 0) << i;
    ASSERT_GT(d.erase_w, 0) << i;
    ASSERT_GE(d.erase_y, 0);
    ASSERT_GE(d.erase_x, 0);
    ASSERT_LE(d.erase_y + d.erase_h, kSide) << i;
    ASSERT_LE(d.erase_x + d.erase_w, kSide) << i;
  }
  EXPECT_GT(fitted, 0);
}

TEST(DrawAugmentTest, DependsOnSeedEpochAndIndexOnly) {
  const AugmentOptions options{.random_crop_padding = 4,
                               .horizontal_flip = true};
  int differ_epoch = 0, differ_seed = 0, flips = 0;
  std::set<int64_t> offsets;
  constexpr int kDraws = 2000;
  for (int64_t i = 0; i < kDraws; ++i) {
    const AugmentDraw a = DrawAugment(options, 9, 9, 7, 3, i);
    const AugmentDraw again = DrawAugment(options, 9, 9, 7, 3, i);
    EXPECT_EQ(a.offset_y, again.offset_y);
    EXPECT_EQ(a.offset_x, again.offset_x);
    EXPECT_EQ(a.flip, again.flip);
    ASSERT_GE(a.offset_y, 0);
    ASSERT_LE(a.offset_y, 8);
    ASSERT_GE(a.offset_x, 0);
    ASSERT_LE(a.offset_x, 8);
    offsets.insert(a.offset_y * 9 + a.offset_x);
    flips += a.flip;
    const AugmentDraw next = DrawAugment(options, 9, 9, 7, 4, i);
    differ_epoch += next.offset_y != a.offset_y ||
                    next.offset_x != a.offset_x || next.flip != a.flip;
    const AugmentDraw seed = DrawAugment(options, 9, 9, 8, 3, i);
    differ_seed += seed.offset_y != a.offset_y || seed.offset_x != a.offset_x ||
                   seed.flip != a.flip;
  }
  EXPECT_EQ(offsets.size(), 81u);  // Every crop position occurs.
  // Half flipped, within 5 standard deviations (sd = sqrt(2000)/2 ~ 22).
  EXPECT_NEAR(flips, kDraws / 2, 112);
  // Two independent draws agree with probability 1/162.
  EXPECT_GT(differ_epoch, kDraws * 9 / 10);
  EXPECT_GT(differ_seed, kDraws * 9 / 10);

  // Disabled parts draw nothing.
  const AugmentDraw flip_only =
      DrawAugment({.horizontal_flip = true}, 9, 9, 7, 3, 0);
  EXPECT_EQ(flip_only.offset_y, 0);
  EXPECT_EQ(flip_only.offset_x, 0);
  EXPECT_EQ(flip_only.erase_h, 0);
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_FALSE(DrawAugment({.random_crop_padding = 2}, 9, 9, 7, 3, i).flip);
  }
}

// n images of 4x4x1; image k is all k + 1 except a 0 in its top-left
// pixel, so the crop and flip of each are visible and the source is known.
InMemoryDataset Images(int64_t n) {
  InMemoryDataset d;
  d.name = "images";
  d.num_classes = 1;
  d.images = Tensor::HostEmpty(DType::kF32, {n, 4, 4, 1});
  d.labels = Tensor::HostEmpty(DType::kI32, {n});
  float* x = d.images.data<float>();
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t p = 0; p < 16; ++p) x[k * 16 + p] = p == 0 ? 0.0f : k + 1.0f;
    d.labels.data<int32_t>()[k] = static_cast<int32_t>(k);
  }
  return d;
}

constexpr uint64_t kSeed = 5;
const AugmentOptions kOptions{.random_crop_padding = 2,
                              .horizontal_flip = true,
                              .random_erasing = 0.5,
                              .erasing_scale = {0.1, 0.3}};

// Image of example `label` as the iterator gave it, keyed by
// (epoch, example).
using Seen = std::map<std::pair<int64_t, int32_t>, std::vector<float>>;

void Collect(BatchIterator& it, int batches, Seen* seen) {
  for (int b = 0; b < batches; ++b) {
    absl::StatusOr<Batch> batch = it.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    const float* x = batch->images.data<float>();
    for (int64_t i = 0; i < batch->labels.dim(0); ++i) {
      (*seen)[{batch->epoch, batch->labels.data<int32_t>()[i]}] =
          std::vector<float>(x + i * 16, x + (i + 1) * 16);
    }
  }
}

std::unique_ptr<BatchIterator> Iterator(const InMemoryDataset& d, int64_t batch,
                                        int prefetch,
                                        AugmentOptions augment = kOptions) {
  BatchIteratorOptions opt;
  opt.batch_size = batch;
  opt.seed = kSeed;
  opt.prefetch = prefetch;
  opt.augment = augment;
  absl::StatusOr<std::unique_ptr<BatchIterator>> it =
      BatchIterator::Create(&d, opt);
  EXPECT_TRUE(it.ok()) << it.status();
  return it.ok() ? *std::move(it) : nullptr;
}

TEST(AugmentBatchTest, EachExampleGetsItsOwnDrawWhateverTheBatchSize) {
  const InMemoryDataset d = Images(30);
  Seen by4, by7;
  // Two epochs each: 8 batches of 4 (the last partial) and 5 of 7.
  Collect(*Iterator(d, 4, 2), 16, &by4);
  Collect(*Iterator(d, 7, 0), 10, &by7);
  ASSERT_EQ(by4.size(), 60u);
  EXPECT_EQ(by4, by7);

  int changed = 0;
  for (const auto& [key, image] : by4) {
    const auto [epoch, k] = key;
    // What DrawAugment says, applied by hand to the raw image.
    const AugmentDraw draw = DrawAugment(kOptions, 4, 4, kSeed, epoch, k);
    const std::vector<float> raw(d.images.data<float>() + k * 16,
                                 d.images.data<float>() + (k + 1) * 16);
    std::vector<float> expected(16);
    AugmentImage(draw, 2, raw.data(), 4, 4, 1, expected.data());
    EXPECT_EQ(image, expected) << "epoch " << epoch << " example " << k;
    changed += image != by4.at({1 - epoch, k});
  }
  // Epochs draw afresh: most examples differ between the two.
  EXPECT_GT(changed, 40);
}

TEST(AugmentBatchTest, ResumeGivesTheSameCrops) {
  const InMemoryDataset d = Images(30);
  Seen straight, resumed;
  Collect(*Iterator(d, 4, 2), 20, &straight);
  std::unique_ptr<BatchIterator> it = Iterator(d, 4, 2);
  ASSERT_TRUE(it->Seek({.epoch = 1, .batch = 3}).ok());
  Collect(*it, 9, &resumed);
  for (const auto& [key, image] : resumed) {
    EXPECT_EQ(image, straight.at(key)) << key.first << "/" << key.second;
  }
  // Epoch 1 from batch 3 (batches 3..6 of 4, then 2), then 4 batches of 4.
  EXPECT_EQ(resumed.size(), 18u + 16u);
}

TEST(AugmentBatchTest, DisabledLeavesBatchesAsGathered) {
  const InMemoryDataset d = Images(10);
  Seen seen;
  Collect(*Iterator(d, 5, 0, AugmentOptions{}), 2, &seen);
  for (const auto& [key, image] : seen) {
    EXPECT_EQ(image, std::vector<float>(
                         d.images.data<float>() + key.second * 16,
                         d.images.data<float>() + (key.second + 1) * 16));
  }
}

TEST(AugmentBatchTest, NeedsImages) {
  InMemoryDataset flat;
  flat.name = "flat";
  flat.images = Tensor::HostEmpty(DType::kF32, {6, 5});
  flat.labels = Tensor::HostEmpty(DType::kI32, {6});
  BatchIteratorOptions opt;
  opt.augment = {.horizontal_flip = true};
  absl::StatusOr<std::unique_ptr<BatchIterator>> it =
      BatchIterator::Create(&flat, opt);
  ASSERT_FALSE(it.ok());
  EXPECT_THAT(it.status().message(),
              HasSubstr("data.augment: crops, flips and erasing need images "
                        "[N, H, W, C], the data is [6,5]"));
  EXPECT_TRUE(CheckAugmentable({}, {6, 5}).ok());
}

}  // namespace
}  // namespace mirrortrain::trainer
