#include "tensor/tensor.h"

#include <algorithm>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/allocator.h"
#include "tensor/ops/array_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain {
namespace {

TEST(TensorTest, HostStorageIsAlignedAndSized) {
  // Small, cached (>= 64 KiB) and populated (>= 16 MiB) blocks; each
  // size twice, the second time from the cache.
  for (int64_t n : {0, 1, 3, 17, 1000, 20000, 5 << 20, 5 << 20}) {
    Tensor t = Tensor::HostEmpty(DType::kF32, {n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kCpuAlignment, 0u);
    EXPECT_EQ(t.num_elements(), n);
    EXPECT_EQ(t.bytes(), static_cast<size_t>(n) * 4);
    // Every byte is the tensor's to write and read back.
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i);
    for (int64_t i = 0; i < n; i += std::max<int64_t>(n / 97, 1)) {
      ASSERT_EQ(p[i], static_cast<float>(i));
    }
  }
}

TEST(TensorTest, ReshapeIsAViewWithANewId) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  absl::StatusOr<Tensor> v = t.Reshaped({3, 2});
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->SharesBufferWith(t));
  EXPECT_NE(v->id(), t.id());
  t.data<float>()[5] = 42;
  EXPECT_EQ(v->data<float>()[5], 42);
  EXPECT_FALSE(t.Reshaped({4, 2}).ok());
  EXPECT_FALSE(t.Reshaped({-6}).ok());
  // Dimensions whose product overflows 64 bits (2^64 wraps to 0) are no
  // shape of an empty tensor.
  const Tensor empty = Tensor::HostEmpty(DType::kF32, {0});
  const int64_t big = int64_t{1} << 32;
  EXPECT_FALSE(empty.Reshaped({big, big}).ok());
  EXPECT_FALSE(ops::Reshape(empty, {big, big, -1}).ok());
}

TEST(TensorTest, SliceRowsViewsContiguousRows) {
  Tensor t = Tensor::FromVector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  absl::StatusOr<Tensor> s = t.SliceRows(1, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape(), (Shape{2, 2}));
  EXPECT_EQ(s->ToVector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5}));
  absl::StatusOr<Tensor> empty = t.SliceRows(4, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->num_elements(), 0);
  EXPECT_FALSE(t.SliceRows(3, 2).ok());
  EXPECT_FALSE(t.SliceRows(-1, 1).ok());
}

TEST(TensorTest, CloneCopiesAndCopyFromChecksShape) {
  Tensor t = Tensor::FromVector<double>({1, 2, 3}, {3});
  Tensor c = *t.Clone();
  EXPECT_FALSE(c.SharesBufferWith(t));
  EXPECT_EQ(c.ToVector<double>(), t.ToVector<double>());
  Tensor wrong = Tensor::HostZeros(DType::kF32, {3});
  absl::Status s = wrong.CopyFrom(t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("f64[3]"), std::string::npos) << s;
}

TEST(TensorTest, ZerosFullAndScalars) {
  Tensor z = *Tensor::Zeros(DType::kI32, {2, 2});
  EXPECT_EQ(z.ToVector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0}));
  Tensor f = Tensor::HostFull(DType::kF64, {2}, 2.5);
  EXPECT_EQ(f.ToVector<double>(), (std::vector<double>{2.5, 2.5}));
  Tensor s = Tensor::Scalar<int64_t>(7);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.ScalarAt(0), 7);
  EXPECT_EQ(s.DebugString(), "i64[]@cpu:0");
}

TEST(TensorTest, NegativeDimensionIsAnError) {
  EXPECT_EQ(Tensor::Empty(DType::kF32, {2, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, DeviceParsing) {
  EXPECT_EQ(*ParseDevice("cpu:3"), Device::Cpu(3));
  EXPECT_EQ(*ParseDevice("gpu:1"), Device::Cuda(1));
  EXPECT_EQ(ParseDevice("gpu:1").value().ToString(), "gpu:1");
  EXPECT_FALSE(ParseDevice("tpu:0").ok());
  EXPECT_FALSE(ParseDevice("gpu:-1").ok());
  EXPECT_FALSE(ParseDevice("gpu:x").ok());
  // The shorthands PyTorch users write; K only in plain digits.
  EXPECT_EQ(*ParseDevice("cpu"), Device::Cpu(0));
  EXPECT_EQ(*ParseDevice("cuda:2"), Device::Cuda(2));
  EXPECT_EQ(*ParseDevice("cpu:10"), Device::Cpu(10));
  for (const char* odd :
       {"cpu:+1", "cpu: 1", "cpu:01", "cpu:", "gpu", "cpu:1 "}) {
    EXPECT_EQ(ParseDevice(odd).status().message(),
              absl::StrCat("bad device '", odd,
                           "': expected cpu, cpu:K, gpu:K or cuda:K with K a "
                           "non-negative integer"));
  }
}

// Sizes no run on this machine could hold are invalid sizes (a config
// error where a config asked for them, exit 2), not exhaustion.
TEST(TensorTest, SizesThatCannotBeAllocatedAreStatusesNotCrashes) {
  // 2^62 * 2^2 elements overflow int64; 2^61 f32 elements overflow bytes.
  auto t = Tensor::Empty(DType::kF32, {int64_t{1} << 62, 4});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  t = Tensor::Empty(DType::kF32, {int64_t{1} << 61});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  // More than the machine has: refused before overcommit could accept it.
  t = Tensor::Empty(DType::kF64,
                    {static_cast<int64_t>(HostMemoryBytes() / 8 + 1)});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 40, int64_t{1} << 30}),
            std::nullopt);
}

// Each fits, together they do not: once they would pass the machine's
// memory and swap, the next is refused (ResourceExhausted, memory running
// out) before overcommit could accept it and the kernel end the process
// when it is touched; freeing them makes room. None is touched, so no
// memory is used (blocks over 1 GiB are mapped lazily: any machine with
// more than 2 GiB).
TEST(TensorTest, HostTensorsTogetherBeyondTheMachineAreRefused) {
  const int64_t elements = static_cast<int64_t>(HostMemoryBytes() / 4 / 2);
  std::vector<Tensor> held;
  absl::Status refused;
  for (int i = 0; i < 64 && refused.ok(); ++i) {
    absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, {elements});
    if (t.ok()) {
      held.push_back(*std::move(t));
    } else {
      refused = t.status();
    }
  }
  EXPECT_GE(held.size(), 1u);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("together they would pass the machine's"));
  held.clear();
  EXPECT_TRUE(Tensor::Empty(DType::kF32, {elements}).ok());
}

TEST(TensorTest, AllocationFailureEscapingWorkIsAStatus) {
  absl::Status s =
      CatchExceptions([]() -> absl::Status { throw std::bad_alloc(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  s = CatchExceptions([] {
    std::vector<int> v;
    v.reserve(v.max_size() + 1);
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // std::thread's constructor at the thread limit.
  s = CatchExceptions([]() -> absl::Status {
    throw std::system_error(
        std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message().rfind("could not start a thread (", 0), 0u)
      << s.message();
  EXPECT_NE(s.message().find("ulimit -u"), absl::string_view::npos);
}

TEST(TensorTest, OtherExceptionsEscapingWorkAreInternalStatuses) {
  absl::Status s = CatchExceptions(
      []() -> absl::Status { throw std::runtime_error("bad yaml node"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "unexpected exception: bad yaml node");
  s = CatchExceptions([]() -> absl::Status {
    throw std::system_error(std::make_error_code(std::errc::io_error));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  s = CatchExceptions([]() -> absl::Status { throw 42; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(CatchExceptions([] { return absl::OkStatus(); }), absl::OkStatus());
}

}  // namespace
}  // namespace mirrortrain
