#include "distribute/device_set.h"

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"

namespace mirrortrain::distribute {
namespace {

TEST(DeviceSetTest, LogicalCpuDevices) {
  auto d = ResolveDevices({"cpu:0", "cpu:1", "cpu:2"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[2], Device::Cpu(2));
}

TEST(DeviceSetTest, BadListsSayWhichEntry) {
  EXPECT_FALSE(ResolveDevices({}).ok());
  auto dup = ResolveDevices({"cpu:0", "cpu:0"});
  EXPECT_NE(dup.status().message().find("cpu:0 is listed twice"),
            std::string::npos);
  auto bad = ResolveDevices({"cpu:0", "tpu:1"});
  EXPECT_NE(bad.status().message().find("tpu:1"), std::string::npos);
}

TEST(DeviceSetTest, MissingGpuSaysHowManyAreVisible) {
  const int count = cuda::DeviceCount();
  auto r = ResolveDevices({"gpu:" + std::to_string(count + 6)});
  ASSERT_FALSE(r.ok());
  if (cuda::Built()) {
    EXPECT_NE(r.status().message().find(std::to_string(count) + " GPU(s) are "
                                                                "visible"),
              std::string::npos)
        << r.status();
  } else {
    EXPECT_NE(r.status().message().find("without CUDA"), std::string::npos)
        << r.status();
  }
  if (count == 0) {
    EXPECT_FALSE(ResolveDevices({"all_gpus"}).ok());
  }
}

}  // namespace
}  // namespace mirrortrain::distribute
