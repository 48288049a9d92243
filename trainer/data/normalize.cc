#include "trainer/data/normalize.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mirrortrain::trainer {

absl::Status NormalizeChannels(const NormalizeOptions& options, Tensor& images,
                               int64_t first_example) {
  if (!options.enabled()) return absl::OkStatus();
  if (images.dtype() != DType::kF32 || !images.device().is_cpu() ||
      images.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("NormalizeChannels: needs host f32 [N, ..., C], got ",
                     images.DebugString()));
  }
  const int64_t channels = images.dim(images.rank() - 1);
  if (static_cast<int64_t>(options.mean.size()) != channels ||
      options.stddev.size() != options.mean.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.normalize.mean: has ", options.mean.size(), " values (std ",
        options.stddev.size(), ") but the data has ", channels,
        channels == 1 ? " channel" : " channels", " (its examples are ",
        ShapeToString(Shape(images.shape().begin() + 1, images.shape().end())),
        ")"));
  }
  std::vector<float> mean(options.mean.begin(), options.mean.end());
  std::vector<float> stddev(options.stddev.begin(), options.stddev.end());
  float* x = images.data<float>();
  const int64_t rows = images.num_elements() / channels;
  bool finite = true;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * channels;
    for (int64_t k = 0; k < channels; ++k) {
      row[k] = (row[k] - mean[k]) / stddev[k];
      finite &= std::isfinite(row[k]);
    }
  }
  if (finite) return absl::OkStatus();
  // The inputs were finite (checked when read): the mean or std did it.
  const int64_t per_example = images.num_elements() / images.dim(0);
  for (int64_t i = 0; i < images.num_elements(); ++i) {
    if (std::isfinite(x[i])) continue;
    const int64_t k = i % channels;
    return absl::InvalidArgumentError(
        absl::StrCat("data.normalize: mean ", options.mean[k], " and std ",
                     options.stddev[k], " of channel ", k,
                     " make an input non-finite (example ",
                     first_example + i / per_example, ")"));
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
