// Tensor: a dense, row-major, immutable-by-convention n-d array.
//
// Ownership: a Tensor is a cheap handle (one shared_ptr) to an impl that
// holds the shape, dtype and a shared Buffer. Copies of a handle are the same
// tensor (same id(), as an EagerTensor handle in TensorFlow); views made by
// Reshape share the buffer but are new tensors with new ids. Ops never write
// into their inputs; only Variable and the optimizers update buffers in place.
//
// Thread contract: handles may be copied and read from several threads; a
// tensor's data must not be written while another thread reads it.
#ifndef MIRRORTRAIN_TENSOR_TENSOR_H_
#define MIRRORTRAIN_TENSOR_TENSOR_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/allocator.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace mirrortrain {

class Buffer;

// What a buffer's f32 bytes [begin, end) are known to hold under mixed
// bfloat16 (tensor/ops/precision_ops.h): values exactly representable in
// bfloat16, and on GPUs the same values as 2-byte bfloat16 in `halves` (the
// f32 element at byte begin + 4 i is halves' element i; null when not
// made). Lets a matrix product read a rounded layer output as it is instead
// of converting it again. Without `values_rounded` (GPUs, with halves: a
// layer output that only products read) the f32 bytes still hold the
// values before rounding and the halves alone hold the rounded ones, until
// RoundToBFloat16InPlace rounds the f32 bytes too.
struct Bf16Rendering {
  size_t begin = 0;
  size_t end = 0;
  std::shared_ptr<Buffer> halves;
  bool values_rounded = true;
};

// One allocation. Frees itself through its allocator.
//
// The rendering: set by the thread that wrote the bytes, before it shares
// the buffer. Only layer outputs and rounded copies get one
// (ops/precision_ops.h), and of the in-place writers only CopyFrom can
// reach those (it drops the rendering, after RoundRenderedValues has
// rounded values left in the halves alone): ops never write their inputs,
// and the others (Variable::Assign*, optimizer and moving-average updates,
// the in-place all-reduce of gradients) write variables, slots and
// gradients. A new in-place writer of op outputs must do the same.
//
// The bfloat16 copy: under mixed bfloat16 on a GPU, the value buffer of a
// variable an optimizer updates holds its f32 values also as 2-byte
// bfloat16 (rounded to nearest even), the form the matrix products read,
// so no step converts the weights again (ops::KeepBf16Copy). Unlike the
// rendering it says nothing of the f32 values, and every in-place writer
// keeps it equal to their rounding: CopyFrom and RefreshBf16Copy convert
// the buffer again, ops::ApplyUpdates writes it in the update's own pass.
// A captured CUDA graph reads it at a fixed address, so it is never
// dropped or moved while the buffer lives. A new in-place writer of
// variables must refresh it too.
class Buffer {
 public:
  static absl::StatusOr<std::shared_ptr<Buffer>> Allocate(Allocator* allocator,
                                                          size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return allocator_->device(); }

  const std::optional<Bf16Rendering>& bf16_rendering() const {
    return bf16_rendering_;
  }
  void set_bf16_rendering(std::optional<Bf16Rendering> rendering) {
    bf16_rendering_ = std::move(rendering);
  }

  // When the rendering's rounded values are in its halves alone
  // (Bf16Rendering::values_rounded false): rounds the f32 bytes of its
  // range in place, on the calling thread's stream, and records it.
  // Nothing otherwise.
  absl::Status RoundRenderedValues();

  // The bfloat16 copy of the f32 values, 2 bytes per 4 (null: none).
  const std::shared_ptr<Buffer>& bf16_copy() const { return bf16_copy_; }
  // Gives the buffer `copy` and fills it from the f32 values.
  absl::Status SetBf16Copy(std::shared_ptr<Buffer> copy);
  // After an in-place write of the f32 values: converts them into the copy
  // again (on the calling thread's stream). Nothing without a copy.
  absl::Status RefreshBf16Copy();

 private:
  Buffer(Allocator* allocator, void* data, size_t bytes)
      : allocator_(allocator), data_(data), bytes_(bytes) {}
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
  std::optional<Bf16Rendering> bf16_rendering_;
  std::shared_ptr<Buffer> bf16_copy_;
};

class Tensor {
 public:
  Tensor() = default;  // Undefined; defined() is false.

  // Uninitialised storage on `device`.
  static absl::StatusOr<Tensor> Empty(DType dtype, Shape shape,
                                      Device device = Device::Cpu());
  // Uninitialised storage from a given allocator, on its device (e.g.
  // cuda::PinnedHostAllocator() for host staging buffers).
  static absl::StatusOr<Tensor> EmptyWith(Allocator* allocator, DType dtype,
                                          Shape shape);
  // Zero-filled storage on `device`.
  static absl::StatusOr<Tensor> Zeros(DType dtype, Shape shape,
                                      Device device = Device::Cpu());
  // Host tensors; these only fail on host out-of-memory, and then throw
  // std::bad_alloc as std::vector does, so they return the tensor directly.
  static Tensor HostEmpty(DType dtype, Shape shape);
  static Tensor HostZeros(DType dtype, Shape shape);
  static Tensor HostFull(DType dtype, Shape shape, double value);
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, Shape shape);
  template <typename T>
  static Tensor Scalar(T value) {
    return FromVector<T>({value}, {});
  }

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl_->dtype; }
  const Shape& shape() const { return impl_->shape; }
  int rank() const { return static_cast<int>(impl_->shape.size()); }
  int64_t dim(int i) const { return impl_->shape[i]; }
  int64_t num_elements() const { return impl_->num_elements; }
  size_t bytes() const { return num_elements() * DTypeSize(dtype()); }
  Device device() const { return impl_->buffer->device(); }
  // Unique per tensor (not per handle); the tape keys on it.
  int64_t id() const { return impl_->id; }

  // Where its elements start in its buffer (views of one buffer differ).
  size_t byte_offset() const { return impl_->byte_offset; }
  void* raw_data() const {
    return static_cast<char*>(impl_->buffer->data()) + impl_->byte_offset;
  }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  // The buffer's bfloat16 rendering when it covers this tensor's bytes
  // (Bf16Rendering), else null.
  const Bf16Rendering* bf16_rendering() const;
  // Records that this tensor's bytes hold bfloat16-exact values (and their
  // 2-byte copy, `halves`, on GPUs), or without `values_rounded` that the
  // halves hold them (Bf16Rendering); replaces the buffer's rendering.
  void set_bf16_rendering(std::shared_ptr<Buffer> halves,
                          bool values_rounded = true) const;
  // Buffer::RoundRenderedValues of this tensor's buffer.
  absl::Status RoundRenderedValues() const {
    return impl_->buffer->RoundRenderedValues();
  }
  // The buffer's bfloat16 copy (Buffer::bf16_copy) from this tensor's first
  // value on, sharing the copy's ownership; null when the buffer has none
  // or this is not an f32 tensor.
  std::shared_ptr<void> bf16_copy() const;
  // Buffer::SetBf16Copy and Buffer::RefreshBf16Copy of this tensor's buffer.
  absl::Status SetBf16Copy(std::shared_ptr<Buffer> copy) const {
    return impl_->buffer->SetBf16Copy(std::move(copy));
  }
  absl::Status RefreshBf16Copy() const {
    return impl_->buffer->RefreshBf16Copy();
  }
  // Whether the buffer has a bfloat16 rendering or copy, which CopyFrom
  // into or out of it keeps in step with the bytes (no plain byte copy).
  bool HasBf16Forms() const {
    return impl_->buffer->bf16_rendering().has_value() ||
           impl_->buffer->bf16_copy() != nullptr;
  }

  // True when both handles address the same bytes.
  bool SharesBufferWith(const Tensor& other) const {
    return impl_->buffer == other.impl_->buffer;
  }
  // True when this handle is the only one to its tensor and no other
  // tensor views its buffer: nothing else can read or write these bytes,
  // so they may be overwritten in place. Exact only when no other thread
  // can hold a handle to the tensor or a view of its buffer (the counts
  // only grow by copying a handle one already has, but a count another
  // thread just lowered is not ordered after that thread's last access):
  // a thread that gets a handle gets it from the caller, who keeps its
  // own until that thread is done, or is joined before the check.
  bool IsExclusive() const {
    return impl_.use_count() == 1 && impl_->buffer.use_count() == 1;
  }

  // A view with a new shape and the same elements (no copy, new id).
  absl::StatusOr<Tensor> Reshaped(Shape shape) const;
  // A view of rows [start, start + count) along dimension 0 (no copy, new
  // id); how batches are cut into replica shards and im2col chunks.
  absl::StatusOr<Tensor> SliceRows(int64_t start, int64_t count) const;
  // A fresh copy on the same device.
  absl::StatusOr<Tensor> Clone() const;
  // A copy on `device` (this tensor itself when already there, its values
  // first rounded into its f32 bytes when its halves alone held them).
  absl::StatusOr<Tensor> To(Device device) const;
  // Copies `src` (same dtype and element count, any device) into this (a
  // source whose values are in its halves alone is rounded first); drops
  // the buffer's bfloat16 rendering (rounding the f32 values it left
  // unrounded first) and refreshes its bfloat16 copy
  // (the whole buffer's, on the calling thread's stream after the copy, not
  // waited for).
  absl::Status CopyFrom(const Tensor& src);

  // Host-only convenience accessors for tests and I/O.
  template <typename T>
  std::vector<T> ToVector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + num_elements());
  }
  // Element i converted to double (host tensors, any dtype).
  double ScalarAt(int64_t i) const;

  std::string DebugString() const;  // "f32[2,3]@cpu:0"

 private:
  struct Impl {
    std::shared_ptr<Buffer> buffer;
    size_t byte_offset = 0;
    Shape shape;
    int64_t num_elements = 0;
    DType dtype = DType::kF32;
    int64_t id = 0;
  };
  static Tensor Wrap(std::shared_ptr<Buffer> buffer, size_t byte_offset,
                     Shape shape, DType dtype);
  std::shared_ptr<const Impl> impl_;
};

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, Shape shape) {
  // A size mismatch is a caller bug; the tensor is zero-padded or truncated
  // rather than reading out of bounds.
  Tensor t = HostZeros(DTypeOf<T>::value, std::move(shape));
  std::memcpy(t.raw_data(), values.data(),
              std::min(values.size(), static_cast<size_t>(t.num_elements())) *
                  sizeof(T));
  return t;
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_TENSOR_H_
