// The owner of an open file descriptor (RAII), for the system calls that
// Debian's libraries do not wrap for us.
#ifndef MIRRORTRAIN_TRAINER_UNIQUE_FD_H_
#define MIRRORTRAIN_TRAINER_UNIQUE_FD_H_

namespace mirrortrain::trainer {

// An open file descriptor, closed when destroyed. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  // Gives up ownership: the caller closes it.
  int Release();

 private:
  int fd_ = -1;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_UNIQUE_FD_H_
