// Image augmentation for training batches (`data.augment`): a random crop
// after zero padding, and a horizontal flip. What example `index` gets in
// epoch `epoch` is drawn from a counter-based hash of (seed, epoch, index),
// `index` being the example's row in the dataset (not its place in a
// batch), so it is the same for any batch size, replica count or process
// count, and after a resume.
//
// Thread contract: no state; the batch iterator calls AugmentBatch on its
// prefetch thread.
#ifndef MIRRORTRAIN_TRAINER_DATA_AUGMENT_H_
#define MIRRORTRAIN_TRAINER_DATA_AUGMENT_H_

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

  bool enabled() const { return random_crop_padding > 0 || horizontal_flip; }
};

// One example's draw: the crop's top-left corner in the padded image, each
// in [0, 2 * padding], and whether to flip.
struct AugmentDraw {
  int64_t offset_y = 0;
  int64_t offset_x = 0;
  bool flip = false;
};

AugmentDraw DrawAugment(const AugmentOptions& options, uint64_t seed,
                        int64_t epoch, int64_t index);

// dst[y][x] = padded[offset_y + y][offset_x + x'] with x' = w-1-x when
// flipped: padded is `src` ([h, w, c]) with `padding` zero pixels around.
// `dst` is another [h, w, c] buffer.
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
