// A byte budget per device, shared by threads: memory that is worth keeping
// (it saves recomputation) but not worth running out of memory for, such as
// the column buffers convolutions keep for their filter gradient. A holder
// reserves before keeping and keeps only if the reservation is granted; the
// bytes return when the last copy of the reservation is destroyed.
//
// Thread contract: every member may be called from any thread.
#ifndef MIRRORTRAIN_TENSOR_DEVICE_BYTE_BUDGET_H_
#define MIRRORTRAIN_TENSOR_DEVICE_BYTE_BUDGET_H_

#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"

namespace mirrortrain {

class DeviceByteBudget {
 public:
  // Shared ownership of reserved bytes; copies share them.
  using Reservation = std::shared_ptr<const void>;

  explicit DeviceByteBudget(int64_t limit) : limit_(limit) {}
  DeviceByteBudget(const DeviceByteBudget&) = delete;
  DeviceByteBudget& operator=(const DeviceByteBudget&) = delete;

  // `bytes` (>= 0) more on `device` if the device's total stays within the
  // limit, else null (nothing reserved). Reservations must not outlive the
  // budget.
  Reservation TryReserve(int device, int64_t bytes);
  // Applies to later reservations; those held stay.
  void set_limit(int64_t limit);
  int64_t limit() const;
  // Bytes reserved on `device` now.
  int64_t reserved(int device) const;

 private:
  void Release(int device, int64_t bytes);

  mutable std::mutex mu_;
  int64_t limit_;                               // Guarded by mu_.
  absl::flat_hash_map<int, int64_t> reserved_;  // Guarded by mu_.
};

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_DEVICE_BYTE_BUDGET_H_
