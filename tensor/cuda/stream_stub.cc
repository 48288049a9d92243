// stream.h without CUDA: nothing can be created, so nothing is ever owned.
#include "tensor/cuda/not_built.h"
#include "tensor/cuda/stream.h"

namespace mirrortrain::cuda {
namespace {

absl::Status NotBuilt() { return NotBuiltError(); }

}  // namespace

absl::StatusOr<Stream> Stream::Create(int, StreamPriority) {
  return NotBuilt();
}
Stream::Stream(Stream&&) noexcept {}
Stream& Stream::operator=(Stream&&) noexcept { return *this; }
Stream::~Stream() = default;
absl::Status Stream::Synchronize() const { return NotBuilt(); }
absl::StatusOr<int> Stream::Priority() const { return NotBuilt(); }

absl::StatusOr<Event> Event::Create(int) { return NotBuilt(); }
Event::Event(Event&&) noexcept {}
Event& Event::operator=(Event&&) noexcept { return *this; }
Event::~Event() = default;
absl::Status Event::Record(StreamHandle) { return NotBuilt(); }
absl::Status Event::MakeStreamWait(StreamHandle) const { return NotBuilt(); }
absl::Status Event::Synchronize() const { return NotBuilt(); }
absl::StatusOr<bool> Event::Query() const { return NotBuilt(); }

}  // namespace mirrortrain::cuda
