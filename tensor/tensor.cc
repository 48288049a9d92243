#include "tensor/tensor.h"

#include <atomic>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_kernels.h"
#include "tensor/status_macros.h"

namespace mirrortrain {
namespace {

int64_t NextTensorId() {
  static std::atomic<int64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::Status ValidateShape(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeToString(shape)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Buffer>> Buffer::Allocate(Allocator* allocator,
                                                         size_t bytes) {
  MT_ASSIGN_OR_RETURN(void* data, allocator->Allocate(bytes));
  return std::shared_ptr<Buffer>(new Buffer(allocator, data, bytes));
}

Buffer::~Buffer() { allocator_->Deallocate(data_, bytes_); }

absl::Status Buffer::SetBf16Copy(std::shared_ptr<Buffer> copy) {
  constexpr size_t kF32Bytes = 4, kBf16Bytes = 2;
  if (copy == nullptr || !device().is_cuda() || copy->device() != device() ||
      copy->bytes() < bytes_ / kF32Bytes * kBf16Bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bfloat16 copy of a ", bytes_, "-byte buffer on ", device().ToString(),
        ": want a GPU buffer of half its size on the same device"));
  }
  bf16_copy_ = std::move(copy);
  return RefreshBf16Copy();
}

absl::Status Buffer::RoundRenderedValues() {
  if (!bf16_rendering_.has_value() || bf16_rendering_->values_rounded) {
    return absl::OkStatus();
  }
  if (!device().is_cuda()) {
    return absl::InternalError(
        "a bfloat16 rendering with its values in halves alone off a GPU");
  }
  void* first = static_cast<char*>(data_) + bf16_rendering_->begin;
  MT_RETURN_IF_ERROR(cuda::RoundToBFloat16(
      first, first, nullptr,
      static_cast<int64_t>((bf16_rendering_->end - bf16_rendering_->begin) / 4),
      device().index));
  bf16_rendering_->values_rounded = true;
  return absl::OkStatus();
}

absl::Status Buffer::RefreshBf16Copy() {
  if (bf16_copy_ == nullptr) return absl::OkStatus();
  return cuda::ToBFloat16(data_, bf16_copy_->data(),
                          static_cast<int64_t>(bytes_ / 4), device().index);
}

Tensor Tensor::Wrap(std::shared_ptr<Buffer> buffer, size_t byte_offset,
                    Shape shape, DType dtype) {
  auto impl = std::make_shared<Impl>();
  impl->buffer = std::move(buffer);
  impl->byte_offset = byte_offset;
  impl->num_elements = NumElements(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->id = NextTensorId();
  Tensor t;
  t.impl_ = std::move(impl);
  return t;
}

absl::StatusOr<Tensor> Tensor::Empty(DType dtype, Shape shape, Device device) {
  MT_ASSIGN_OR_RETURN(Allocator * allocator, AllocatorFor(device));
  return EmptyWith(allocator, dtype, std::move(shape));
}

absl::StatusOr<Tensor> Tensor::EmptyWith(Allocator* allocator, DType dtype,
                                         Shape shape) {
  MT_RETURN_IF_ERROR(ValidateShape(shape));
  const std::optional<int64_t> n = CheckedNumElements(shape);
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  if (!n.has_value() || *n > std::numeric_limits<int64_t>::max() / size) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", DTypeName(dtype), " tensor of shape ",
                     ShapeToString(shape), " has more bytes than fit 64 bits"));
  }
  MT_ASSIGN_OR_RETURN(auto buffer, Buffer::Allocate(allocator, *n * size));
  return Wrap(std::move(buffer), 0, std::move(shape), dtype);
}

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, Shape shape, Device device) {
  MT_ASSIGN_OR_RETURN(Tensor t, Empty(dtype, std::move(shape), device));
  if (device.is_cpu()) {
    std::memset(t.raw_data(), 0, t.bytes());
  } else {
    MT_RETURN_IF_ERROR(cuda::Memset(t.raw_data(), 0, t.bytes(), device.index));
  }
  return t;
}

Tensor Tensor::HostEmpty(DType dtype, Shape shape) {
  absl::StatusOr<Tensor> t = Empty(dtype, std::move(shape), Device::Cpu());
  // Host OOM (or a negative dimension, a caller bug) behaves as in
  // std::vector's constructor.
  if (!t.ok()) throw std::bad_alloc();
  return *std::move(t);
}

Tensor Tensor::HostZeros(DType dtype, Shape shape) {
  Tensor t = HostEmpty(dtype, std::move(shape));
  std::memset(t.raw_data(), 0, t.bytes());
  return t;
}

Tensor Tensor::HostFull(DType dtype, Shape shape, double value) {
  Tensor t = HostEmpty(dtype, std::move(shape));
  int64_t n = t.num_elements();
  switch (dtype) {
    case DType::kF32:
      std::fill_n(t.data<float>(), n, static_cast<float>(value));
      break;
    case DType::kF64:
      std::fill_n(t.data<double>(), n, value);
      break;
    case DType::kI32:
      std::fill_n(t.data<int32_t>(), n, static_cast<int32_t>(value));
      break;
    case DType::kI64:
      std::fill_n(t.data<int64_t>(), n, static_cast<int64_t>(value));
      break;
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshaped(Shape shape) const {
  MT_RETURN_IF_ERROR(ValidateShape(shape));
  // Checked: dimensions whose product overflows could wrap to the count.
  const std::optional<int64_t> count = CheckedNumElements(shape);
  if (!count.has_value() || *count != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape: cannot view ",
                                                   DebugString(), " as shape ",
                                                   ShapeToString(shape)));
  }
  return Wrap(impl_->buffer, impl_->byte_offset, std::move(shape), dtype());
}

absl::StatusOr<Tensor> Tensor::SliceRows(int64_t start, int64_t count) const {
  if (rank() < 1 || start < 0 || count < 0 || start + count > dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SliceRows: rows [", start, ", ", start + count,
                     ") out of range for ", DebugString()));
  }
  Shape shape = this->shape();
  const int64_t row_elems = dim(0) == 0 ? 0 : num_elements() / dim(0);
  shape[0] = count;
  return Wrap(impl_->buffer,
              impl_->byte_offset + start * row_elems * DTypeSize(dtype()),
              std::move(shape), dtype());
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  MT_ASSIGN_OR_RETURN(Tensor t, Empty(dtype(), shape(), device()));
  MT_RETURN_IF_ERROR(t.CopyFrom(*this));
  return t;
}

absl::StatusOr<Tensor> Tensor::To(Device device) const {
  if (this->device() == device) {
    // Its f32 bytes are what the caller gets: they must hold its values.
    MT_RETURN_IF_ERROR(RoundRenderedValues());
    return *this;
  }
  MT_ASSIGN_OR_RETURN(Tensor t, Empty(dtype(), shape(), device));
  MT_RETURN_IF_ERROR(t.CopyFrom(*this));
  return t;
}

const Bf16Rendering* Tensor::bf16_rendering() const {
  const std::optional<Bf16Rendering>& r = impl_->buffer->bf16_rendering();
  if (!r.has_value() || dtype() != DType::kF32) return nullptr;
  const size_t begin = impl_->byte_offset;
  return begin >= r->begin && begin + bytes() <= r->end ? &*r : nullptr;
}

void Tensor::set_bf16_rendering(std::shared_ptr<Buffer> halves,
                                bool values_rounded) const {
  impl_->buffer->set_bf16_rendering(
      Bf16Rendering{impl_->byte_offset, impl_->byte_offset + bytes(),
                    std::move(halves), values_rounded});
}

std::shared_ptr<void> Tensor::bf16_copy() const {
  const std::shared_ptr<Buffer>& copy = impl_->buffer->bf16_copy();
  if (copy == nullptr || dtype() != DType::kF32) return nullptr;
  return std::shared_ptr<void>(
      copy, static_cast<char*>(copy->data()) + impl_->byte_offset / 2);
}

absl::Status Tensor::CopyFrom(const Tensor& src) {
  if (src.dtype() != dtype() || src.num_elements() != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyFrom: cannot copy ", src.DebugString(), " into ", DebugString()));
  }
  // A source whose rounded values are in its halves alone: its f32 bytes
  // are made to hold them (a layer output only products read, copied
  // after all). Only ever one thread's buffer.
  MT_RETURN_IF_ERROR(src.impl_->buffer->RoundRenderedValues());
  // Checked first: threads may copy into views of one buffer at once,
  // and only a rendered buffer (one thread's, by contract) is written;
  // what this copy does not overwrite keeps rounded values.
  if (impl_->buffer->bf16_rendering().has_value()) {
    MT_RETURN_IF_ERROR(impl_->buffer->RoundRenderedValues());
    impl_->buffer->set_bf16_rendering(std::nullopt);
  }
  if (bytes() == 0) return absl::OkStatus();
  Device from = src.device(), to = device();
  if (from.is_cpu() && to.is_cpu()) {
    std::memmove(raw_data(), src.raw_data(), bytes());
    return absl::OkStatus();
  }
  MT_RETURN_IF_ERROR(cuda::Copy(raw_data(), to, src.raw_data(), from, bytes()));
  return impl_->buffer->RefreshBf16Copy();
}

double Tensor::ScalarAt(int64_t i) const {
  switch (dtype()) {
    case DType::kF32:
      return data<float>()[i];
    case DType::kF64:
      return data<double>()[i];
    case DType::kI32:
      return data<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(data<int64_t>()[i]);
  }
  return 0;
}

std::string Tensor::DebugString() const {
  if (!defined()) return "<undefined tensor>";
  return absl::StrCat(DTypeName(dtype()), ShapeToString(shape()), "@",
                      device().ToString());
}

}  // namespace mirrortrain
