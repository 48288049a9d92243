#include "trainer/unique_fd.h"

#include <unistd.h>

#include <utility>

namespace mirrortrain::trainer {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.Release();
  }
  return *this;
}

int UniqueFd::Release() { return std::exchange(fd_, -1); }

}  // namespace mirrortrain::trainer
