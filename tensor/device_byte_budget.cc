#include "tensor/device_byte_budget.h"

namespace mirrortrain {

DeviceByteBudget::Reservation DeviceByteBudget::TryReserve(int device,
                                                           int64_t bytes) {
  {
    std::lock_guard lock(mu_);
    int64_t& total = reserved_[device];
    if (bytes < 0 || bytes > limit_ - total) return nullptr;
    total += bytes;
  }
  // The deleter gives the bytes back; the pointer itself is never read.
  return Reservation(
      static_cast<const void*>(this),
      [this, device, bytes](const void*) { Release(device, bytes); });
}

void DeviceByteBudget::Release(int device, int64_t bytes) {
  std::lock_guard lock(mu_);
  reserved_[device] -= bytes;
}

void DeviceByteBudget::set_limit(int64_t limit) {
  std::lock_guard lock(mu_);
  limit_ = limit;
}

int64_t DeviceByteBudget::limit() const {
  std::lock_guard lock(mu_);
  return limit_;
}

int64_t DeviceByteBudget::reserved(int device) const {
  std::lock_guard lock(mu_);
  const auto it = reserved_.find(device);
  return it == reserved_.end() ? 0 : it->second;
}

}  // namespace mirrortrain
