// Byte buffers whose resize leaves the new bytes uninitialised, for
// buffers filled right after (a file read, a decompression): a
// std::vector<uint8_t> zeroes them first, one more pass over memory. For
// the Fashion-MNIST training images (26 MB read, 47 MB inflated, on the
// start-up's critical path) that was 6 ms of 98-104 ms on this project's
// CI machine.
#ifndef MIRRORTRAIN_TRAINER_DATA_UNINITIALIZED_BYTES_H_
#define MIRRORTRAIN_TRAINER_DATA_UNINITIALIZED_BYTES_H_

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace mirrortrain::trainer {

// std::allocator, but a value-initialisation (what resize asks for) is a
// default-initialisation: nothing is written for trivial types.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  explicit DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using UninitializedBytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_UNINITIALIZED_BYTES_H_
