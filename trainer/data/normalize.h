// Per-channel normalisation of a dataset's inputs (`data.normalize`):
// x = (x - mean[k]) / std[k] over the last dimension (the channels of NHWC
// images, the features of [N, features] data), after the source scaled the
// pixels to [0, 1]. Applied once when a split is loaded, to the training and
// the test split alike, so batches need no more work.
//
// Thread contract: no state; the caller owns the tensor it normalises.
#ifndef MIRRORTRAIN_TRAINER_DATA_NORMALIZE_H_
#define MIRRORTRAIN_TRAINER_DATA_NORMALIZE_H_

#include <vector>

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {

struct NormalizeOptions {
  std::vector<double> mean;    // Empty: no normalisation.
  std::vector<double> stddev;  // Each > 0; as many as mean.

  bool enabled() const { return !mean.empty(); }
};

// Normalises host f32 `images` in place, in float32 as Keras's
// Normalization layer. InvalidArgument naming data.normalize.mean when its
// length is not the channel count, or an example the normalisation makes
// non-finite (numbered from `first_example`: where `images` start in their
// whole array).
absl::Status NormalizeChannels(const NormalizeOptions& options, Tensor& images,
                               int64_t first_example = 0);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_NORMALIZE_H_
