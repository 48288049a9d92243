// Status propagation helpers used across mirrortrain.
//
// Abseil (the Debian 20220623 release) ships absl::Status but no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so these are the project's own.
#ifndef MIRRORTRAIN_TENSOR_STATUS_MACROS_H_
#define MIRRORTRAIN_TENSOR_STATUS_MACROS_H_

#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status _mt_status = (expr);      \
    if (!_mt_status.ok()) return _mt_status; \
  } while (0)

#define MT_STATUS_CONCAT_INNER_(a, b) a##b
#define MT_STATUS_CONCAT_(a, b) MT_STATUS_CONCAT_INNER_(a, b)

// MT_ASSIGN_OR_RETURN(auto x, Foo()); declares/assigns x or returns the error.
#define MT_ASSIGN_OR_RETURN(lhs, expr)                                       \
  MT_ASSIGN_OR_RETURN_IMPL_(MT_STATUS_CONCAT_(_mt_statusor_, __LINE__), lhs, \
                            expr)

#define MT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

namespace mirrortrain {

// Runs `f` (returning absl::Status) and turns an exception escaping it
// into a Status: std::bad_alloc or std::length_error (a standard container
// or HostEmpty that could not get its memory) and a thread that could not
// start (std::system_error with EAGAIN: the process's or user's thread
// limit) into ResourceExhausted, any other (a library that throws: the
// standard library, yaml-cpp) into Internal naming it. Where work runs on
// behalf of a caller that expects a Status (a replica step, a command), a
// failure is a Status, never the end of the process, and a replica that fails
// this way still reaches the points its peers wait at (a capture's latches).
template <typename F>
absl::Status CatchExceptions(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of host memory");
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(std::string("allocation too large: ") +
                                        e.what());
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::resource_unavailable_try_again) {
      return absl::ResourceExhaustedError(
          std::string("could not start a thread (") + e.what() +
          "): the thread limit of the process or user (ulimit -u) is reached");
    }
    return absl::InternalError(std::string("unexpected exception: ") +
                               e.what());
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("unexpected exception: ") +
                               e.what());
  } catch (...) {
    return absl::InternalError("unexpected exception of an unknown type");
  }
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_STATUS_MACROS_H_
