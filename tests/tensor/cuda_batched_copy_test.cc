// BatchedCopy: deferred copies land as CopyFrom's would, uploads of staged
// tensors among them; what is not a plain copy on one GPU runs at once.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/batched_copy.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops/array_ops.h"
#include "tensor/ops/math_ops.h"
#include "tensor/staged_tensor.h"
#include "tests/tensor/cuda_test_util.h"

namespace mirrortrain {
namespace {

// n bytes' worth of distinct int8-like values as i32 (or bytes as f32).
Tensor Ramp(DType dtype, int64_t n, int64_t start) {
  Tensor t = Tensor::HostEmpty(DType::kF64, {n});
  for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = start + i;
  return *ops::Cast(t, dtype);
}

TEST(BatchedCopyTest, OnTheCpuCopiesRunAtOnce) {
  BatchedCopy batch;
  const Tensor src = Ramp(DType::kF32, 10, 3);
  Tensor dst = Tensor::HostZeros(DType::kF32, {10});
  ASSERT_TRUE(batch.Add(dst, src).ok());
  EXPECT_EQ(batch.pending(), 0u);
  EXPECT_EQ(dst.ToVector<float>(), src.ToVector<float>());
  EXPECT_FALSE(batch.Add(dst, Ramp(DType::kF32, 9, 0)).ok());
  // An upload needs a GPU destination; nothing is deferred.
  auto unflushed = std::make_shared<bool>(false);
  EXPECT_EQ(batch.AddUpload(dst, src, nullptr, unflushed).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(*unflushed);
  // A readback needs a GPU source.
  EXPECT_EQ(batch.AddReadback(dst, src).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.pending(), 0u);
  EXPECT_TRUE(batch.Flush().ok());
}

class BatchedCopyGpuTest : public testing::CudaTest {};

// Views with both ends 16-byte aligned (the 16-byte path, a tail of 1 to
// 3 values after it), with the source or the destination 4 bytes in (the
// byte path), segments of a megabyte and more, and more segments than one
// launch takes: every destination gets its source and nothing else
// changes. The sources are dropped before the flush: the batch holds them.
TEST_F(BatchedCopyGpuTest, DeferredCopiesLandAsCopyFromWould) {
  const Device gpu = Device::Cuda(0);
  // 19 segments: more than one launch takes (16).
  const std::vector<int64_t> sizes = {1,      3,  4,  5,  17, 1000, 262145,
                                      262144, 2,  33, 8,  7,  4097, 6,
                                      9,      12, 64, 65, 3};
  std::vector<Tensor> destinations, expected;
  BatchedCopy batch;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t n = sizes[k];
    // k % 3: 0 both aligned (allocations start 16-byte aligned), 1 the
    // source 4 bytes in, 2 the destination 4 bytes in.
    const int64_t src_offset = k % 3 == 1, dst_offset = k % 3 == 2;
    const DType dtype = k % 2 == 0 ? DType::kI32 : DType::kF32;
    Tensor src = *Ramp(dtype, n + src_offset, 1000 * k).To(gpu);
    Tensor dst = *Tensor::Zeros(dtype, {n + 2}, gpu);
    src = *src.SliceRows(src_offset, n);
    Tensor dst_view = *dst.SliceRows(dst_offset, n);
    ASSERT_TRUE(batch.Add(dst_view, src).ok());
    Tensor want = Tensor::HostZeros(dtype, {n + 2});
    ASSERT_TRUE(
        want.SliceRows(dst_offset, n)->CopyFrom(*src.To(Device::Cpu())).ok());
    destinations.push_back(dst);
    expected.push_back(want);
  }
  EXPECT_EQ(batch.pending(), sizes.size());
  ASSERT_TRUE(batch.Flush().ok());
  EXPECT_EQ(batch.pending(), 0u);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const Tensor got = *destinations[k].To(Device::Cpu());
    if (got.dtype() == DType::kI32) {
      EXPECT_EQ(got.ToVector<int32_t>(), expected[k].ToVector<int32_t>())
          << "segment " << k;
    } else {
      EXPECT_EQ(got.ToVector<float>(), expected[k].ToVector<float>())
          << "segment " << k;
    }
  }
}

// Staged uploads through a batch: each reaches the kernel after its
// Flush(), and Host() waits for the batch's copy before the next values.
TEST_F(BatchedCopyGpuTest, StagedUploadsReachTheKernelsAfterTheFlush) {
  const Device gpu = Device::Cuda(0);
  absl::StatusOr<StagedTensor> a = StagedTensor::Create(DType::kF32, {1}, gpu);
  absl::StatusOr<StagedTensor> b = StagedTensor::Create(DType::kI64, {3}, gpu);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<Tensor> sums, copies;
  const Tensor one = *Tensor::HostFull(DType::kF32, {1}, 1.0).To(gpu);
  for (int i = 0; i < 5; ++i) {
    BatchedCopy batch;
    absl::StatusOr<Tensor> ha = a->Host(), hb = b->Host();
    ASSERT_TRUE(ha.ok() && hb.ok());
    ha->data<float>()[0] = 10.0f * i;
    for (int k = 0; k < 3; ++k) hb->data<int64_t>()[k] = 100 * i + k;
    ASSERT_TRUE(a->Upload(&batch).ok());
    ASSERT_TRUE(b->Upload(&batch).ok());
    EXPECT_EQ(batch.pending(), 2u);
    ASSERT_TRUE(batch.Flush().ok());
    sums.push_back(*ops::Add(a->device(), one));
    Tensor copy = *Tensor::Empty(DType::kI64, {3}, gpu);
    ASSERT_TRUE(copy.CopyFrom(b->device()).ok());
    copies.push_back(copy);
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sums[i].To(Device::Cpu())->ToVector<float>()[0], 10.0f * i + 1);
    EXPECT_EQ(copies[i].To(Device::Cpu())->ToVector<int64_t>(),
              (std::vector<int64_t>{100 * i, 100 * i + 1, 100 * i + 2}));
  }
}

// A Host() between an Upload(&batch) and its Flush() would let the host
// overwrite values still to be copied: it is an error. A StagedTensor
// dropped before the flush still delivers its upload (the batch holds its
// memory and waits for the copy before letting it go).
TEST_F(BatchedCopyGpuTest, UnflushedUploadsAreHeldByTheBatch) {
  const Device gpu = Device::Cuda(0);
  absl::StatusOr<StagedTensor> t = StagedTensor::Create(DType::kF32, {4}, gpu);
  ASSERT_TRUE(t.ok()) << t.status();
  Tensor device;
  {
    BatchedCopy batch;
    for (int k = 0; k < 4; ++k) t->Host()->data<float>()[k] = k + 0.5f;
    ASSERT_TRUE(t->Upload(&batch).ok());
    EXPECT_EQ(t->Host().status().code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(batch.Flush().ok());
    EXPECT_EQ(t->device().To(Device::Cpu())->ToVector<float>(),
              (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f}));
    ASSERT_TRUE(t->Host().ok());
    for (int k = 0; k < 4; ++k) t->Host()->data<float>()[k] = 7.0f * k;
    ASSERT_TRUE(t->Upload(&batch).ok());
    device = t->device();
    *t = StagedTensor();  // Dropped before the batch's flush.
  }                       // The batch's destructor flushes.
  EXPECT_EQ(device.To(Device::Cpu())->ToVector<float>(),
            (std::vector<float>{0, 7, 14, 21}));
}

// Readbacks into pinned host memory in the kernel that also uploads a
// staged value and copies on the device (a step's loss and global norm as
// the next step's inputs go in): the host reads the bytes once an event
// after the flush is reached, an f32 and an f64 scalar written by kernels
// just before the flush and an unaligned view among them. A readback of
// the wrong size is refused.
TEST_F(BatchedCopyGpuTest, ReadbacksLandInPinnedMemoryWithTheBatch) {
  const Device gpu = Device::Cuda(0);
  absl::StatusOr<Allocator*> pinned = cuda::PinnedHostAllocator();
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  const Tensor quarter = *Tensor::HostFull(DType::kF32, {}, 0.25).To(gpu);
  const Tensor third = *Tensor::HostFull(DType::kF64, {}, 1.0 / 3).To(gpu);
  const Tensor ramp = *Ramp(DType::kF32, 9, 5).To(gpu);
  const Tensor ramp_view = *ramp.SliceRows(1, 7);  // 4 bytes in.
  Tensor host_loss = *Tensor::EmptyWith(*pinned, DType::kF32, {});
  Tensor host_norm = *Tensor::EmptyWith(*pinned, DType::kF64, {});
  Tensor host_ramp = *Tensor::EmptyWith(*pinned, DType::kF32, {7});
  // Pinned blocks are reused: whatever they held must be overwritten.
  host_loss.data<float>()[0] = -1;
  host_norm.data<double>()[0] = -1;
  for (int k = 0; k < 7; ++k) host_ramp.data<float>()[k] = -1;
  absl::StatusOr<StagedTensor> seed =
      StagedTensor::Create(DType::kI64, {1}, gpu);
  ASSERT_TRUE(seed.ok()) << seed.status();
  seed->Host()->data<int64_t>()[0] = 77;
  Tensor dst = *Tensor::Zeros(DType::kF32, {9}, gpu);
  // Written by kernels on this stream right before the flush, as a
  // replay writes a step's loss and norm.
  const Tensor loss = *ops::Add(quarter, quarter);
  const Tensor norm = *ops::Add(third, third);
  BatchedCopy batch;
  ASSERT_TRUE(batch.Add(dst, ramp).ok());
  ASSERT_TRUE(seed->Upload(&batch).ok());
  ASSERT_TRUE(batch.AddReadback(host_loss, loss).ok());
  ASSERT_TRUE(batch.AddReadback(host_norm, norm).ok());
  ASSERT_TRUE(batch.AddReadback(host_ramp, ramp_view).ok());
  EXPECT_EQ(batch.AddReadback(host_ramp, loss).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.pending(), 5u);
  ASSERT_TRUE(batch.Flush().ok());
  absl::StatusOr<cuda::Event> done = cuda::Event::Create(0);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->Record(cuda::CurrentStream()).ok());
  ASSERT_TRUE(done->Synchronize().ok());
  EXPECT_EQ(host_loss.data<float>()[0], 0.5f);
  EXPECT_EQ(host_norm.data<double>()[0], 1.0 / 3 + 1.0 / 3);
  EXPECT_EQ(host_ramp.ToVector<float>(),
            (std::vector<float>{6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(dst.To(Device::Cpu())->ToVector<float>(),
            Ramp(DType::kF32, 9, 5).ToVector<float>());
  EXPECT_EQ(seed->device().To(Device::Cpu())->ToVector<int64_t>(),
            std::vector<int64_t>{77});
}

// A destination with a bfloat16 copy is copied at once, by CopyFrom, which
// refreshes the copy; so is one on another device than its source.
TEST_F(BatchedCopyGpuTest, CopiesThatAreNotPlainRunAtOnce) {
  const Device gpu = Device::Cuda(0);
  const Tensor src = *Ramp(DType::kF32, 8, 1).To(gpu);
  Tensor dst = *Tensor::Zeros(DType::kF32, {8}, gpu);
  absl::StatusOr<std::shared_ptr<Buffer>> halves =
      Buffer::Allocate(*cuda::DeviceAllocator(0), 16);
  ASSERT_TRUE(halves.ok()) << halves.status();
  ASSERT_TRUE(dst.SetBf16Copy(*halves).ok());
  BatchedCopy batch;
  ASSERT_TRUE(batch.Add(dst, src).ok());
  Tensor host = Tensor::HostZeros(DType::kF32, {8});
  ASSERT_TRUE(batch.Add(host, src).ok());
  EXPECT_EQ(batch.pending(), 0u);
  const std::vector<float> want = src.To(Device::Cpu())->ToVector<float>();
  EXPECT_EQ(dst.To(Device::Cpu())->ToVector<float>(), want);
  EXPECT_EQ(host.ToVector<float>(), want);
  // The copy was refreshed: 1..8 are exact in bfloat16, the upper halves.
  std::vector<uint16_t> bits(8);
  ASSERT_TRUE(
      cuda::Copy(bits.data(), Device::Cpu(), dst.bf16_copy().get(), gpu, 16)
          .ok());
  for (int i = 0; i < 8; ++i) {
    uint32_t f;
    std::memcpy(&f, &want[i], 4);
    EXPECT_EQ(bits[i], f >> 16) << i;
  }
}

}  // namespace
}  // namespace mirrortrain
