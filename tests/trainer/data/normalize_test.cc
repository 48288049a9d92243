#include "trainer/data/normalize.h"

#include <vector>

#include "gtest/gtest.h"

namespace mirrortrain::trainer {
namespace {

TEST(NormalizeTest, PerChannelOverTheLastDimension) {
  // 2 examples of 1x2 pixels with 3 channels.
  std::vector<float> values = {0.0f, 0.5f, 1.0f, 0.25f, 0.75f, 0.125f,
                               1.0f, 0.0f, 0.5f, 0.5f,  0.5f,  0.5f};
  Tensor images = Tensor::FromVector<float>(values, {2, 1, 2, 3});
  const NormalizeOptions options{.mean = {0.5, 0.25, 0.125},
                                 .stddev = {0.25, 0.5, 2.0}};
  ASSERT_TRUE(NormalizeChannels(options, images).ok());
  const std::vector<float> got = images.ToVector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    const size_t k = i % 3;
    EXPECT_EQ(got[i], (values[i] - static_cast<float>(options.mean[k])) /
                          static_cast<float>(options.stddev[k]))
        << i;
  }
  EXPECT_EQ(got[0], -2.0f);  // (0 - 0.5) / 0.25
  EXPECT_EQ(got[4], 1.0f);   // (0.75 - 0.25) / 0.5
}

TEST(NormalizeTest, DisabledChangesNothing) {
  Tensor images = Tensor::FromVector<float>({0.25f, 0.5f}, {2, 1});
  ASSERT_TRUE(NormalizeChannels({}, images).ok());
  EXPECT_EQ(images.ToVector<float>(), (std::vector<float>{0.25f, 0.5f}));
}

// Finite inputs that the mean or std turn into infinities: the config's
// fault, named with the channel (its std underflows here).
TEST(NormalizeTest, ANonFiniteResultNamesTheChannel) {
  Tensor images = Tensor::FromVector<float>({0.5f, 0.5f, 0.5f, 0.25f}, {2, 2});
  const absl::Status status =
      NormalizeChannels({.mean = {0, 0}, .stddev = {1, 1e-45}}, images);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "data.normalize: mean 0 and std 1e-45 of channel 1 make an input "
            "non-finite (example 0)");
}

TEST(NormalizeTest, ChannelCountMustMatch) {
  Tensor images =
      Tensor::FromVector<float>(std::vector<float>(8), {2, 2, 2, 1});
  const absl::Status status =
      NormalizeChannels({.mean = {0.5, 0.5, 0.5}, .stddev = {1, 1, 1}}, images);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "data.normalize.mean: has 3 values (std 3) but the data has 1 "
            "channel (its examples are [2,2,1])");
}

}  // namespace
}  // namespace mirrortrain::trainer
