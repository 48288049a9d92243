// Image augmentation for training batches (`data.augment`): a random crop
// after zero padding, a horizontal flip, and random erasing (Zhong et al.,
// "Random Erasing Data Augmentation", 2017, as torchvision's RandomErasing:
// a rectangle of the cropped, flipped image set to 0). What example `index`
// gets in
// epoch `epoch` is drawn from a counter-based hash of (seed, epoch, index),
// `index` being the example's row in the dataset (not its place in a
// batch), so it is the same for any batch size, replica count or process
// count, and after a resume.
//
// Thread contract: no state; the batch iterator calls AugmentBatch on its
// prefetch thread.
#ifndef MIRRORTRAIN_TRAINER_DATA_AUGMENT_H_
#define MIRRORTRAIN_TRAINER_DATA_AUGMENT_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {

struct AugmentOptions {
  // Pad each side with this many zero pixels, then crop back to the image
  // size at a random offset; 0: no crop.
  int64_t random_crop_padding = 0;
  // Mirror left-right with probability 1/2.
  bool horizontal_flip = false;
  // Probability of erasing a rectangle; 0: never. Its area is a uniform
  // fraction in [erasing_scale[0], erasing_scale[1]] of the image's, its
  // aspect ratio (height / width) log-uniform in erasing_ratio; a draw
  // that does not fit is redrawn, up to 10 times, then nothing is erased
  // (torchvision's rule).
  double random_erasing = 0.0;
  std::array<double, 2> erasing_scale = {0.02, 0.33};
  std::array<double, 2> erasing_ratio = {0.3, 3.3};

  bool enabled() const {
    return random_crop_padding > 0 || horizontal_flip || random_erasing > 0;
  }
};

// One example's draw: the crop's top-left corner in the padded image, each
// in [0, 2 * padding], whether to flip, and the erased rectangle of the
// output (erase_h or erase_w 0: none).
struct AugmentDraw {
  int64_t offset_y = 0;
  int64_t offset_x = 0;
  bool flip = false;
  int64_t erase_y = 0;
  int64_t erase_x = 0;
  int64_t erase_h = 0;
  int64_t erase_w = 0;
};

// The draw for an image of h x w pixels.
AugmentDraw DrawAugment(const AugmentOptions& options, int64_t h, int64_t w,
                        uint64_t seed, int64_t epoch, int64_t index);

// dst[y][x] = padded[offset_y + y][offset_x + x'] with x' = w-1-x when
// flipped: padded is `src` ([h, w, c]) with `padding` zero pixels around;
// then the erased rectangle of dst is 0 in every channel. `dst` is another
// [h, w, c] buffer.
void AugmentImage(const AugmentDraw& draw, int64_t padding, const float* src,
                  int64_t h, int64_t w, int64_t c, float* dst);

// InvalidArgument naming data.augment when `images` (a dataset's or a
// batch's shape) are not [N, H, W, C].
absl::Status CheckAugmentable(const AugmentOptions& options,
                              const Shape& images);

// Augments `images` (host f32 [b, H, W, C]) in place: row i is example
// `indices[i]` of the dataset.
absl::Status AugmentBatch(const AugmentOptions& options, uint64_t seed,
                          int64_t epoch, absl::Span<const int64_t> indices,
                          Tensor& images);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_AUGMENT_H_
